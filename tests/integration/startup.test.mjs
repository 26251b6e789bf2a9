// Process start-up and connection limits: refusing a port another process already
// listens on; server.max_connections.
import { describe, it } from 'node:test';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { REPO_ROOT, TAHUA_BIN, checkConfig, gatewayConfig, openaiProvider, startTahua, writeConfig } from './lib/tahua.mjs';
import { request } from './lib/http.mjs';
import { RawClient, rawRequest } from './lib/raw.mjs';
import { eventually } from './lib/util.mjs';
import { find, parseMetrics, sum } from './lib/metrics.mjs';

/** `n` keep-alive connections to `port`, each answered once (so the gateway holds them). */
async function holdConnections(t, port, n) {
  const held = [];
  for (let i = 0; i < n; i += 1) {
    const c = await RawClient.connect(port);
    t.after(() => c.destroy());
    await c.write(rawRequest('GET', '/healthz'));
    assert.equal((await c.readResponse()).status, 200);
    held.push(c);
  }
  return held;
}

describe('start-up', () => {
  it('refuses to start on a port another tahua already listens on (no silent SO_REUSEPORT sharing)', async (t) => {
    const first = await startTahua({ t, args: ['--listen', '127.0.0.1:0'] });
    await assert.rejects(
      startTahua({ t, args: ['--listen', `127.0.0.1:${first.port}`] }),
      /exit code 1,[\s\S]*address in use/,
    );
    // The first one is unaffected.
    const res = await request(first.url, '/healthz');
    assert.equal(res.status, 200);
  });

  it('--listen replaces the listeners: a config without any starts with it; without --listen it is refused', async (t) => {
    const config = gatewayConfig({ providers: [openaiProvider('up', 'http://127.0.0.1:9/v1')], models: [{ name: 'm', provider: 'up' }] });
    delete config.listeners;
    const gw = await startTahua({ t, config, args: ['--listen', '127.0.0.1:0'] });
    assert.equal((await request(gw.url, '/healthz')).status, 200);
    const checked = checkConfig(writeConfig(config));
    assert.equal(checked.status, 1);
    assert.match(checked.stderr, /listeners: required: at least one listener \(or --listen\)/);
  });
});

describe('server.max_connections', () => {
  it('answers 503 gateway_overloaded and closes connections over the limit, and recovers', async (t) => {
    const gw = await startTahua({
      t,
      config: gatewayConfig({
        server: { workers: 1, max_connections: 1 },
        providers: [{ name: 'mock', type: 'mock' }],
        models: [{ name: 'm', provider: 'mock' }],
      }),
    });
    // The first connection is served and kept alive: it holds the only slot.
    const first = await RawClient.connect(gw.port);
    await first.write(rawRequest('GET', '/healthz'));
    assert.equal((await first.readResponse()).status, 200);

    const second = await RawClient.connect(gw.port);
    const rejected = await second.readResponse();
    assert.equal(rejected.status, 503);
    assert.equal(JSON.parse(rejected.body.toString()).error.code, 'gateway_overloaded');
    await second.closed;

    // Once the first leaves, a new connection is served again (the slot is freed when
    // the gateway notices the close, so poll).
    first.destroy();
    let third;
    await eventually(async () => {
      third?.destroy();
      third = await RawClient.connect(gw.port);
      await third.write(rawRequest('GET', '/healthz'));
      return (await third.readResponse()).status === 200;
    }, { what: 'a connection served after the slot was freed' });
    await third.write(rawRequest('GET', '/metrics'));
    const metrics = (await third.readResponse()).body.toString();
    third.destroy();
    assert.match(metrics, /^tahua_connections_rejected_total [1-9]/m);
  });

  it('tahua_connections_rejected_total counts exactly the connections refused', async (t) => {
    const gw = await startTahua({
      t,
      config: gatewayConfig({
        // One worker: the limit is split over workers, so with several the kernel's
        // spread would decide which connection is over a worker's share.
        server: { workers: 1, max_connections: 2 },
        providers: [{ name: 'mock', type: 'mock' }],
        models: [{ name: 'm', provider: 'mock' }],
      }),
    });
    // Two connections hold the two slots (each answered, so the gateway has them).
    const held = await holdConnections(t, gw.port, 2);
    // The third is refused: its 503 and the close are the event awaited.
    const third = await RawClient.connect(gw.port);
    t.after(() => third.destroy());
    const refused = await third.readResponse();
    assert.equal(refused.status, 503);
    assert.equal(JSON.parse(refused.body.toString()).error.code, 'gateway_overloaded');
    await third.closed;
    // Scraped over a held keep-alive connection: a new one would be refused (and counted).
    await held[0].write(rawRequest('GET', '/metrics'));
    const res = await held[0].readResponse();
    assert.equal(res.status, 200);
    const metrics = parseMetrics(res.body.toString());
    assert.equal(find(metrics, 'tahua_connections_rejected_total').length, 1, 'the metric is exported');
    assert.equal(sum(metrics, 'tahua_connections_rejected_total'), 1);
    assert.equal(sum(metrics, 'tahua_active_connections'), 2);
  });
});

