// Small shared helpers: bounded waits, polling, temp dirs, free ports.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';

/** Rejects if `promise` does not settle within `ms` (a guard, never a synchronisation). */
export function withTimeout(promise, ms, what = 'operation') {
  let timer;
  const guard = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms}ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, guard]).finally(() => clearTimeout(timer));
}

/**
 * Retries `fn` until it returns a truthy value (which is returned) or throws no more,
 * for at most `timeout` ms. For conditions that have no event to await (e.g. a
 * metrics scrape catching up, a listener being closed).
 */
export async function eventually(fn, { timeout = 3000, interval = 20, what = 'condition' } = {}) {
  const deadline = Date.now() + timeout;
  let lastError;
  for (;;) {
    try {
      const value = await fn();
      if (value) return value;
      lastError = undefined;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) {
      const reason = lastError ? `: ${lastError.message}` : '';
      throw new Error(`${what} not reached within ${timeout}ms${reason}`, { cause: lastError });
    }
    await delay(interval);
  }
}

/** A deferred promise: `{ promise, resolve, reject }`. */
export function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

// Temp directories to remove at exit: one exit hook for all of them (a hook per directory
// tripped node's listener-leak warning in files that make many).
const tempDirs = new Set();
process.once('exit', () => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

/** A fresh temp directory, removed at process exit. */
export function makeTempDir(prefix = 'tahua-it-') {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

/**
 * A loopback port that nothing listens on (bound then released), below the kernel's
 * ephemeral range (32768-60999 by default): a port another test file's process binds
 * with port 0, or a client's source port, never comes from there, so the port stays
 * free for whoever it is for while test files run side by side.
 */
export async function closedPort() {
  for (let tries = 0; ; tries += 1) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    const server = net.createServer();
    const bound = await new Promise((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (bound) {
      await new Promise((resolve) => server.close(resolve));
      return port;
    }
    if (tries > 100) throw new Error('closedPort: no free loopback port in 20000-31999');
  }
}

/** Resolves with the connect error code (e.g. 'ECONNREFUSED') or null if it connected. */
export function tryConnect(port, host = '127.0.0.1') {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    socket.once('connect', () => {
      socket.destroy();
      resolve(null);
    });
    socket.once('error', (err) => resolve(err.code || String(err)));
  });
}

/** Patterns that must never appear in a client-facing error body. */
export const STACK_TRACE_PATTERN = /\bat \S+ \(|\.(cpp|hpp|cc|h):\d+|std::|terminate called|Traceback|boost::/;
