// A scriptable mock of an OpenAI-compatible upstream (node:http / node:https), speaking
// OpenAI's wire format. It records every request and counts TCP connections; a test can
// queue a behaviour for the next request and observe or steer that exchange.
import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { WebSocketServer } from 'ws';
import { deferred } from './util.mjs';

export const DEFAULT_PIECES = ['Hello', ' from', ' the', ' mock', ' upstream', '.'];
export const MOCK_PROMPT_TOKENS = 11;
export const MOCK_EMBEDDING_DIMENSIONS = 4;
const CREATED = 1_700_000_000;

/** OpenAI's error body. */
export function openaiError(message, type = 'invalid_request_error', code = null, param = null) {
  return { error: { message, type, param, code } };
}

/** The float vector the mock returns for input number `index`. */
export function mockEmbedding(index) {
  return Array.from({ length: MOCK_EMBEDDING_DIMENSIONS }, (_, d) => Math.fround((index + 1) * 0.25 + d * 0.5));
}

/**
 * One request/response exchange, created by `MockUpstream.next(behaviour)` (or implicitly
 * for unscripted requests). Behaviour `mode`s:
 *   'normal'        answer fully (default)
 *   'hold'          streaming: send the first event (or up to event `holdAt`; -1: only the head), then wait for release() or reset()
 *   'stall-headers' never send response headers
 *   'error'         answer `status` with `body` (default: an OpenAI error body)
 *   'garbage'       write bytes that are not HTTP and close the socket
 * `pieces` overrides the streamed/returned content pieces; `delayMs` delays the answer;
 * `paced` writes a stream's events one per turn of the event loop; `answerModel` is the
 * model a chat answer names (default: the one asked for, as a provider's alias answers
 * with its dated name).
 */
export class Exchange {
  constructor(behaviour = {}) {
    this.behaviour = { mode: 'normal', pieces: DEFAULT_PIECES, ...behaviour };
    this.state = 'waiting'; // waiting -> received -> streaming -> finished | closed
    this._received = deferred();
    this._firstEvent = deferred();
    this._finished = deferred();
    this._clientClosed = deferred();
    this._control = deferred();
    this.received = this._received.promise; // resolves with the recorded request
    this.firstEvent = this._firstEvent.promise; // the first SSE event was written
    this.finished = this._finished.promise; // the response ended normally
    this.clientClosed = this._clientClosed.promise; // peer closed before the response ended
  }

  /** Lets a held stream continue to its normal end. */
  release() {
    this._control.resolve('release');
  }

  /** Resets (RST) the TCP connection of a held stream. */
  reset() {
    this._control.resolve('reset');
  }

  get text() {
    return this.behaviour.pieces.join('');
  }
}

function sseEvent(obj) {
  return `data: ${typeof obj === 'string' ? obj : JSON.stringify(obj)}\n\n`;
}

function chatChunk(id, model, delta, finishReason, withUsage) {
  const chunk = {
    id,
    object: 'chat.completion.chunk',
    created: CREATED,
    model,
    system_fingerprint: 'fp_mock',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
  };
  if (withUsage) chunk.usage = null;
  return chunk;
}

function completionChunk(id, model, text, finishReason, withUsage) {
  const chunk = {
    id,
    object: 'text_completion',
    created: CREATED,
    model,
    system_fingerprint: 'fp_mock',
    choices: [{ text, index: 0, logprobs: null, finish_reason: finishReason }],
  };
  if (withUsage) chunk.usage = null;
  return chunk;
}

function usageFor(pieces) {
  return {
    prompt_tokens: MOCK_PROMPT_TOKENS,
    completion_tokens: pieces.length,
    total_tokens: MOCK_PROMPT_TOKENS + pieces.length,
  };
}