describe('malloc tuning (src/core/malloc_tuning.cpp)', () => {
  const environ = (gw) => readFileSync(`/proc/${gw.child.pid}/environ`, 'latin1').split('\0');
  const tunables = (gw) => environ(gw).filter((e) => e.startsWith('GLIBC_TUNABLES='));
  const listen = ['--listen', '127.0.0.1:0'];

  // The gateway's build links tcmalloc (CMakeLists.txt, TAHUA_TCMALLOC); the sanitizer
  // build (test.sh's second pass) has ASan's allocator instead. Neither has glibc's to
  // tune, so neither runs itself again (a glibc build, TAHUA_TCMALLOC=OFF, would).
  const mapped = (gw, lib) => readFileSync(`/proc/${gw.child.pid}/maps`, 'latin1').includes(lib);

  it("allocates with tcmalloc (ASan's allocator in the sanitizer build), and does not run itself again", async (t) => {
    const gw = await startTahua({ t, args: listen, env: { GLIBC_TUNABLES: undefined, LD_PRELOAD: undefined, TAHUA_MALLOC_TUNING: undefined } });
    assert.equal(mapped(gw, 'libtcmalloc_minimal'), !mapped(gw, 'libasan'));
    assert.deepEqual(tunables(gw), []);
    assert.equal((await request(gw.url, '/healthz')).status, 200);
  });

  it("keeps the operator's GLIBC_TUNABLES, and TAHUA_MALLOC_TUNING=off turns it off", async (t) => {
    const own = await startTahua({ t, args: listen, env: { GLIBC_TUNABLES: 'glibc.malloc.tcache_count=8', LD_PRELOAD: undefined } });
    assert.deepEqual(tunables(own), ['GLIBC_TUNABLES=glibc.malloc.tcache_count=8']);
    const off = await startTahua({ t, args: listen, env: { GLIBC_TUNABLES: undefined, LD_PRELOAD: undefined, TAHUA_MALLOC_TUNING: 'off' } });
    assert.deepEqual(tunables(off), []);
  });
});

describe('process and thread names (src/core/thread_name.cpp)', () => {
  it('the process is named after its program (not "exe" after running itself again), each thread after its work', async (t) => {
    const config = gatewayConfig({ server: { workers: 2 }, providers: [{ name: 'mock', type: 'mock' }], models: [{ name: 'm', provider: 'mock' }] });
    const gw = await startTahua({ t, config, env: { GLIBC_TUNABLES: undefined, LD_PRELOAD: undefined, TAHUA_MALLOC_TUNING: undefined } });
    const comm = (path) => readFileSync(path, 'latin1').trim();
    // `pgrep tahua` and `ps` find it by this name.
    assert.equal(comm(`/proc/${gw.child.pid}/comm`), 'tahua');
    const threads = () => readdirSync(`/proc/${gw.child.pid}/task`).map((tid) => comm(`/proc/${gw.child.pid}/task/${tid}/comm`));
    // A worker names itself as its thread starts, which may come after "listening".
    const names = await eventually(() => {
      const now = threads();
      return ['tahua-worker-0', 'tahua-worker-1', 'tahua-log'].every((n) => now.includes(n)) && now;
    }, { what: `tahua-worker-0, tahua-worker-1 and tahua-log among the threads (${threads()})` });
    assert.ok(!names.includes('exe'), names.join(' '));
  });
});

