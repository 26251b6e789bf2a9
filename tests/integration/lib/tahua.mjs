// Starts the real tahua binary for a test and exposes its address, logs and exit.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import { makeTempDir, withTimeout, deferred } from './util.mjs';
import { toYaml } from './yaml.mjs';

export const REPO_ROOT = resolve(fileURLToPath(new URL('../../..', import.meta.url)));
export const TAHUA_BIN = process.env.TAHUA_BIN || join(REPO_ROOT, 'build', 'tahua');

// A bound, not a goal: a started gateway is seen at once. Under the ASan build, Hyperscan's
// compiler (the guardrails' patterns, compiled as the config loads) allocates through
// ASan's allocator and a start on a busy machine takes over 10 s.
const START_TIMEOUT_MS = 30_000;
const PROXY_VARS = ['HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy', 'NO_PROXY', 'no_proxy'];

// Safety net: never leave a gateway running after the test process, whatever happened.
const live = new Set();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/**
 * A full config with test defaults (one worker, one ephemeral loopback listener,
 * short timeouts, access log on stdout). `server` keys are merged over the defaults.
 */
export function gatewayConfig({ providers, models, server = {}, listeners, accessLog, limits } = {}) {
  return {
    ...(limits ? { limits } : {}),
    server: {
      workers: 1,
      header_timeout: '5s',
      body_timeout: '5s',
      keepalive_timeout: '30s',
      drain_timeout: '5s',
      ...server,
    },
    listeners: listeners ?? [{ address: '127.0.0.1', port: 0 }],
    access_log: accessLog ?? { enabled: true, path: '-' },
    providers,
    models,
  };
}

/** An `openai`-type provider entry for a mock upstream (`upstream.baseUrl`). */
export function openaiProvider(name, baseUrl, extra = {}) {
  return {
    name,
    type: 'openai',
    base_url: baseUrl,
    api_key: 'sk-test-provider-key',
    timeouts: { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' },
    ...extra,
  };
}

/** Writes `config` as YAML into a fresh temp dir and returns the file path. */
export function writeConfig(config, name = 'tahua.yaml') {
  const file = join(makeTempDir(), name);
  writeFileSync(file, typeof config === 'string' ? config : toYaml(config));
  return file;
}

/** Runs `tahua --check-config FILE` synchronously: `{ status, stdout, stderr }`. */
export function checkConfig(file) {
  assertBinary();
  const r = spawnSync(TAHUA_BIN, ['--check-config', file], { encoding: 'utf8', timeout: 30_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function assertBinary() {
  if (!existsSync(TAHUA_BIN)) throw new Error(`tahua binary not found at ${TAHUA_BIN} (set TAHUA_BIN)`);
}

/** Lines of one output stream, with awaitable predicates over past and future lines. */
class LineLog {
  constructor(stream) {
    this.lines = [];
    this.waiters = new Set();
    this.ended = false;
    createInterface({ input: stream, crlfDelay: Infinity })
      .on('line', (line) => {
        this.lines.push(line);
        for (const w of this.waiters) w.check();
      })
      .on('close', () => {
        this.ended = true;
        for (const w of this.waiters) w.check();
      });
  }

  /** JSON objects among the lines (non-JSON lines are skipped). */
  json() {
    return this.lines.flatMap((line) => {
      try {
        const v = JSON.parse(line);
        return v && typeof v === 'object' ? [v] : [];
      } catch {
        return [];
      }
    });
  }

  /** Resolves with the first truthy `fn()` result, re-checked on every new line. */
  waitUntil(fn, timeout = 5000, what = 'log line') {
    const d = deferred();
    const waiter = {
      check: () => {
        const v = fn();
        if (v) d.resolve(v);
        else if (this.ended) d.reject(new Error(`output ended while waiting for ${what}`));
      },
    };
    waiter.check();
    this.waiters.add(waiter);
    return withTimeout(d.promise, timeout, what).finally(() => this.waiters.delete(waiter));
  }
}

export class Tahua {
  constructor(child) {
    this.child = child;
    this.stdout = new LineLog(child.stdout);
    this.stderr = new LineLog(child.stderr);
    this.exitCode = undefined;
    this.exitSignal = undefined;
    this.exitPromise = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        live.delete(child);
        this.exitCode = code;
        this.exitSignal = signal;
        resolve({ code, signal });
      });
    });
    this.listeners = [];
  }

  /**
   * Resolves with `{ code, signal }` when the process has exited. The child is unref'd
   * (a forgotten gateway must not keep the test process alive), so it is ref'd while
   * someone waits for its exit.
   */
  get exited() {
    if (this.running) this.child.ref();
    return this.exitPromise;
  }

  get port() {
    return this.listeners[0].port;
  }

  get url() {
    const l = this.listeners[0];
    return `${l.tls ? 'https' : 'http'}://127.0.0.1:${l.port}`;
  }

  get running() {
    return this.exitCode === undefined;
  }

  /** Access log records (JSON lines on stdout). */
  accessLog() {
    return this.stdout.json();
  }

  /** Resolves with the access log records matching `pred` once there are `count` of them. */
  waitForAccessLog(pred, { count = 1, timeout = 5000 } = {}) {
    return this.stdout.waitUntil(
      () => {
        const lines = this.accessLog().filter(pred);
        return lines.length >= count && lines;
      },
      timeout,
      `${count} access log line(s)`,
    );
  }

  /** Everything the process printed so far (for leak checks and failure messages). */
  output() {
    return [...this.stdout.lines, ...this.stderr.lines].join('\n');
  }

  signal(sig) {
    if (this.running) this.child.kill(sig);
  }

  /**
   * Sends `sig` and resolves with the exit code (null if killed by a signal). If the
   * process has not exited within `timeout` it is killed and the promise rejects.
   */
  async stop(sig = 'SIGTERM', timeout = 10_000) {
    this.signal(sig);
    try {
      const { code } = await withTimeout(this.exited, timeout, `tahua exit after ${sig}`);
      return code;
    } catch (err) {
      await this.kill();
      throw err;
    }
  }

  /** Immediate SIGKILL; safe to call at any time. */
  kill() {
    if (this.running) this.child.kill('SIGKILL');
    return this.exited;
  }
}

