// The runtime image without a container engine (none runs on this machine or in CI, and no
// registry is reachable for `FROM debian:12`): deploy/image/rootfs.sh makes the runtime
// root filesystem exactly as the Dockerfile's runtime stage holds it, and the binary runs
// in it under chroot as the image's user (65532), with nothing else there: no shell, only
// the libraries of deploy/image/runtime-packages.txt. What ran: rootfs.sh on this build,
// `chroot --userspec=65532:65532` (as root; else `unshare -r` first). What did not:
// `podman build` of the Dockerfile itself.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { REPO_ROOT } from './lib/tahua.mjs';
import { makeTempDir, eventually } from './lib/util.mjs';
import { request } from './lib/http.mjs';

const SEED_IMAGE_BYTES = 45 * 1024 * 1024; // seed S1 §4.2: a 45 MB image
// The image holds the Release build (scripts/build.sh), also in the test command's
// sanitizer pass, whose TAHUA_BIN links the sanitizer runtimes.
const TAHUA_BIN = process.env.TAHUA_RELEASE_BIN ?? join(REPO_ROOT, 'build', 'tahua');
let root;
let runner = null; // the command prefix that runs a program inside `root` as 65532

function walk(dir, out = []) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    const st = statSync(p);
    if (st.isDirectory()) walk(p, out);
    else out.push({ path: '/' + relative(root, p), size: st.size });
  }
  return out;
}

// chroot needs CAP_SYS_CHROOT: root, or root in a user namespace of its own.
function findRunner() {
  const candidates = process.getuid?.() === 0
    ? [['chroot', '--userspec=65532:65532', root]]
    : [['unshare', '-r', 'chroot', root]];
  for (const prefix of candidates) {
    const r = spawnSync(prefix[0], [...prefix.slice(1), '/usr/local/bin/tahua', '--version'], { encoding: 'utf8' });
    if (r.status === 0) return prefix;
  }
  return null;
}

const inside = (...args) => spawnSync(runner[0], [...runner.slice(1), '/usr/local/bin/tahua', ...args], { encoding: 'utf8', timeout: 10000 });

before(() => {
  assert.ok(existsSync(TAHUA_BIN), `no binary at ${TAHUA_BIN}`);
  root = join(makeTempDir('tahua-rootfs-'), 'rootfs');
  const made = spawnSync(join(REPO_ROOT, 'deploy/image/rootfs.sh'), [TAHUA_BIN, root], { encoding: 'utf8' });
  assert.equal(made.status, 0, made.stderr);
  runner = findRunner();
});