export class MockUpstream {
  constructor(server, isTls) {
    this.server = server;
    this.isTls = isTls;
    this.requests = [];
    this.connections = 0;
    this.queue = [];
    this.exchanges = [];
    this.sockets = new Set();
    this.counter = 0;
    this.defaultBehaviour = undefined; // behaviour of unscripted requests (e.g. { mode: 'error' })
    this.files = new Map(); // id -> { object, content } (OpenAI's Files API, in memory)
    this.batches = new Map(); // id -> batch object
    this.fileCounter = 0;
    // An authentication check of every request and WebSocket upgrade: (req) => null to
    // go on, or { status, body } to refuse (recorded in `refused`). None by default.
    this.gate = null;
    this.refused = [];
    server.on('connection', (socket) => {
      this.connections += 1;
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
    server.on('request', (req, res) => this.onRequest(req, res));
    // The Realtime API: a WebSocket on /v1/realtime speaking OpenAI's event protocol.
    this.realtime = { sessions: [], refuse: 0, usage: { input: 100, output: 50 }, wss: new WebSocketServer({ noServer: true }) };
    server.on('upgrade', (req, socket, head) => {
      if (!req.url.startsWith('/v1/realtime') && !req.url.startsWith('/openai/realtime')) return socket.destroy();
      if (this.realtime.refuse) return socket.end(`HTTP/1.1 ${this.realtime.refuse} Refused\r\nContent-Length: 0\r\n\r\n`);
      const refusal = this.gate?.(req);
      if (refusal) {
        this.refused.push({ method: req.method, path: req.url, headers: req.headers, status: refusal.status, upgrade: true });
        const payload = JSON.stringify(refusal.body);
        return socket.end(`HTTP/1.1 ${refusal.status} Refused\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`);
      }
      this.realtime.wss.handleUpgrade(req, socket, head, (ws) => this.realtimeSession(ws, req));
    });
  }

  // One realtime session: session.created at once; session.update -> session.updated;
  // response.create -> response.created, a text delta, response.done with usage
  // (realtime.usage tokens). Records what it received and how it was closed.
  realtimeSession(ws, req) {
    const url = new URL(req.url, 'http://mock');
    const session = { url: req.url, model: url.searchParams.get('model') ?? url.searchParams.get('deployment'), headers: req.headers, received: [], ws, closed: deferred(), opened: Date.now() };
    this.realtime.sessions.push(session);
    const send = (ev) => ws.send(JSON.stringify(ev));
    send({ type: 'session.created', event_id: 'evt_0', session: { id: 'sess_mock', object: 'realtime.session', model: session.model } });
    let n = 0;
    ws.on('message', (data) => {
      let ev;
      try { ev = JSON.parse(data.toString()); } catch { return; }
      session.received.push(ev);
      if (ev.type === 'session.update') send({ type: 'session.updated', event_id: `evt_u${++n}`, session: ev.session });
      if (ev.type === 'response.create') {
        const id = `resp_${++n}`;
        const { input, output } = this.realtime.usage;
        send({ type: 'response.created', event_id: `evt_c${n}`, response: { id, object: 'realtime.response', status: 'in_progress', output: [] } });
        send({ type: 'response.output_text.delta', event_id: `evt_d${n}`, response_id: id, item_id: 'item_1', output_index: 0, content_index: 0, delta: 'hello' });
        send({ type: 'response.done', event_id: `evt_e${n}`, response: { id, object: 'realtime.response', status: 'completed', output: [],
          usage: { total_tokens: input + output, input_tokens: input, output_tokens: output, input_token_details: { cached_tokens: 0, text_tokens: input, audio_tokens: 0 }, output_token_details: { text_tokens: output, audio_tokens: 0 } } } });
      }
    });
    ws.on('close', (code, reason) => session.closed.resolve({ code, reason: reason.toString() }));
  }

  get port() {
    return this.server.address().port;
  }

  /** `http(s)://HOST:PORT` (HOST defaults to 127.0.0.1). */
  origin(host = '127.0.0.1') {
    return `${this.isTls ? 'https' : 'http'}://${host}:${this.port}`;
  }

  /** The provider `base_url` for this mock. */
  baseUrl(host) {
    return `${this.origin(host)}/v1`;
  }

  /** Scripts the next unscripted request; returns its Exchange. */
  next(behaviour = {}) {
    const exchange = new Exchange(behaviour);
    this.queue.push(exchange);
    return exchange;
  }

  async close() {
    for (const s of this.realtime.sessions) s.ws.terminate();
    for (const ex of this.exchanges) ex.release();
    this.server.closeAllConnections?.();
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server.close(() => resolve()));
  }

  onRequest(req, res) {
    const exchange = this.queue.shift() ?? new Exchange(this.defaultBehaviour);
    this.exchanges.push(exchange);
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let body = Buffer.concat(chunks);
      chunks.length = 0;
      let json;
      try {
        json = body.length && !/^multipart\//.test(req.headers['content-type'] ?? '') ? JSON.parse(body.toString('utf8')) : undefined;
      } catch {
        json = undefined;
      }
      // A form (an upload): its fields, and its files as name, type, size and sha256 (a
      // large body itself is not kept).
      const form = parseForm(req.headers['content-type'], body);
      const size = body.length;
      if (form && size > (1 << 20)) body = Buffer.alloc(0);
      const record = {
        form,
        size,
        method: req.method,
        path: req.url,
        httpVersion: req.httpVersion,
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        body,
        text: body.toString('utf8'),
        json,
      };
      this.requests.push(record);
      exchange.state = 'received';
      res.on('close', () => {
        if (!res.writableFinished) {
          exchange.state = 'closed';
          exchange._clientClosed.resolve();
        }
      });
      exchange._received.resolve(record);
      this.respond(exchange, record, req, res).catch((err) => {
        res.destroy(err);
      });
    });
  }

  async respond(exchange, record, req, res) {
    const refusal = this.gate?.(req);
    if (refusal) {
      this.refused.push({ method: record.method, path: record.path, headers: record.headers, status: refusal.status });
      return this.sendJson(res, refusal.status, refusal.body, exchange);
    }
    const { mode, delayMs } = exchange.behaviour;
    if (delayMs) await new Promise((resolve) => setTimeout(resolve, delayMs)); // a slow upstream (time to first byte)
    if (mode === 'stall-headers') return; // the socket stays open until the peer gives up
    if (mode === 'garbage') {
      req.socket.end('THIS IS NOT HTTP\r\n\r\n');
      return;
    }
    if (mode === 'error') {
      const { status = 500, body = openaiError('mock upstream error', 'server_error', 'mock_error') } =
        exchange.behaviour;
      this.sendJson(res, status, body, exchange);
      return;
    }
    const path = record.path.replace(/\?.*$/, '');
    const body = record.json ?? {};
    if (/\/(files|batches)(\/|$)/.test(path)) {
      this.filesApi(exchange, record, path, res);
    } else if (record.method === 'GET' && path.endsWith('/models')) {
      this.sendJson(res, 200, { object: 'list', data: [{ id: 'upstream-model', object: 'model', created: CREATED, owned_by: 'mock' }] }, exchange);
    } else if (record.method !== 'POST') {
      this.sendJson(res, 405, openaiError(`method ${record.method} not allowed`), exchange);
    } else if (path.endsWith('/chat/completions')) {
      if (body.stream === true) await this.streamChat(exchange, body, res);
      else this.sendJson(res, 200, this.chatCompletion({ ...body, model: exchange.behaviour.answerModel ?? body.model }, exchange.behaviour.pieces), exchange);
    } else if (path.endsWith('/completions')) {
      if (body.stream === true) await this.streamCompletion(exchange, body, res);
      else this.sendJson(res, 200, this.textCompletion(body, exchange.behaviour.pieces), exchange);
    } else if (path.endsWith('/embeddings')) {
      this.sendJson(res, 200, this.embeddings(body), exchange);
    } else if (path.endsWith('/moderations')) {
      this.sendJson(res, 200, this.moderation(body), exchange);
    } else if (path.endsWith('/images/generations')) {
      this.sendJson(res, 200, this.images(body), exchange);
    } else if (path.endsWith('/audio/transcriptions') || path.endsWith('/audio/translations')) {
      await this.transcribe(exchange, record, path.endsWith('/translations'), res);
    } else if (path.endsWith('/audio/speech')) {
      await this.speak(exchange, body, req, res);
    } else if (path.endsWith('/images/edits')) {
      if (!record.form?.files.length) this.sendJson(res, 400, openaiError('image is required'), exchange);
      else this.sendJson(res, 200, this.images({ n: Number(record.form.fields.n ?? 1), prompt: record.form.fields.prompt, model: record.form.fields.model }), exchange);
    } else if (path.endsWith('/rerank')) {
      this.sendJson(res, 200, this.rerank(body), exchange);
    } else {
      this.sendJson(res, 404, openaiError(`Invalid URL (POST ${path})`, 'invalid_request_error', 'unknown_url'), exchange);
    }
  }

  // OpenAI's Files and Batch APIs, in memory. A batch stays in_progress until the test
  // calls completeBatch(id): each input line is then answered as a chat completion of
  // 10 prompt and 5 completion tokens (the model named in the line).
  filesApi(exchange, record, path, res) {
    const m = /\/(files|batches)(?:\/([^/]+))?(?:\/(content|cancel))?$/.exec(path);
    const [, kind, id, action] = m ?? [];
    const query = new URLSearchParams(record.path.split('?')[1] ?? '');
    const list = (items) => {
      const after = query.get('after');
      let all = [...items].reverse(); // newest first
      if (after) all = all.slice(all.findIndex((x) => x.id === after) + 1);
      const limit = Number(query.get('limit') ?? 10000);
      const data = all.slice(0, limit);
      return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: all.length > limit };
    };
    const missing = (what) => this.sendJson(res, 404, openaiError(`No such ${what} object: ${id}`, 'invalid_request_error'), exchange);
    if (kind === 'files') {
      if (!id && record.method === 'POST') {
        const file = record.form?.files.find((f) => f.name === 'file');
        if (!file) return this.sendJson(res, 400, openaiError('file is required'), exchange);
        const fid = `file-mock${++this.fileCounter}`;
        const object = { id: fid, object: 'file', bytes: file.size, created_at: CREATED, filename: file.filename, purpose: record.form.fields.purpose, status: 'processed' };
        const content = record.body.length ? this.formFileContent(record) : Buffer.alloc(0);
        this.files.set(fid, { object, content, sha256: file.sha256 });
        return this.sendJson(res, 200, object, exchange);
      }
      if (!id && record.method === 'GET') return this.sendJson(res, 200, list([...this.files.values()].map((f) => f.object)), exchange);
      const f = this.files.get(id);
      if (!f) return missing('File');
      if (action === 'content') {
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        res.end(f.content);
        exchange.state = 'finished';
        exchange._finished.resolve();
        return undefined;
      }
      if (record.method === 'DELETE') {
        this.files.delete(id);
        return this.sendJson(res, 200, { id, object: 'file', deleted: true }, exchange);
      }
      return this.sendJson(res, 200, f.object, exchange);
    }
    if (!id && record.method === 'POST') {
      const body = record.json ?? {};
      if (!this.files.has(body.input_file_id)) return this.sendJson(res, 404, openaiError(`No such File object: ${body.input_file_id}`), exchange);
      const bid = `batch_mock${++this.fileCounter}`;
      const batch = { id: bid, object: 'batch', endpoint: body.endpoint, errors: null, input_file_id: body.input_file_id, completion_window: body.completion_window ?? '24h', status: 'in_progress', output_file_id: null, error_file_id: null, created_at: CREATED, request_counts: { total: 0, completed: 0, failed: 0 }, metadata: body.metadata ?? null };
      this.batches.set(bid, batch);
      return this.sendJson(res, 200, batch, exchange);
    }
    if (!id) return this.sendJson(res, 200, list([...this.batches.values()]), exchange);
    const b = this.batches.get(id);
    if (!b) return missing('Batch');
    if (action === 'cancel') b.status = 'cancelled';
    return this.sendJson(res, 200, b, exchange);
  }

  // The content of a form's `file` part (small uploads: the body is kept).
  formFileContent(record) {
    const text = record.body;
    const m = /boundary="?([^";]+)"?/.exec(record.headers['content-type']);
    const delimiter = Buffer.from(`--${m[1]}`);
    let at = 0;
    for (;;) {
      at = text.indexOf(delimiter, at);
      if (at < 0) return Buffer.alloc(0);
      const headEnd = text.indexOf('\r\n\r\n', at);
      const head = text.subarray(at, headEnd).toString();
      const next = text.indexOf(Buffer.concat([Buffer.from('\r\n'), delimiter]), headEnd);
      if (/name="file"/.test(head)) return text.subarray(headEnd + 4, next);
      at = next + 2;
    }
  }

  /** Ends a batch: an output file with one chat completion per input line. */
  completeBatch(id, { prompt = 10, completion = 5 } = {}) {
    const b = this.batches.get(id);
    const input = this.files.get(b.input_file_id).content.toString('utf8').split('\n').filter((l) => l.trim());
    const lines = input.map((l, i) => {
      const req = JSON.parse(l);
      return JSON.stringify({ id: `batch_req_${i}`, custom_id: req.custom_id, response: { status_code: 200, request_id: `req_${i}`, body: { id: `chatcmpl-${i}`, object: 'chat.completion', created: CREATED, model: req.body.model, choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }], usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion } } }, error: null });
    });
    const fid = `file-mock${++this.fileCounter}`;
    const content = Buffer.from(`${lines.join('\n')}\n`);
    this.files.set(fid, { object: { id: fid, object: 'file', bytes: content.length, created_at: CREATED, filename: 'batch_output.jsonl', purpose: 'batch_output', status: 'processed' }, content });
    Object.assign(b, { status: 'completed', output_file_id: fid, completed_at: CREATED + 60, request_counts: { total: lines.length, completed: lines.length, failed: 0 } });
    return b;
  }

  // OpenAI's transcription and translation answers. The "audio" lasts a second per 32 kB.
  // json: {text, usage: {type: duration, seconds}}; verbose_json: with `duration`; text:
  // text/plain; stream (transcriptions): transcript.text.delta events, then
  // transcript.text.done with token usage.
  async transcribe(exchange, record, translation, res) {
    const form = record.form;
    const file = form?.files.find((f) => f.name === 'file');
    if (!file) return this.sendJson(res, 400, openaiError('file is required', 'invalid_request_error'), exchange);
    const seconds = Math.max(1, Math.ceil(file.size / 32000));
    const text = `${translation ? 'translated' : 'heard'} ${file.size} bytes ${file.sha256.slice(0, 12)} by ${form.fields.model}`;
    const format = form.fields.response_format ?? 'json';
    if (form.fields.stream === 'true' && !translation) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const word of text.split(' ')) res.write(`data: ${JSON.stringify({ type: 'transcript.text.delta', delta: `${word} ` })}\n\n`);
      res.end(`data: ${JSON.stringify({ type: 'transcript.text.done', text, usage: { type: 'tokens', input_tokens: 40, output_tokens: 12, total_tokens: 52 } })}\n\n`);
      exchange.state = 'finished';
      exchange._finished.resolve();
      return;
    }
    if (format === 'text') {
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(text);
      exchange.state = 'finished';
      exchange._finished.resolve();
      return;
    }
    if (format === 'verbose_json') return this.sendJson(res, 200, { task: translation ? 'translate' : 'transcribe', language: 'english', duration: seconds, text }, exchange);
    return this.sendJson(res, 200, translation ? { text } : { text, usage: { type: 'duration', seconds } }, exchange);
  }

  // Speech: audio bytes in pieces (`speechPieces` of 16 KiB, the input's bytes repeated);
  // mode 'hold' sends the first and waits for release().
  async speak(exchange, body, req, res) {
    const pieces = exchange.behaviour.speechPieces ?? 4;
    const unit = Buffer.from(String(body.input ?? 'x'));
    const piece = Buffer.alloc(16384, unit.length ? unit : 'x');
    res.writeHead(200, { 'content-type': body.response_format === 'wav' ? 'audio/wav' : 'audio/mpeg' });
    for (let i = 0; i < pieces; ++i) {
      await new Promise((resolve) => res.write(piece, resolve));
      if (i === 0) {
        exchange._firstEvent.resolve();
        if (exchange.behaviour.mode === 'hold') {
          const action = await Promise.race([exchange._control.promise, exchange.clientClosed.then(() => 'gone')]);
          if (action === 'reset') return req.socket.resetAndDestroy();
          if (action === 'gone') return;
        }
      }
    }
    res.end();
    exchange.state = 'finished';
    exchange._finished.resolve();
  }

  sendJson(res, status, obj, exchange) {
    const payload = Buffer.from(JSON.stringify(obj));
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': payload.length,
      'x-request-id': `req_mock_${this.counter}`,
      ...(exchange.behaviour.headers ?? {}), // e.g. { 'retry-after': '1' } on an error
    });
    res.end(payload, () => {
      exchange.state = 'finished';
      exchange._finished.resolve();
    });
  }

  chatCompletion(body, pieces) {
    this.counter += 1;
    return {
      id: `chatcmpl-mock${this.counter}`,
      object: 'chat.completion',
      created: CREATED,
      model: body.model,
      system_fingerprint: 'fp_mock',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: pieces.join(''), refusal: null, annotations: [] },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage: usageFor(pieces),
    };
  }

  textCompletion(body, pieces) {
    this.counter += 1;
    return {
      id: `cmpl-mock${this.counter}`,
      object: 'text_completion',
      created: CREATED,
      model: body.model,
      system_fingerprint: 'fp_mock',
      choices: [{ text: pieces.join(''), index: 0, logprobs: null, finish_reason: 'stop' }],
      usage: usageFor(pieces),
    };
  }

  embeddings(body) {
    const inputs = Array.isArray(body.input) ? body.input : [body.input];
    const base64 = body.encoding_format === 'base64';
    return {
      object: 'list',
      data: inputs.map((_, index) => {
        const vector = mockEmbedding(index);
        const embedding = base64 ? Buffer.from(new Float32Array(vector).buffer).toString('base64') : vector;
        return { object: 'embedding', index, embedding };
      }),
      model: body.model,
      usage: { prompt_tokens: MOCK_PROMPT_TOKENS, total_tokens: MOCK_PROMPT_TOKENS },
    };
  }

  // OpenAI's moderation object: flagged when an input contains "attack".
  moderation(body) {
    this.counter += 1;
    const inputs = Array.isArray(body.input) ? body.input : [body.input];
    return {
      id: `modr-mock${this.counter}`,
      model: body.model ?? 'omni-moderation-latest',
      results: inputs.map((text) => {
        const flagged = typeof text === 'string' && text.includes('attack');
        return {
          flagged,
          categories: { violence: flagged, harassment: false },
          category_scores: { violence: flagged ? 0.91 : 0.01, harassment: 0.001 },
          category_applied_input_types: { violence: ['text'], harassment: ['text'] },
        };
      }),
    };
  }

  // OpenAI's images answer: `n` images (1 by default), as URLs or base64; gpt-image-*
  // models also report token usage, dall-e-* do not.
  images(body) {
    this.counter += 1;
    const n = body.n ?? 1;
    const out = {
      created: CREATED,
      data: Array.from({ length: n }, (_, i) => (body.response_format === 'b64_json'
        ? { b64_json: Buffer.from(`image ${i}`).toString('base64') }
        : { url: `https://images.example/mock-${this.counter}-${i}.png`, revised_prompt: body.prompt })),
    };
    if (String(body.model ?? '').startsWith('gpt-image'))
      out.usage = { input_tokens: 9, output_tokens: 272 * n, total_tokens: 9 + 272 * n, input_tokens_details: { text_tokens: 9, image_tokens: 0 } };
    return out;
  }

  // The rerank shape Jina, vLLM and TEI serve (Cohere's adds meta.billed_units).
  rerank(body) {
    this.counter += 1;
    const docs = body.documents ?? [];
    const results = docs.map((d, index) => ({ index, relevance_score: 1 / (index + 1), document: { text: typeof d === 'string' ? d : d.text } }))
      .slice(0, body.top_n ?? docs.length);
    return { id: `rerank-mock${this.counter}`, model: body.model, results, usage: { total_tokens: 5 * (docs.length + 1) } };
  }

  /** Writes SSE events; holds after the first one when scripted to. */
  async streamEvents(exchange, res, events) {
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'x-request-id': `req_mock_${this.counter}`,
    });
    exchange.state = 'streaming';
    // false: the exchange ends here (the client left, or the socket was reset).
    const hold = async () => {
      if (exchange.behaviour.mode !== 'hold') return true;
      const action = await Promise.race([exchange._control.promise, exchange.clientClosed.then(() => 'gone')]);
      if (action === 'gone') return false;
      if (action === 'reset') {
        res.socket.resetAndDestroy();
        return false;
      }
      return true;
    };
    if (exchange.behaviour.holdAt === -1) {
      res.flushHeaders();
      exchange._firstEvent.resolve();
      if (!(await hold())) return;
    }
    for (let i = 0; i < events.length; i += 1) {
      if (res.destroyed) return;
      res.write(sseEvent(events[i]));
      if (i === 0) exchange._firstEvent.resolve();
      // `paced`: one event per turn of the event loop, as a model produces them (not one burst).
      if (exchange.behaviour.paced) await new Promise((resolve) => setImmediate(resolve));
      if (i === (exchange.behaviour.holdAt ?? 0) && !(await hold())) return;
    }
    res.end(() => {
      exchange.state = 'finished';
      exchange._finished.resolve();
    });
  }

  async streamChat(exchange, body, res) {
    this.counter += 1;
    const id = `chatcmpl-mock${this.counter}`;
    const { pieces } = exchange.behaviour;
    const withUsage = body.stream_options?.include_usage === true;
    body = { ...body, model: exchange.behaviour.answerModel ?? body.model };
    const events = [
      chatChunk(id, body.model, { role: 'assistant', content: '', refusal: null }, null, withUsage),
      ...pieces.map((content) => chatChunk(id, body.model, { content }, null, withUsage)),
      chatChunk(id, body.model, {}, 'stop', withUsage),
    ];
    if (withUsage) {
      events.push({
        id,
        object: 'chat.completion.chunk',
        created: CREATED,
        model: body.model,
        system_fingerprint: 'fp_mock',
        choices: [],
        usage: usageFor(pieces),
      });
    }
    events.push('[DONE]');
    await this.streamEvents(exchange, res, events);
  }

  async streamCompletion(exchange, body, res) {
    this.counter += 1;
    const id = `cmpl-mock${this.counter}`;
    const { pieces } = exchange.behaviour;
    const withUsage = body.stream_options?.include_usage === true;
    const events = [
      ...pieces.map((text) => completionChunk(id, body.model, text, null, withUsage)),
      completionChunk(id, body.model, '', 'stop', withUsage),
    ];
    if (withUsage) {
      events.push({ id, object: 'text_completion', created: CREATED, model: body.model, choices: [], usage: usageFor(pieces) });
    }
    events.push('[DONE]');
    await this.streamEvents(exchange, res, events);
  }
}

