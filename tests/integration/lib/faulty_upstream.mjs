// An upstream that misbehaves on command, over raw TCP so every byte is the test's:
// streams that reset, stall, end without their end marker or never end a line; heads
// that name hop-by-hop headers in `Connection`; bodies that are not what they claim.
//
// Each request takes the next scripted behaviour (`upstream.next(fn)`), or the default
// one. A behaviour is `async (x) => {...}` over an exchange `x` with:
//   x.request            { method, path, headers (lower-case names), body, json }
//   x.head(status, headers)       status line + headers (no framing added)
//   x.write(bytes)                raw bytes
//   x.chunk(bytes)                one HTTP chunk
//   x.endChunks()                 the terminating chunk (keeps the connection for reuse)
//   x.json(status, obj, headers)  a complete Content-Length answer
//   x.sse(headers)                head of a chunked text/event-stream answer
//   x.reset() / x.close()         RST / FIN the connection
//   x.closed                      resolves when the gateway closes or resets it
//   x.waitDrained()               resolves once the socket's write buffer drained
import net from 'node:net';
import { deferred } from './util.mjs';

const CREATED = 1_700_000_000;

/** An OpenAI chat.completion.chunk carrying `content` (or a finish). */
export function chatChunk(content, { finish = null, model = 'up', id = 'chatcmpl-faulty' } = {}) {
  const delta = content === undefined ? {} : { content };
  return { id, object: 'chat.completion.chunk', created: CREATED, model, choices: [{ index: 0, delta, finish_reason: finish }] };
}

export const sseData = (obj) => `data: ${typeof obj === 'string' ? obj : JSON.stringify(obj)}\n\n`;

/** The events of a complete OpenAI chat stream with `pieces` as content. */
export function chatStreamEvents(pieces, { done = true, finish = true } = {}) {
  const events = [sseData(chatChunk('')), ...pieces.map((p) => sseData(chatChunk(p)))];
  if (finish) events.push(sseData(chatChunk(undefined, { finish: 'stop' })));
  if (done) events.push('data: [DONE]\n\n');
  return events;
}

function parseRequest(buf) {
  const headEnd = buf.indexOf('\r\n\r\n');
  if (headEnd < 0) return null;
  const [line, ...lines] = buf.subarray(0, headEnd).toString('latin1').split('\r\n');
  const [method, path] = line.split(' ');
  const headers = {};
  for (const l of lines) {
    const i = l.indexOf(':');
    headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  const length = Number(headers['content-length'] ?? 0);
  if (buf.length < headEnd + 4 + length) return null;
  const body = buf.subarray(headEnd + 4, headEnd + 4 + length);
  let json;
  try {
    json = length ? JSON.parse(body.toString('utf8')) : undefined;
  } catch {
    json = undefined;
  }
  return { request: { method, path, headers, body, text: body.toString('utf8'), json }, length: headEnd + 4 + length };
}

class FaultyExchange {
  constructor(socket, request, closed) {
    this.socket = socket;
    this.request = request;
    this.closed = closed;
  }

  write(bytes) {
    if (!this.socket.destroyed) this.socket.write(bytes);
  }

  head(status, headers = {}) {
    const lines = [`HTTP/1.1 ${status} X`];
    for (const [k, v] of Object.entries(headers)) lines.push(`${k}: ${v}`);
    this.write(`${lines.join('\r\n')}\r\n\r\n`);
  }

  chunk(bytes) {
    const b = Buffer.from(bytes);
    if (b.length) this.write(Buffer.concat([Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from('\r\n')]));
  }

  endChunks() {
    this.write('0\r\n\r\n');
  }

  json(status, obj, headers = {}) {
    const payload = Buffer.from(typeof obj === 'string' ? obj : JSON.stringify(obj));
    this.head(status, { 'Content-Type': 'application/json', 'Content-Length': payload.length, ...headers });
    this.write(payload);
  }

  sse(headers = {}) {
    this.head(200, { 'Content-Type': 'text/event-stream', 'Transfer-Encoding': 'chunked', ...headers });
  }

  reset() {
    if (!this.socket.destroyed) this.socket.resetAndDestroy();
  }

  close() {
    this.socket.end();
  }

  waitDrained() {
    if (this.socket.destroyed || this.socket.writableLength === 0) return Promise.resolve(!this.socket.destroyed);
    return new Promise((resolve) => {
      const done = (ok) => {
        this.socket.off('drain', onDrain);
        this.socket.off('close', onClose);
        resolve(ok);
      };
      const onDrain = () => done(true);
      const onClose = () => done(false);
      this.socket.once('drain', onDrain);
      this.socket.once('close', onClose);
    });
  }
}

export class FaultyUpstream {
  constructor(server) {
    this.server = server;
    this.queue = [];
    this.requests = [];
    this.sockets = new Set();
    this.connections = 0;
    this.defaultBehaviour = async (x) => {
      x.sse();
      for (const e of chatStreamEvents(['ok'])) x.chunk(e);
      x.endChunks();
    };
    this.requestWaiters = [];
    server.on('connection', (socket) => this.onConnection(socket));
  }

  get port() {
    return this.server.address().port;
  }

  baseUrl() {
    return `http://127.0.0.1:${this.port}/v1`;
  }

  /** Scripts the behaviour of the next request. */
  next(fn) {
    this.queue.push(fn);
  }

  /** Resolves with the n-th request (1-based) once it has arrived. */
  request(n) {
    if (this.requests.length >= n) return Promise.resolve(this.requests[n - 1]);
    const d = deferred();
    this.requestWaiters.push({ n, d });
    return d.promise;
  }

  onConnection(socket) {
    this.connections += 1;
    this.sockets.add(socket);
    const closed = deferred();
    socket.on('close', () => {
      this.sockets.delete(socket);
      closed.resolve();
    });
    socket.on('error', () => {});
    let buf = Buffer.alloc(0);
    let busy = false;
    const pump = async () => {
      if (busy) return;
      busy = true;
      try {
        for (;;) {
          const parsed = parseRequest(buf);
          if (!parsed) break;
          buf = buf.subarray(parsed.length);
          this.requests.push(parsed.request);
          for (const w of this.requestWaiters.filter((w) => this.requests.length >= w.n)) {
            w.d.resolve(this.requests[w.n - 1]);
            this.requestWaiters.splice(this.requestWaiters.indexOf(w), 1);
          }
          const behaviour = this.queue.shift() ?? this.defaultBehaviour;
          await behaviour(new FaultyExchange(socket, parsed.request, closed.promise));
          if (socket.destroyed) return;
        }
      } finally {
        busy = false;
      }
    };
    socket.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      pump().catch(() => socket.destroy());
    });
  }

  async close() {
    for (const s of this.sockets) s.destroy();
    await new Promise((resolve) => this.server.close(() => resolve()));
  }
}

export async function startFaultyUpstream({ t } = {}) {
  const server = net.createServer();
  const upstream = new FaultyUpstream(server);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  if (t) t.after(() => upstream.close());
  return upstream;
}
