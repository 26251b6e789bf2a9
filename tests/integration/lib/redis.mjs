// A real redis-server for a test, on a free loopback port, in a temp directory; stopped
// when the test ends. `cli(...args)` runs a command through redis-cli.
import { spawn, execFileSync } from 'node:child_process';
import { closedPort, eventually, makeTempDir } from './util.mjs';

export class Redis {
  constructor(port, dir, args) {
    this.port = port;
    this.dir = dir;
    this.args = args;
    this.url = `redis://127.0.0.1:${port}`;
    this.child = null;
  }

  async start() {
    this.child = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir, '--save', '',
      '--appendonly', 'yes', ...this.args], { stdio: 'ignore' });
    this.child.unref();
    this.exited = new Promise((resolve) => this.child.once('exit', resolve));
    await eventually(() => this.ping() === 'PONG', { timeout: 5000, what: `redis-server on port ${this.port}` });
  }

  ping() {
    try {
      return execFileSync('redis-cli', ['-p', String(this.port), 'ping'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    } catch {
      return null;
    }
  }

  cli(...args) {
    return execFileSync('redis-cli', ['-p', String(this.port), ...args.map(String)], { encoding: 'utf8' }).trim();
  }

  async stop() {
    if (!this.child || this.child.exitCode !== null) return;
    this.child.ref();  // keeps the event loop alive until the exit is seen
    this.child.kill('SIGKILL');
    await this.exited;
  }
}

/** Starts a redis-server (AOF on, so the gateway's persistence check passes). */
export async function startRedis({ t, args = [] } = {}) {
  const redis = new Redis(await closedPort(), makeTempDir('tahua-redis-'), args);
  await redis.start();
  if (t) t.after(() => redis.stop());
  return redis;
}
