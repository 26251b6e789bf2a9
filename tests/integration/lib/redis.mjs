// A real redis-server for a test, on a free loopback port, in a temp directory; stopped
// when the test ends. `cli(...args)` runs a command through redis-cli. With `password`
// the server has requirepass, and redis-cli sends it (REDISCLI_AUTH, not the command line).
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { closedPort, eventually, makeTempDir } from './util.mjs';

/** redis-server exited while starting; `portTaken`: its port (or bus port) was in use. */
class RedisExitedAtStart extends Error {
  constructor(port, log) {
    super(`redis-server on port ${port} exited at start: ${log.trim().split('\n').slice(-3).join(' | ')}`);
    this.portTaken = /Address already in use/i.test(log);
  }
}

// A port is picked free and bound by redis-server a moment later: another test file may
// take it between the two. Such a start is tried again on fresh ports (`make` builds the
// server for them), a few times.
async function startOnFreePorts(make) {
  for (let attempt = 1; ; attempt += 1) {
    const redis = await make();
    try {
      await redis.start();
      return redis;
    } catch (err) {
      if (!(err instanceof RedisExitedAtStart && err.portTaken) || attempt === 3) throw err;
    }
  }
}

const cliEnv = (password) => (password ? { ...process.env, REDISCLI_AUTH: password } : process.env);

export class Redis {
  constructor(port, dir, args, password) {
    this.port = port;
    this.dir = dir;
    this.args = args;
    this.password = password;
    this.url = `redis://127.0.0.1:${port}`;
    this.child = null;
  }

  async start() {
    const auth = this.password ? ['--requirepass', this.password] : [];
    this.child = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir, '--save', '',
      '--appendonly', 'yes', '--logfile', join(this.dir, 'redis.log'), ...auth, ...this.args], { stdio: 'ignore' });
    this.child.unref();
    this.exited = new Promise((resolve) => this.child.once('exit', resolve));
    // An exit while starting (a port taken) is said at once, with the server's words.
    let started = false;
    const exitedEarly = this.exited.then(() => {
      if (started) return;
      const log = join(this.dir, 'redis.log');
      throw new RedisExitedAtStart(this.port, existsSync(log) ? readFileSync(log, 'utf8') : '');
    });
    exitedEarly.catch(() => {});
    await Promise.race([eventually(() => this.ping() === 'PONG', { timeout: 5000, what: `redis-server on port ${this.port}` }), exitedEarly]);
    started = true;
  }

  ping() {
    try {
      // Bounded: whatever else holds the port may never answer.
      return execFileSync('redis-cli', ['-p', String(this.port), 'ping'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], env: cliEnv(this.password), timeout: 2000 }).trim();
    } catch {
      return null;
    }
  }

  cli(...args) {
    return execFileSync('redis-cli', ['-p', String(this.port), ...args.map(String)], { encoding: 'utf8', maxBuffer: 1 << 28, env: cliEnv(this.password) }).trim();
  }

  /** A clean stop (SIGTERM: Redis writes its AOF and exits), as an operator's restart does. */
  async shutdown() {
    if (!this.child || this.child.exitCode !== null) return;
    this.child.ref();
    this.child.kill('SIGTERM');
    await this.exited;
  }

  async stop() {
    if (!this.child || this.child.exitCode !== null) return;
    this.child.ref();  // keeps the event loop alive until the exit is seen
    this.child.kill('SIGKILL');
    await this.exited;
  }
}

/** Starts a redis-server (AOF on, so the gateway's persistence check passes); `password`: requirepass. */
export async function startRedis({ t, args = [], password } = {}) {
  const redis = await startOnFreePorts(async () => new Redis(await closedPort(), makeTempDir('tahua-redis-'), args, password));
  if (t) t.after(() => redis.stop());
  return redis;
}

/**
 * A Redis Sentinel (redis-server --sentinel) watching the master on `masterPort` as `name`,
 * quorum 1, quick failover. `masterPassword`: the master's requirepass; `password`: the
 * sentinel's own.
 */
export async function startSentinel({ t, masterPort, name = 'mymaster', masterPassword, password }) {
  const { writeFileSync } = await import('node:fs');
  const { join } = await import('node:path');
  const port = await closedPort();
  const dir = makeTempDir('tahua-sentinel-');
  const conf = join(dir, 'sentinel.conf');
  writeFileSync(conf, [
    `port ${port}`, 'bind 127.0.0.1', `dir ${dir}`,
    `sentinel monitor ${name} 127.0.0.1 ${masterPort} 1`,
    `sentinel down-after-milliseconds ${name} 500`,
    `sentinel failover-timeout ${name} 2000`,
    `sentinel parallel-syncs ${name} 1`,
    ...(masterPassword ? [`sentinel auth-pass ${name} ${masterPassword}`] : []),
    ...(password ? [`requirepass ${password}`] : []), '',
  ].join('\n'));
  const child = spawn('redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
  child.unref();
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const cli = (...args) => execFileSync('redis-cli', ['-p', String(port), ...args.map(String)], { encoding: 'utf8', env: cliEnv(password) }).trim();
  await eventually(() => { try { return cli('ping') === 'PONG'; } catch { return false; } }, { timeout: 5000, what: 'the sentinel' });
  const sentinel = {
    port,
    cli,
    master: () => cli('sentinel', 'get-master-addr-by-name', name).split('\n'),
    async stop() {
      if (child.exitCode !== null) return;
      child.ref();
      child.kill('SIGKILL');
      await exited;
    },
  };
  if (t) t.after(() => sentinel.stop());
  return sentinel;
}

/**
 * A Redis Cluster of `masters` redis-server processes (no replicas) on loopback ports,
 * slots spread evenly by `redis-cli --cluster create`; resolves once every node says
 * cluster_state:ok. `nodes[i].cli(...)` talks to one node; `masterOf(key)` names the
 * node that owns a key's slot.
 */
export async function startRedisCluster({ t, masters = 3 } = {}) {
  const nodes = [];
  for (let i = 0; i < masters; i += 1) {
    const node = await startOnFreePorts(async () => new Redis(await closedPort(), makeTempDir('tahua-redis-cluster-'),
      ['--cluster-enabled', 'yes', '--cluster-port', String(await closedPort()), '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000']));
    if (t) t.after(() => node.stop());
    nodes.push(node);
  }
  execFileSync('redis-cli', ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  await eventually(() => nodes.every((n) => n.cli('cluster', 'info').includes('cluster_state:ok')), { timeout: 10000, what: 'cluster_state:ok on every node' });
  const slotOf = (key) => Number(nodes[0].cli('cluster', 'keyslot', key));
  const ownerOf = (slot) => {
    for (const n of nodes) {
      // CLUSTER NODES: "<id> <ip:port@bus> myself,master - 0 0 1 connected 0-5460"
      const mine = n.cli('cluster', 'nodes').split('\n').find((l) => l.includes('myself'));
      const ranges = mine.split(' ').slice(8);
      for (const r of ranges) {
        if (r.startsWith('[')) continue;
        const [a, b = a] = r.split('-').map(Number);
        if (slot >= a && slot <= b) return n;
      }
    }
    return null;
  };
  return {
    nodes,
    addresses: nodes.map((n) => `127.0.0.1:${n.port}`),
    url: 'redis://127.0.0.1:1',  // credentials only: a cluster's nodes come from store.redis.cluster.nodes
    slotOf,
    masterOf: (key) => ownerOf(slotOf(key)),
    nodeId: (n) => n.cli('cluster', 'myid'),
  };
}
