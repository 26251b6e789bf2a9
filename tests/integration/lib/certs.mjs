// Test PKI made with the `openssl` CLI: a throwaway CA and leaf certificates it signs.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeTempDir } from './util.mjs';

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function openssl(args, cwd) {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** A new self-signed CA: `{ dir, caFile, caKeyFile, ca }` (ca = PEM text). */
export function makeCa(name = 'tahua test CA') {
  const dir = makeTempDir('tahua-pki-');
  openssl(
    [
      'req', '-x509', ...EC, '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', `/CN=${name}`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
  const caFile = join(dir, 'ca.crt');
  return { dir, caFile, caKeyFile: join(dir, 'ca.key'), ca: readFileSync(caFile, 'utf8') };
}

let serial = 0;

/**
 * A server certificate signed by `ca` for the given subjectAltNames
 * (e.g. ['DNS:localhost', 'IP:127.0.0.1']): `{ certFile, keyFile, cert, key }`.
 */
export function issueCert(ca, sans = ['DNS:localhost', 'IP:127.0.0.1']) {
  serial += 1;
  const base = `leaf${serial}`;
  const ext = join(ca.dir, `${base}.ext`);
  writeFileSync(
    ext,
    [
      `subjectAltName=${sans.join(',')}`,
      'basicConstraints=CA:FALSE',
      'keyUsage=critical,digitalSignature',
      'extendedKeyUsage=serverAuth',
    ].join('\n'),
  );
  openssl(['req', ...EC, '-keyout', `${base}.key`, '-out', `${base}.csr`, '-subj', `/CN=${sans[0].split(':')[1]}`], ca.dir);
  openssl(
    [
      'x509', '-req', '-in', `${base}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-set_serial', String(1000 + serial),
      '-out', `${base}.crt`, '-days', '2', '-extfile', ext,
    ],
    ca.dir,
  );
  const certFile = join(ca.dir, `${base}.crt`);
  const keyFile = join(ca.dir, `${base}.key`);
  return { certFile, keyFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') };
}
