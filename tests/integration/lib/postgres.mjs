// A real PostgreSQL 15 server for a test: initdb into a temp directory, started by
// pg_ctl on a free loopback port, stopped (immediate) when the test ends. PostgreSQL
// refuses to run as root: under root (CI containers) the server runs as the `postgres`
// user the Debian package creates, in a directory it owns; otherwise as the caller.
// Host connections need a password (scram-sha-256): `superuser` (postgres) and one role,
// `role` (the gateway's, owner of database `db`). `sql(...)` runs psql as the superuser.
import { execFile, execFileSync, spawn, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { chownSync, writeFileSync, existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { closedPort, eventually, makeTempDir } from './util.mjs';

const BIN = '/usr/lib/postgresql/15/bin';
export const havePostgres = existsSync(join(BIN, 'initdb')) && existsSync(join(BIN, 'pg_ctl'));
const root = process.getuid?.() === 0;

function asServerUser(cmd, args, options = {}) {
  const [file, argv] = root ? ['runuser', ['-u', 'postgres', '--', join(BIN, cmd), ...args]] : [join(BIN, cmd), args];
  return execFileSync(file, argv, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], ...options });
}

export class Postgres {
  constructor({ dir, port }) {
    this.dir = dir;
    this.data = join(dir, 'data');
    this.port = port;
    this.superPassword = 'pg-super-0123456789';
    this.role = 'tahua';
    this.password = 'tahua-pw-k9Qz7Lm2Xc';
    this.db = 'tahua';
  }

  /** libpq URI for the gateway's role (password included: tests pass it by dsn_env). */
  uri({ password = this.password, db = this.db } = {}) {
    return `postgresql://${this.role}:${encodeURIComponent(password)}@127.0.0.1:${this.port}/${db}`;
  }

  /** The same without the password (for `dsn` + `password_env`). */
  dsn(db = this.db) {
    return `host=127.0.0.1 port=${this.port} dbname=${db} user=${this.role}`;
  }

  async init() {
    if (root) chownSync(this.dir, Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })), Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })));
    const pwfile = join(this.dir, 'pw');
    writeFileSync(pwfile, `${this.superPassword}\n`, { mode: 0o644 });
    if (root) chownSync(pwfile, Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })), 0);
    asServerUser('initdb', ['-D', this.data, '-U', 'postgres', '-E', 'UTF8', '--locale=C', '--no-sync', '--no-instructions',
      '--auth-local=trust', '--auth-host=scram-sha-256', `--pwfile=${pwfile}`]);
    await this.start();
    this.sql(`CREATE ROLE ${this.role} LOGIN PASSWORD '${this.password}'`, 'postgres');
    this.sql(`CREATE DATABASE ${this.db} OWNER ${this.role}`, 'postgres');
  }

  async start() {
    // fsync off: a test's server need not survive a power cut, and it is much faster.
    asServerUser('pg_ctl', ['-D', this.data, '-l', join(this.dir, 'server.log'), '-w', '-t', '30', '-o',
      `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50`, 'start']);
    await eventually(() => this.ping(), { timeout: 10000, what: `postgres on port ${this.port}` });
  }

  ping() {
    return spawnSync(join(BIN, 'pg_isready'), ['-h', '127.0.0.1', '-p', String(this.port)], { stdio: 'ignore' }).status === 0;
  }

  /** psql as the superuser: rows as arrays of strings (-A -t, `|` between fields). */
  sql(statement, db = this.db) {
    const out = execFileSync('psql', ['-h', '127.0.0.1', '-p', String(this.port), '-U', 'postgres', '-d', db, '-v', 'ON_ERROR_STOP=1',
      '-X', '-A', '-t', '-q', '-c', statement], { encoding: 'utf8', env: { ...process.env, PGPASSWORD: this.superPassword } });
    return out.split('\n').filter((l) => l !== '').map((l) => l.split('|'));
  }

  /** `sql` without blocking the event loop (the test's mock upstream runs on it). */
  async sqlAsync(statement, db = this.db) {
    const { stdout } = await promisify(execFile)('psql', ['-h', '127.0.0.1', '-p', String(this.port), '-U', 'postgres', '-d', db,
      '-v', 'ON_ERROR_STOP=1', '-X', '-A', '-t', '-q', '-c', statement], { encoding: 'utf8', env: { ...process.env, PGPASSWORD: this.superPassword } });
    return stdout.split('\n').filter((l) => l !== '').map((l) => l.split('|'));
  }

  /**
   * A psql session holding `LOCK TABLE table IN ACCESS EXCLUSIVE MODE` (resolves once
   * held): every other statement on the table waits, as on a database that stopped
   * answering. `release()` commits and ends the session.
   */
  holdLock(table, db = this.db) {
    return this.holdSession(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`, db);
  }

  /**
   * A psql session holding the transaction-level advisory lock `key` in `db` (resolves
   * once held): a statement that asks for it (`pg_advisory_xact_lock(key)`, say in a
   * trigger) waits until `release()` commits and ends the session.
   */
  holdAdvisoryLock(key, db = this.db) {
    return this.holdSession(`SELECT pg_advisory_xact_lock(${Number(key)})`, db);
  }

  /** A psql session that ran `statement` in an open transaction; `release()` commits and ends it. */
  async holdSession(statement, db) {
    const child = spawn('psql', ['-h', '127.0.0.1', '-p', String(this.port), '-U', 'postgres', '-d', db, '-X', '-A', '-t', '-q'],
      { env: { ...process.env, PGPASSWORD: this.superPassword }, stdio: ['pipe', 'pipe', 'inherit'] });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    let out = '';
    const held = new Promise((resolve) => child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('locked')) resolve();
    }));
    child.stdin.write(`BEGIN; ${statement}; SELECT 'locked';\n`);
    await held;
    return {
      release: async () => {
        child.stdin.end('COMMIT;\n');
        await exited;
      },
    };
  }

  /** The first column of the first row. */
  value(statement, db = this.db) {
    return this.sql(statement, db)[0]?.[0];
  }

  log() {
    return existsSync(join(this.dir, 'server.log')) ? readFileSync(join(this.dir, 'server.log'), 'utf8') : '';
  }

  async stop() {
    if (!existsSync(join(this.data, 'postmaster.pid'))) return;
    try {
      asServerUser('pg_ctl', ['-D', this.data, '-m', 'immediate', '-w', 'stop']);
    } catch { /* already stopped */ }
  }
}

/** A started server with the gateway's role and database; stopped when `t` ends. */
export async function startPostgres({ t } = {}) {
  const pg = new Postgres({ dir: makeTempDir('tahua-pg-'), port: await closedPort() });
  if (t) t.after(() => pg.stop());
  await pg.init();
  return pg;
}