/**
 * Starts tahua. `config` is an object (written as YAML) or null to use the built-in
 * default config; `args` are extra CLI arguments; `env` entries override (undefined
 * removes) the inherited environment, from which proxy variables are removed.
 * `prefix` is a command line that execs the binary (e.g. `['prlimit', '--nofile=48:48', '--']`).
 * With a test context `t`, the process is killed when that test ends.
 */
export async function startTahua({ config = null, args = [], env = {}, t, listenerCount, prefix = [] } = {}) {
  assertBinary();
  const childEnv = { ...process.env };
  for (const name of PROXY_VARS) delete childEnv[name];
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) delete childEnv[name];
    else childEnv[name] = value;
  }
  const argv = [...(config ? ['--config', writeConfig(config)] : []), ...args];
  // `prefix` runs the binary under a wrapper that execs it (e.g. prlimit), so the pid
  // and signals are still the gateway's.
  const [cmd, ...cmdArgs] = [...prefix, TAHUA_BIN, ...argv];
  const child = spawn(cmd, cmdArgs, { env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  const tahua = new Tahua(child);
  // A forgotten gateway must not keep the test process alive (the exit hook kills it).
  child.unref();
  child.stdout.unref();
  child.stderr.unref();
  if (t) t.after(() => tahua.kill());

  const overridden = args.includes('--listen');
  const expected = listenerCount ?? (overridden || !config ? 1 : config.listeners.length);
  const ready = tahua.stderr
    .waitUntil(() => {
      const lines = tahua.stderr.json().filter((l) => l.msg === 'listening');
      return lines.length >= expected && lines;
    }, START_TIMEOUT_MS, `${expected} "listening" line(s)`)
    .then((lines) => {
      tahua.listeners = lines;
    });
  child.ref(); // while starting
  try {
    await ready;
    child.unref();
  } catch (err) {
    const { code, signal } = await tahua.kill();
    throw new Error(`tahua did not start (${err.message}); exit code ${code}, signal ${signal}; output:\n${tahua.output()}`);
  }
  return tahua;
}