describe('the runtime image (deploy/image/rootfs.sh)', () => {
  it('holds the binary, its libraries, the CA bundle and a user: no shell, under the seed image size', () => {
    const files = walk(root);
    const paths = files.map((f) => f.path);
    assert.ok(paths.includes('/usr/local/bin/tahua'));
    assert.ok(paths.includes('/etc/ssl/certs/ca-certificates.crt'));
    assert.ok(paths.includes('/lib64/ld-linux-x86-64.so.2'));
    for (const p of paths)
      assert.match(p, /^\/(usr\/local\/bin\/tahua|lib64\/ld-linux-x86-64\.so\.2|lib\/x86_64-linux-gnu\/lib[^/]+\.so[.\d]*|etc\/(passwd|group|hosts|nsswitch\.conf|ssl\/certs\/ca-certificates\.crt))$/, `unexpected file ${p}`);
    assert.ok(!existsSync(join(root, 'bin/sh')) && !existsSync(join(root, 'usr/bin')), 'no shell, no tools');
    const total = files.reduce((a, f) => a + f.size, 0);
    console.log(`runtime root filesystem: ${(total / 1048576).toFixed(1)} MiB in ${files.length} files`);
    assert.ok(total < SEED_IMAGE_BYTES, `${total} bytes: over the seed's 45 MB`);
    // The figure docs/deploying.md states is this one (to the MiB; a sanitizer build's root is larger).
    if (!paths.some((p) => /libasan/.test(p))) {
      const stated = Number(/read-only root: \*\*([\d.]+) MiB\*\*/.exec(readFileSync(join(REPO_ROOT, 'docs', 'deploying.md'), 'utf8'))?.[1]);
      assert.ok(Math.abs(stated - total / 1048576) < 1, `docs/deploying.md says ${stated} MiB, the root measures ${(total / 1048576).toFixed(1)}`);
    }
  });

  it('refuses a library outside the listed packages', () => {
    const dir = makeTempDir('tahua-rootfs-list-');
    const script = join(dir, 'rootfs.sh');
    // The same script beside a package list without libssl3.
    spawnSync('cp', [join(REPO_ROOT, 'deploy/image/rootfs.sh'), script]);
    const list = spawnSync('grep', ['-v', '^libssl3$', join(REPO_ROOT, 'deploy/image/runtime-packages.txt')], { encoding: 'utf8' }).stdout;
    writeFileSync(join(dir, 'runtime-packages.txt'), list);
    const r = spawnSync(script, [TAHUA_BIN, join(dir, 'out')], { encoding: 'utf8' });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /\(package libssl3\) is not in deploy\/image\/runtime-packages\.txt/);
  });

  it('the binary runs in it as 65532: --version, --check-config, serving, --probe, a clean drain, nothing written', async (t) => {
    if (!runner) return t.skip('chroot is not possible here (not root, and no user namespaces)');
    const version = inside('--version');
    assert.equal(version.status, 0, version.stderr);
    assert.match(version.stdout, /^tahua \d+\.\d+\.\d+\n$/);
    // A config file in the image's /etc/tahua (written as root, read as 65532).
    mkdirSync(join(root, 'etc/tahua'), { recursive: true });
    writeFileSync(join(root, 'etc/tahua/gateway.yaml'),
      'listeners: [{address: 127.0.0.1, port: 0}]\nproviders: [{name: m, type: mock}]\nmodels: [{name: mock-gpt, provider: m}]\n');
    const check = inside('--check-config', '/etc/tahua');
    assert.equal(check.status, 0, check.stderr);
    const before = walk(root).map((f) => f.path).sort();

    const port = 20000 + Math.floor(Math.random() * 20000);
    const child = spawn(runner[0], [...runner.slice(1), '/usr/local/bin/tahua', '--listen', `127.0.0.1:${port}`], { stdio: ['ignore', 'pipe', 'pipe'] });
    t.after(() => child.kill('SIGKILL'));
    let err = '';
    child.stderr.on('data', (d) => { err += d; });
    // 'close', not 'exit': exit can come before the last of stderr has been read (its "stopped" line).
    const exited = new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
    const started = Date.now();
    await eventually(() => /"msg":"listening"/.test(err), { timeout: 10000, what: `listening (${err})` });
    console.log(`started in ${Date.now() - started} ms (seed: 1.2 s)`);
    const health = await request(`http://127.0.0.1:${port}`, '/healthz');
    assert.equal(health.status, 200);
    const chat = await request(`http://127.0.0.1:${port}`, '/v1/chat/completions', {
      method: 'POST', json: { model: 'mock-gpt', messages: [{ role: 'user', content: 'hi' }] },
    });
    assert.equal(chat.status, 200, chat.text);
    assert.ok(chat.json.choices[0].message.content.length > 0);
    // The image's health check: the binary probes itself (no shell or curl).
    const probe = inside('--probe', `http://127.0.0.1:${port}/healthz`);
    assert.equal(probe.status, 0, probe.stderr);
    const down = inside('--probe', `http://127.0.0.1:${port}/nope`);
    assert.equal(down.status, 1, 'a 404 is not healthy');
    child.kill('SIGTERM');
    const { code } = await exited;
    assert.equal(code, 0, err);
    assert.match(err, /"msg":"stopped"/);
    assert.deepEqual(walk(root).map((f) => f.path).sort(), before, 'nothing written into the root filesystem');
  });
});
