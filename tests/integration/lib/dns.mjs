// A real DNS server for discovery tests: Debian's dnsmasq on a loopback port, answering
// from a hosts file the test rewrites (`set`, then SIGHUP: dnsmasq reads it again) and
// from SRV records given at start. TTL 1 s. `lookup(name)` asks it directly (node's
// resolver), so a test can await a change in the server before looking at the gateway.
import { spawn } from 'node:child_process';
import { promises as dnsp } from 'node:dns';
import { writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { closedPort, eventually, makeTempDir } from './util.mjs';

export async function startDnsmasq({ t, hosts = {}, srv = [] } = {}) {
  const dir = makeTempDir('tahua-dns-');
  chmodSync(dir, 0o755);  // dnsmasq reads the hosts file after dropping privileges
  const file = join(dir, 'hosts');
  const write = (h) => {
    const lines = [];
    for (const [name, ips] of Object.entries(h)) for (const ip of ips) lines.push(`${ip} ${name}`);
    writeFileSync(file, lines.join('\n') + '\n', { mode: 0o644 });
  };
  write(hosts);
  const port = await closedPort();
  const args = ['--keep-in-foreground', `--port=${port}`, '--listen-address=127.0.0.1', '--bind-interfaces', '--no-resolv',
    '--no-hosts', `--addn-hosts=${file}`, '--local-ttl=1', '--conf-file=/dev/null', '--pid-file=', '--log-facility=/dev/null',
    ...srv.map((s) => `--srv-host=${s.name},${s.target},${s.port},${s.priority ?? 0},${s.weight ?? 1}`)];
  if (process.getuid?.() === 0) args.push('--user=root');
  const child = spawn('dnsmasq', args, { stdio: 'ignore' });
  child.unref();
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const resolver = new dnsp.Resolver({ timeout: 500, tries: 1 });
  resolver.setServers([`127.0.0.1:${port}`]);
  const lookup = async (name) => {
    try {
      return (await resolver.resolve4(name)).sort();
    } catch {
      return [];
    }
  };
  const server = {
    port,
    address: `127.0.0.1:${port}`,
    lookup,
    /** Replaces the A records and waits until dnsmasq answers with them. */
    async set(h) {
      write(h);
      child.kill('SIGHUP');
      for (const [name, ips] of Object.entries(h)) {
        const want = [...ips].sort().join(',');
        await eventually(async () => (await lookup(name)).join(',') === want, { timeout: 5000, what: `dnsmasq answering ${name} = ${want}` });
      }
    },
    async stop() {
      if (child.exitCode !== null) return;
      child.ref();
      child.kill('SIGKILL');
      await exited;
    },
  };
  if (t) t.after(() => server.stop());
  for (const [name, ips] of Object.entries(hosts)) {
    const want = [...ips].sort().join(',');
    await eventually(async () => (await lookup(name)).join(',') === want, { timeout: 5000, what: `dnsmasq answering ${name}` });
  }
  return server;
}
