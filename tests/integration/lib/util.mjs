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

/** A loopback port that nothing listens on (bound then released). */
export async function closedPort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
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