/** Starts a mock upstream on 127.0.0.1:0; `tls: { cert, key }` serves HTTPS. */
// A multipart/form-data body: {fields, files: [{name, filename, type, size, sha256}]},
// or undefined when the body is not a form (or not a well-formed one).
function parseForm(contentType, body) {
  const m = /^multipart\/form-data;.*boundary="?([^";]+)"?/i.exec(contentType ?? '');
  if (!m) return undefined;
  const delimiter = Buffer.from(`--${m[1]}`);
  const form = { fields: {}, files: [] };
  let at = body.indexOf(delimiter);
  if (at !== 0) return undefined;
  for (;;) {
    at += delimiter.length;
    if (body.subarray(at, at + 2).toString() === '--') return form;
    if (body.subarray(at, at + 2).toString() !== '\r\n') return undefined;
    const headEnd = body.indexOf('\r\n\r\n', at);
    if (headEnd < 0) return undefined;
    const head = body.subarray(at + 2, headEnd).toString('utf8');
    const next = body.indexOf(Buffer.concat([Buffer.from('\r\n'), delimiter]), headEnd + 4);
    if (next < 0) return undefined;
    const content = body.subarray(headEnd + 4, next);
    const name = /name="([^"]*)"/.exec(head)?.[1];
    const filename = /filename="([^"]*)"/.exec(head)?.[1];
    const type = /content-type:\s*([^\r\n]+)/i.exec(head)?.[1];
    if (filename !== undefined) {
      form.files.push({ name, filename, type, size: content.length, sha256: createHash('sha256').update(content).digest('hex') });
    } else if (name in form.fields) {
      form.fields[name] = [].concat(form.fields[name], content.toString('utf8'));
    } else {
      form.fields[name] = content.toString('utf8');
    }
    at = next + 2;
  }
}

export async function startMockUpstream({ tls, t, host = '127.0.0.1', port = 0 } = {}) {
  const server = tls ? https.createServer({ cert: tls.cert, key: tls.key }) : http.createServer();
  server.keepAliveTimeout = 60_000;
  const mock = new MockUpstream(server, Boolean(tls));
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  if (t) t.after(() => mock.close());
  return mock;
}
