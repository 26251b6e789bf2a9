// A local OIDC identity provider for the jwt link's tests: node:http serving the
// discovery document and the JWKS, keys made with node:crypto (RSA, P-256, Ed25519),
// tokens signed here. The JWKS can be changed (rotation), made to fail (503) or to
// hang (never answer), and every JWKS request is counted and can be awaited.
import { createServer } from 'node:http';
import { generateKeyPairSync, sign as cryptoSign, createHmac } from 'node:crypto';
import { deferred } from './util.mjs';

const b64 = (data) => Buffer.from(data).toString('base64url');

/** A signing key: `alg` RS256 | ES256 | EdDSA, with its public JWK. */
export function makeKey(alg, kid) {
  const { privateKey, publicKey } =
    alg === 'RS256' ? generateKeyPairSync('rsa', { modulusLength: 2048 })
    : alg === 'ES256' ? generateKeyPairSync('ec', { namedCurve: 'P-256' })
    : generateKeyPairSync('ed25519');
  const jwk = { ...publicKey.export({ format: 'jwk' }), kid, use: 'sig', alg };
  return { alg, kid, privateKey, publicKey, jwk };
}

/** A compact JWS of `claims` signed by `key` (header fields overridable). */
export function signToken(key, claims, header = {}) {
  const h = { alg: key.alg, typ: 'JWT', kid: key.kid, ...header };
  const input = `${b64(JSON.stringify(h))}.${b64(JSON.stringify(claims))}`;
  const data = Buffer.from(input);
  const sig =
    key.alg === 'RS256' ? cryptoSign('sha256', data, key.privateKey)
    : key.alg === 'ES256' ? cryptoSign('sha256', data, { key: key.privateKey, dsaEncoding: 'ieee-p1363' })
    : cryptoSign(null, data, key.privateKey);
  return `${input}.${b64(sig)}`;
}

/** Forgeries: alg none, and HS256 keyed with the RSA public key's PEM. */
export function forgedTokens(rsaKey, claims) {
  const none = `${b64(JSON.stringify({ alg: 'none', typ: 'JWT', kid: rsaKey.kid }))}.${b64(JSON.stringify(claims))}.`;
  const pem = rsaKey.publicKey.export({ type: 'spki', format: 'pem' });
  const input = `${b64(JSON.stringify({ alg: 'HS256', typ: 'JWT', kid: rsaKey.kid }))}.${b64(JSON.stringify(claims))}`;
  const hs256 = `${input}.${createHmac('sha256', pem).update(input).digest('base64url')}`;
  return { none, hs256 };
}

/**
 * Starts the issuer. `keys`: the keys its JWKS lists at first. Returns
 * { url, issuer, setKeys(keys), mode(up|down|hang), jwksRequests, nextJwksRequest(), close() }.
 */
export async function startIssuer({ t, keys = [] } = {}) {
  let listed = keys;
  let mode = 'up';
  let waiters = [];
  const held = new Set();
  const state = { jwksRequests: 0 };
  const server = createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    if (url.pathname === '/.well-known/openid-configuration') {
      if (mode !== 'up') return answerDown(req, res);
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ issuer: state.issuer, jwks_uri: `${state.issuer}/keys`, id_token_signing_alg_values_supported: ['RS256', 'ES256', 'EdDSA'] }));
    }
    if (url.pathname === '/keys') {
      state.jwksRequests += 1;
      const w = waiters;
      waiters = [];
      for (const d of w) d.resolve(state.jwksRequests);
      if (mode !== 'up') return answerDown(req, res);
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ keys: listed.map((k) => k.jwk) }));
    }
    res.writeHead(404).end();
  });
  function answerDown(req, res) {
    if (mode === 'down') return res.writeHead(503).end('down');
    held.add(res);  // hang: never answered (closed with the server)
    res.on('close', () => held.delete(res));
  }
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.issuer = `http://127.0.0.1:${server.address().port}`;
  const close = () =>
    new Promise((resolve) => {
      for (const r of held) r.destroy();
      server.closeAllConnections?.();
      server.close(() => resolve());
    });
  if (t) t.after(close);
  return {
    get url() { return state.issuer; },
    get issuer() { return state.issuer; },
    get jwksRequests() { return state.jwksRequests; },
    setKeys(k) { listed = k; },
    mode(m) { mode = m; },
    /** Resolves at the next JWKS request (with the count so far). */
    nextJwksRequest() {
      const d = deferred();
      waiters.push(d);
      return d.promise;
    },
    close,
  };
}