describe('the admin listener under a full public listener', () => {
  it('admin calls (the dashboard) still get in when the public connections are at server.max_connections', async (t) => {
    const { adminSection, startWithAdmin } = await import('./lib/admin.mjs');
    const config = gatewayConfig({
      server: { workers: 1, max_connections: 2 },
      providers: [{ name: 'mock', type: 'mock' }],
      models: [{ name: 'm', provider: 'mock' }],
    });
    config.admin = adminSection();
    const { gw, admin, port: adminPort } = await startWithAdmin(t, config);
    // An operator's keep-alive admin connection (a dashboard) is open first: it does
    // not take one of the public listener's two slots.
    const operator = await RawClient.connect(adminPort);
    t.after(() => operator.destroy());
    await operator.write(rawRequest('GET', '/healthz'));
    assert.equal((await operator.readResponse()).status, 200);
    const held = await holdConnections(t, gw.port, 2);
    // The public listener is full; the admin one has its own cap (and its sessions do
    // not count against the public one's).
    const third = await RawClient.connect(gw.port);
    t.after(() => third.destroy());
    assert.equal((await third.readResponse()).status, 503);
    for (let i = 0; i < 3; i += 1) assert.equal((await admin('GET', '/admin/v1/metrics')).status, 200);
    await held[0].write(rawRequest('GET', '/metrics'));
    const metrics = parseMetrics((await held[0].readResponse()).body.toString());
    assert.equal(sum(metrics, 'tahua_connections_rejected_total'), 1);
  });
});

describe('tahua --help', () => {
  it('says what every flag does, what runs without a config, and where the guides are', () => {
    const run = (...args) => spawnSync(TAHUA_BIN, args, { encoding: 'utf8', timeout: 10_000 });
    const help = run('--help');
    assert.equal(help.status, 0);
    const text = help.stdout;
    // Every flag it lists is one the binary takes (an unknown one exits 2 naming it) ...
    const flags = [...new Set(text.match(/--[a-z-]+/g))];
    assert.ok(flags.length >= 7, text);
    for (const flag of flags) {
      const value = new RegExp(`${flag} [A-Z]`).test(text) ? [flag === '--probe' ? 'http://127.0.0.1:9/' : '127.0.0.1:0'] : [];
      // Ended by a config check of a missing file, so nothing starts serving.
      const r = run(flag, ...value, '--check-config', '/nonexistent.yaml');
      assert.doesNotMatch(r.stderr, /unknown argument/, `${flag} is listed but not taken`);
    }
    // ... and every flag the binary takes is listed with a line of its own.
    const main = readFileSync(join(REPO_ROOT, 'src/main.cpp'), 'utf8');
    for (const [, flag] of main.matchAll(/arg == "(--[a-z-]+)"/g)) assert.match(text, new RegExp(`^  ${flag}\\b`, 'm'), `${flag} described`);
    assert.match(text, /mock-gpt\) on 127\.0\.0\.1:8080/, 'the built-in config');
    for (const [, path] of text.matchAll(/(docs\/|README\.md|config\/tahua\.example\.yaml)/g))
      assert.ok(existsSync(join(REPO_ROOT, path)), `${path} exists`);
    // A mistake gets the short form on stderr and exit 2.
    const bad = run('--bogus');
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /unknown argument "--bogus"[\s\S]*usage: tahua/);
  });
});
