// Raw TCP client for tests that need exact bytes on the wire (pipelining, request
// smuggling, slowloris, keep-alive timing) plus an HTTP/1.1 response parser.
import net from 'node:net';
import { deferred, withTimeout } from './util.mjs';

/**
 * Parses one HTTP/1.1 response at the start of `buf`. Returns
 * `{ status, reason, headers, body, length }` (length = bytes consumed) or null when
 * `buf` does not hold a complete response yet. `eof` lets a body without length end.
 */
export function parseResponse(buf, eof = false) {
  const headEnd = buf.indexOf('\r\n\r\n');
  if (headEnd < 0) return null;
  const [statusLine, ...headerLines] = buf.subarray(0, headEnd).toString('latin1').split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3}) ?(.*)$/.exec(statusLine);
  if (!m) throw new Error(`bad status line: ${JSON.stringify(statusLine)}`);
  const headers = {};
  for (const line of headerLines) {
    const i = line.indexOf(':');
    const name = line.slice(0, i).trim().toLowerCase();
    const value = line.slice(i + 1).trim();
    headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
  }
  const status = Number(m[1]);
  let pos = headEnd + 4;
  if (status === 204 || status === 304 || (status >= 100 && status < 200)) {
    return { status, reason: m[2], headers, body: Buffer.alloc(0), length: pos };
  }
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
    const parts = [];
    for (;;) {
      const lineEnd = buf.indexOf('\r\n', pos);
      if (lineEnd < 0) return null;
      const size = parseInt(buf.subarray(pos, lineEnd).toString('latin1'), 16);
      if (Number.isNaN(size)) throw new Error('bad chunk size');
      if (size === 0) {
        const end = buf.indexOf('\r\n\r\n', lineEnd); // after optional trailers
        if (end < 0) return null;
        return { status, reason: m[2], headers, body: Buffer.concat(parts), length: end + 4 };
      }
      if (buf.length < lineEnd + 2 + size + 2) return null;
      parts.push(buf.subarray(lineEnd + 2, lineEnd + 2 + size));
      pos = lineEnd + 2 + size + 2;
    }
  }
  if (headers['content-length'] !== undefined) {
    const len = Number(headers['content-length']);
    if (buf.length < pos + len) return null;
    return { status, reason: m[2], headers, body: buf.subarray(pos, pos + len), length: pos + len };
  }
  if (!eof) return null;
  return { status, reason: m[2], headers, body: buf.subarray(pos), length: buf.length };
}

export class RawClient {
  constructor(socket) {
    this.socket = socket;
    this.buf = Buffer.alloc(0);
    this.eof = false;
    this.waiters = new Set();
    const closed = deferred();
    this.closed = closed.promise; // resolves when the socket is fully closed
    this.closedAt = undefined;
    socket.on('data', (d) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.poke();
    });
    socket.on('end', () => {
      this.eof = true;
      this.poke();
    });
    socket.on('error', () => {}); // a reset is an observable outcome, not a crash
    socket.on('close', () => {
      this.eof = true;
      this.closedAt = Date.now();
      this.poke();
      closed.resolve();
    });
  }

  static connect(port, host = '127.0.0.1') {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ port, host });
      socket.setNoDelay(true);
      socket.once('connect', () => resolve(new RawClient(socket)));
      socket.once('error', reject);
    });
  }

  write(data) {
    return new Promise((resolve, reject) => this.socket.write(data, (err) => (err ? reject(err) : resolve())));
  }

  poke() {
    for (const w of this.waiters) w();
  }

  /** Resolves with `fn()` once truthy (checked on every read and at EOF). */
  waitFor(fn, timeout = 5000, what = 'bytes from the gateway') {
    const now = fn();
    if (now) return Promise.resolve(now);
    const d = deferred();
    const check = () => {
      try {
        const v = fn();
        if (v) d.resolve(v);
        else if (this.eof) d.reject(new Error(`connection closed while waiting for ${what}; got ${JSON.stringify(this.buf.toString('latin1'))}`));
      } catch (err) {
        d.reject(err);
      }
    };
    this.waiters.add(check);
    return withTimeout(d.promise, timeout, what).finally(() => this.waiters.delete(check));
  }

  /** Reads (consumes) the next complete response. */
  async readResponse(timeout = 5000) {
    const res = await this.waitFor(() => parseResponse(this.buf, this.eof), timeout, 'an HTTP response');
    this.buf = this.buf.subarray(res.length);
    return res;
  }

  /** Resolves when the received bytes contain `text`. */
  waitForText(text, timeout = 5000) {
    return this.waitFor(() => this.buf.toString('utf8').includes(text), timeout, JSON.stringify(text));
  }

  destroy() {
    this.socket.destroy();
  }
}

/** A minimal request in exact bytes. */
export function rawRequest(method, path, { headers = {}, body } = {}) {
  const lines = [`${method} ${path} HTTP/1.1`, 'Host: 127.0.0.1'];
  const all = { ...headers };
  if (body !== undefined && !Object.keys(all).some((h) => /^(content-length|transfer-encoding)$/i.test(h))) {
    all['Content-Length'] = Buffer.byteLength(body);
  }
  for (const [k, v] of Object.entries(all)) lines.push(`${k}: ${v}`);
  return `${lines.join('\r\n')}\r\n\r\n${body ?? ''}`;
}
