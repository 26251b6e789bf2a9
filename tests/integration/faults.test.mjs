// Correctness under faults, black-box: the real binary in front of an upstream that
// misbehaves on command (lib/faulty_upstream.mjs), driven over raw sockets so every
// byte and every connection is the test's. Each block pins one promise of docs/errors.md:
// a broken stream never costs the next request on its connection, never ends silently,
// always ends with an event a parser can read; the gateway's own exhaustion is not an
// upstream failure; HTTP's MUSTs; no provider secret in any byte; upstream answers that
// are not what they claim become errors in the client's shape.
import { describe, it, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { gatewayConfig, startTahua } from './lib/tahua.mjs';
import { RawClient, rawRequest } from './lib/raw.mjs';
import { startFaultyUpstream, chatStreamEvents, chatChunk, sseData } from './lib/faulty_upstream.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { send } from './lib/http.mjs';
import { deferred } from './lib/util.mjs';

const OPENAI_KEY = 'sk-faulty-openai-key-0123456789';
const ANTHROPIC_KEY = 'sk-ant-faulty-key-9876543210';
const IDLE_MS = 300;
const MAX_EVENT = 64 * 1024;
const TIMEOUTS = { connect: '2s', first_byte: '3s', idle: `${IDLE_MS}ms`, total: '20s' };
// The upstream serves /v1/responses itself: those requests pass through.
const NATIVE_RESPONSES = ['chat', 'completions', 'embeddings', 'responses', 'moderations', 'images', 'audio', 'rerank', 'files', 'realtime'];

const chatBody = (model, stream, extra = {}) =>
  JSON.stringify({ model, stream, messages: [{ role: 'user', content: 'hi' }], ...extra });
const messagesBody = (model, stream) =>
  JSON.stringify({ model, stream, max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] });
// A fetch Response (headers and body unread) for a POST of `body` (a string).
let gw; // the gateway of the 'faults' suite
const post = (path, body) => send(gw.url, path, { method: 'POST', body });
const postRaw = (path, body, headers = {}) =>
  rawRequest('POST', path, { headers: { 'Content-Type': 'application/json', ...headers }, body });

/** The data of every event in an SSE body, parsed as the WHATWG format says. */
function sseEvents(text) {
  const events = [];
  let data = [];
  let name = '';
  for (const line of text.replace(/\r\n?/g, '\n').split('\n')) {
    if (line === '') {
      if (data.length) events.push({ event: name, data: data.join('\n') });
      data = [];
      name = '';
      continue;
    }
    if (line.startsWith(':')) continue;
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
    if (field === 'data') data.push(value);
    else if (field === 'event') name = value;
  }
  return events;
}

/** The error code of a stream's last event, in either API's shape. */
function finalErrorCode(body) {
  const events = sseEvents(body);
  assert.ok(events.length > 0, `no events in ${JSON.stringify(body.slice(0, 200))}`);
  const last = events.at(-1);
  let parsed;
  assert.doesNotThrow(() => {
    parsed = JSON.parse(last.data);
  }, `the last event is not JSON: ${JSON.stringify(last.data.slice(0, 200))}`);
  return parsed.error?.code ?? parsed.error?.type ?? parsed.code;
}

function anthropicEvents(pieces, { stop = true } = {}) {
  const ev = (type, obj) => `event: ${type}\ndata: ${JSON.stringify({ type, ...obj })}\n\n`;
  const out = [
    ev('message_start', {
      message: { id: 'msg_f', type: 'message', role: 'assistant', model: 'up', content: [], stop_reason: null, usage: { input_tokens: 5, output_tokens: 1 } },
    }),
    ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
    ...pieces.map((text) => ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text } })),
    ev('content_block_stop', { index: 0 }),
    ev('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: pieces.length } }),
  ];
  if (stop) out.push(ev('message_stop', {}));
  return out;
}

function responsesEvents(pieces, { complete = true } = {}) {
  const ev = (type, obj) => `event: ${type}\ndata: ${JSON.stringify({ type, ...obj })}\n\n`;
  const out = [ev('response.created', { response: { id: 'resp_f', status: 'in_progress' } })];
  for (const delta of pieces) out.push(ev('response.output_text.delta', { item_id: 'msg_f', output_index: 0, content_index: 0, delta }));
  if (complete) out.push(ev('response.completed', { response: { id: 'resp_f', status: 'completed', usage: { input_tokens: 3, output_tokens: 2 } } }));
  return out;
}

// What a stream's upstream does after its first events, by kind of interruption.
const interruptions = {
  reset: { code: 'upstream_stream_interrupted', run: (x) => x.reset() },
  idle: { code: 'upstream_timeout', run: () => {} }, // stalls: the idle timeout ends it
  truncated: { code: 'upstream_stream_truncated', run: (x) => x.endChunks() }, // clean end, no [DONE]
  endless_line: {
    code: 'upstream_event_too_large',
    run: async (x) => {
      x.chunk('data: {"partial":');
      const junk = 'x'.repeat(16 * 1024);
      // Until the gateway gives up on it (bounded: the gateway's event bound is 64 KiB).
      for (let sent = 0; sent < 64 * MAX_EVENT; sent += junk.length) {
        x.chunk(junk);
        if (!(await x.waitDrained())) return;
      }
    },
  },
};

describe('faults', () => {
  let upstream;

  before(async () => {
    upstream = await startFaultyUpstream();
    gw = await startTahua({
      config: gatewayConfig({
        server: { max_stream_event_bytes: MAX_EVENT },
        providers: [
          { name: 'oai', type: 'openai', base_url: upstream.baseUrl(), api_key: OPENAI_KEY, timeouts: TIMEOUTS, stream_usage: false, apis: NATIVE_RESPONSES },
          { name: 'anth', type: 'anthropic', base_url: upstream.baseUrl(), api_key: ANTHROPIC_KEY, timeouts: TIMEOUTS, default_max_tokens: 64 },
          // Keeps no idle connection: each is closed when its answer ends.
          { name: 'oai-nopool', type: 'openai', base_url: upstream.baseUrl(), api_key: OPENAI_KEY, timeouts: TIMEOUTS, stream_usage: false, pool: { max_idle: 0 } },
        ],
        models: [
          { name: 'gpt', provider: 'oai' },
          { name: 'gpt-nopool', provider: 'oai-nopool' },
          { name: 'claude', provider: 'anth' },
        ],
      }),
    });
  });
  after(async () => {
    await gw?.kill();
    await upstream?.close();
  });
  beforeEach(() => {
    upstream.queue.length = 0;
  });

  describe('keep-alive after an interrupted stream', () => {
    for (const [kind, { code, run }] of Object.entries(interruptions)) {
      it(`${kind}: the stream ends with ${code} and the next request on the connection is answered`, async () => {
        upstream.next(async (x) => {
          x.sse();
          for (const e of chatStreamEvents(['one', 'two'], { done: false, finish: false })) x.chunk(e);
          await run(x);
        });
        const client = await RawClient.connect(gw.port);
        await client.write(postRaw('/v1/chat/completions', chatBody('gpt', true)));
        const first = await client.readResponse(10_000);
        assert.equal(first.status, 200);
        assert.notEqual(first.headers.connection, 'close');
        const body = first.body.toString();
        assert.equal(finalErrorCode(body), code);
        // The error event starts on a line of its own, after a blank line, whatever came before.
        assert.match(body, /(^|\n\n)data: \{"error"[^\n]*\n\n$/);
        // Same connection: the next POST gets its answer.
        await client.write(postRaw('/v1/chat/completions', chatBody('gpt', false)));
        upstream.next((x) => x.json(200, { id: 'c', object: 'chat.completion', created: 1, model: 'up', choices: [{ index: 0, message: { role: 'assistant', content: 'fine' }, finish_reason: 'stop' }] }));
        const second = await client.readResponse();
        assert.equal(second.status, 200);
        assert.equal(JSON.parse(second.body).choices[0].message.content, 'fine');
        assert.equal(client.eof, false);
        client.destroy();
        const logged = await gw.waitForAccessLog((l) => l.error === code);
        assert.equal(logged.at(-1).status, 200);
      });
    }

    it('a translated stream (Anthropic client) reset mid-stream keeps its connection too', async () => {
      upstream.next(async (x) => {
        x.sse();
        for (const e of chatStreamEvents(['one'], { done: false, finish: false })) x.chunk(e);
        x.reset();
      });
      const client = await RawClient.connect(gw.port);
      await client.write(postRaw('/v1/messages', messagesBody('gpt', true)));
      const first = await client.readResponse(10_000);
      assert.notEqual(first.headers.connection, 'close');
      const events = sseEvents(first.body.toString());
      assert.equal(events.at(-1).event, 'error');
      await client.write(rawRequest('GET', '/healthz'));
      assert.equal((await client.readResponse()).status, 200);
      client.destroy();
    });
  });

  describe('no silent truncation', () => {
    // Every client API x provider path, upstream ending cleanly before its end marker.
    const cases = [
      {
        name: 'chat pass-through (OpenAI)',
        path: '/v1/chat/completions',
        body: chatBody('gpt', true),
        upstream: chatStreamEvents(['a', 'b'], { done: false, finish: false }),
      },
      {
        name: 'legacy completions pass-through',
        path: '/v1/completions',
        body: JSON.stringify({ model: 'gpt', prompt: 'hi', stream: true }),
        upstream: [sseData({ id: 'c', object: 'text_completion', created: 1, model: 'up', choices: [{ text: 'a', index: 0, finish_reason: null }] })],
      },
      {
        name: 'responses pass-through (OpenAI)',
        path: '/v1/responses',
        body: JSON.stringify({ model: 'gpt', input: 'hi', stream: true }),
        upstream: responsesEvents(['a'], { complete: false }),
      },
      {
        name: 'messages pass-through (Anthropic)',
        path: '/v1/messages',
        body: messagesBody('claude', true),
        upstream: anthropicEvents(['a'], { stop: false }),
      },
      {
        name: 'messages translated to an OpenAI upstream',
        path: '/v1/messages',
        body: messagesBody('gpt', true),
        upstream: chatStreamEvents(['a'], { done: false, finish: false }),
      },
      {
        name: 'chat translated to an Anthropic upstream',
        path: '/v1/chat/completions',
        body: chatBody('claude', true),
        upstream: anthropicEvents(['a'], { stop: false }).slice(0, 3),
      },
      {
        name: 'responses translated to an Anthropic upstream',
        path: '/v1/responses',
        body: JSON.stringify({ model: 'claude', input: 'hi', stream: true }),
        upstream: anthropicEvents(['a'], { stop: false }).slice(0, 3),
      },
    ];
    for (const c of cases) {
      it(`${c.name}: an error event, the access log and the metric say truncated`, async () => {
        const before = sum(await scrape(gw.url), 'tahua_upstream_errors_total', { kind: 'upstream_stream_truncated' });
        upstream.next((x) => {
          x.sse();
          for (const e of c.upstream) x.chunk(e);
          x.endChunks();
        });
        const res = await post( c.path, c.body);
        assert.equal(res.status, 200);
        const text = await res.text();
        const events = sseEvents(text);
        const last = JSON.parse(events.at(-1).data);
        const code = last.error?.code ?? last.code ?? last.error?.type;
        assert.ok(
          code === 'upstream_stream_truncated' || (last.type === 'error' && /before (it was complete|its end marker|message_stop)|truncated/i.test(last.error?.message ?? last.message)),
          `last event: ${events.at(-1).data}`,
        );
        const logged = await gw.waitForAccessLog((l) => l.path === c.path && l.error === 'upstream_stream_truncated', {
          count: 1,
        });
        assert.ok(logged.length >= 1);
        const after = sum(await scrape(gw.url), 'tahua_upstream_errors_total', { kind: 'upstream_stream_truncated' });
        assert.equal(after, before + 1);
        gw.stdout.lines.length = 0; // the next case waits for its own line
      });
    }

    it('an OpenAI stream that finished (finish_reason) but sent no [DONE] is complete, not truncated', async () => {
      upstream.next((x) => {
        x.sse();
        for (const e of chatStreamEvents(['a'], { done: false, finish: true })) x.chunk(e);
        x.endChunks();
      });
      const res = await post( '/v1/chat/completions', chatBody('gpt', true));
      const events = sseEvents(await res.text());
      assert.equal(JSON.parse(events.at(-1).data).choices[0].finish_reason, 'stop');
      const [line] = await gw.waitForAccessLog((l) => l.path === '/v1/chat/completions' && l.status === 200 && l.stream);
      assert.equal(line.error, null);
      gw.stdout.lines.length = 0;
    });
  });

  describe('the event line bound blames the upstream', () => {
    it('an endless line ends with upstream_event_too_large on a fresh line, counted as an upstream error, not a slow client', async () => {
      const metricsBefore = await scrape(gw.url);
      upstream.next(async (x) => {
        x.sse();
        x.chunk(sseData(chatChunk('')));
        await interruptions.endless_line.run(x);
      });
      const res = await post( '/v1/chat/completions', chatBody('gpt', true));
      const text = await res.text();
      assert.ok(text.length < 4 * MAX_EVENT, `relayed ${text.length} bytes of one line; the bound is ${MAX_EVENT}`);
      const events = sseEvents(text);
      const last = JSON.parse(events.at(-1).data);
      assert.equal(last.error.code, 'upstream_event_too_large');
      assert.equal(last.error.type, 'upstream_error');
      assert.match(last.error.message, /longer than/);
      const m = await scrape(gw.url);
      assert.equal(
        sum(m, 'tahua_upstream_errors_total', { kind: 'upstream_event_too_large' }),
        sum(metricsBefore, 'tahua_upstream_errors_total', { kind: 'upstream_event_too_large' }) + 1,
      );
      assert.equal(sum(m, 'tahua_stream_buffer_overflows_total'), sum(metricsBefore, 'tahua_stream_buffer_overflows_total'));
    });
  });

  describe('HTTP MUSTs (RFC 9112, RFC 9110)', () => {
    const exchange = async (bytes) => {
      const client = await RawClient.connect(gw.port);
      await client.write(bytes);
      const res = await client.readResponse();
      return { client, res };
    };

    // One request on a fresh connection: its answer's status.
    const statusOf = async (bytes) => {
      const { client, res } = await exchange(bytes);
      client.destroy();
      return res.status;
    };
    // The head of the next answer alone (a HEAD answer has no body, whatever its
    // Content-Length says), consumed from the client's buffer.
    const readHead = async (client) => {
      const end = await client.waitFor(() => {
        const i = client.buf.indexOf('\r\n\r\n');
        return i >= 0 && i;
      });
      const head = client.buf.subarray(0, end + 4).toString();
      client.buf = client.buf.subarray(end + 4);
      return head;
    };

    it('HTTP/1.1 without Host, or with two, is 400; HTTP/1.0 without Host is served', async () => {
      assert.equal(await statusOf('GET /healthz HTTP/1.1\r\n\r\n'), 400);
      assert.equal(await statusOf('GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n'), 400);
      assert.equal(await statusOf('GET /healthz HTTP/1.0\r\n\r\n'), 200);
    });

    it('obs-fold in a header is 400', async () => {
      assert.equal(await statusOf('GET /healthz HTTP/1.1\r\nHost: a\r\nX-Folded: one\r\n  two\r\n\r\n'), 400);
    });

    it('HEAD gets the GET headers without a body, and the connection stays usable', async () => {
      const { client: getClient, res: get } = await exchange(rawRequest('GET', '/v1/models'));
      getClient.destroy();
      const client = await RawClient.connect(gw.port);
      await client.write(rawRequest('HEAD', '/healthz') + rawRequest('HEAD', '/v1/models') + rawRequest('GET', '/healthz'));
      const h1 = await readHead(client);
      assert.match(h1, /^HTTP\/1\.1 200 /);
      assert.match(h1, /content-length: 15\r\n/i);
      const h2 = await readHead(client);
      assert.match(h2, /^HTTP\/1\.1 200 /);
      assert.match(h2, new RegExp(`content-length: ${get.body.length}\\r\\n`, 'i'));
      // The next bytes are the GET's answer, not a stray body.
      const third = await client.readResponse();
      assert.equal(third.status, 200);
      assert.equal(JSON.parse(third.body).status, 'ok');
      client.destroy();
    });

    it('HEAD on a POST-only path is 405 with Allow and no body', async () => {
      const client = await RawClient.connect(gw.port);
      await client.write(rawRequest('HEAD', '/v1/chat/completions') + rawRequest('GET', '/healthz'));
      const head = await readHead(client);
      assert.match(head, /^HTTP\/1\.1 405 /);
      assert.match(head, /allow: POST\r\n/i);
      const next = await client.readResponse();
      assert.equal(next.status, 200);
      assert.equal(JSON.parse(next.body).status, 'ok');
      client.destroy();
    });

    it('a URL over the limit is 414', async () => {
      const { client, res } = await exchange(rawRequest('GET', `/v1/models?q=${'a'.repeat(9000)}`));
      assert.equal(res.status, 414);
      assert.equal(JSON.parse(res.body).error.code, 'uri_too_long');
      client.destroy();
    });

    it("a stream's Cache-Control and X-Accel-Buffering are the gateway's alone, not doubled by the upstream's", async () => {
      upstream.next(async (x) => {
        x.sse({ 'Cache-Control': 'no-cache, must-revalidate', 'X-Accel-Buffering': 'yes', 'X-Kept': 'k' });
        for (const e of chatStreamEvents(['ok'])) x.chunk(e);
        x.endChunks();
      });
      const client = await RawClient.connect(gw.port);
      await client.write(postRaw('/v1/chat/completions', chatBody('gpt', true)));
      const res = await client.readResponse();
      client.destroy();
      // (parseResponse joins repeated headers with ", ": one value means one header.)
      assert.equal(res.headers['cache-control'], 'no-cache');
      assert.equal(res.headers['x-accel-buffering'], 'no');
      assert.equal(res.headers['x-kept'], 'k', 'other upstream headers are relayed');
    });

    it("headers the upstream's Connection header names are not relayed", async () => {
      upstream.next((x) =>
        x.json(
          200,
          { id: 'c', object: 'chat.completion', created: 1, model: 'up', choices: [{ index: 0, message: { role: 'assistant', content: 'x' }, finish_reason: 'stop' }] },
          { Connection: 'keep-alive, X-Hop-Secret', 'X-Hop-Secret': 'internal', 'X-Kept': 'yes' },
        ),
      );
      const res = await post( '/v1/chat/completions', chatBody('gpt', false));
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('x-hop-secret'), null);
      assert.equal(res.headers.get('x-kept'), 'yes');
      await res.text();
    });
  });

  describe('no secret in any byte', () => {
    const noKey = (text) => {
      assert.ok(!text.includes(OPENAI_KEY), `the OpenAI key leaked: ${text.slice(0, 300)}`);
      assert.ok(!text.includes(ANTHROPIC_KEY), `the Anthropic key leaked: ${text.slice(0, 300)}`);
    };

    it('a key echoed in pass-through stream events is redacted', async () => {
      upstream.next((x) => {
        x.sse();
        for (const e of chatStreamEvents([`key ${OPENAI_KEY} here`])) x.chunk(e);
        x.endChunks();
      });
      const res = await post( '/v1/chat/completions', chatBody('gpt', true));
      const text = await res.text();
      noKey(text);
      assert.match(text, /key \[redacted\] here/);
    });

    it('a key split across two upstream reads is caught, and only its possible start is held back', async () => {
      const cut = 10;
      let second;
      upstream.next(async (x) => {
        x.sse();
        x.chunk(sseData(chatChunk('')));
        x.chunk(`data: {"choices":[{"index":0,"delta":{"content":"visible ${OPENAI_KEY.slice(0, cut)}`);
        await second;
        x.chunk(`${OPENAI_KEY.slice(cut)} tail"},"finish_reason":null}]}\n\n`);
        x.chunk('data: [DONE]\n\n');
        x.endChunks();
      });
      let release;
      second = new Promise((r) => {
        release = r;
      });
      const client = await RawClient.connect(gw.port);
      await client.write(postRaw('/v1/chat/completions', chatBody('gpt', true)));
      // What cannot be the start of a key goes out at once.
      await client.waitForText('"content":"visible ');
      assert.ok(!client.buf.toString().includes(OPENAI_KEY.slice(0, cut)), 'the possible start of the key was held back');
      release();
      const res = await client.readResponse();
      const text = res.body.toString();
      noKey(text);
      assert.match(text, /visible \[redacted\] tail/);
      client.destroy();
    });

    it('keys in response headers, non-stream bodies and translated streams are redacted', async () => {
      upstream.next((x) =>
        x.json(
          200,
          { id: 'c', object: 'chat.completion', created: 1, model: 'up', choices: [{ index: 0, message: { role: 'assistant', content: `k=${OPENAI_KEY}` }, finish_reason: 'stop' }] },
          { 'X-Echo': `Bearer ${OPENAI_KEY}` },
        ),
      );
      const res = await post( '/v1/chat/completions', chatBody('gpt', false));
      const headers = JSON.stringify([...res.headers]);
      noKey(headers);
      assert.match(headers, /\[redacted\]/);
      noKey(await res.text());

      upstream.next((x) => {
        x.sse({ 'X-Echo': ANTHROPIC_KEY });
        for (const e of anthropicEvents([`echo ${ANTHROPIC_KEY}`])) x.chunk(e);
        x.endChunks();
      });
      const translated = await post( '/v1/chat/completions', chatBody('claude', true));
      noKey(JSON.stringify([...translated.headers]));
      const text = await translated.text();
      noKey(text);
      assert.match(text, /echo \[redacted\]/);
    });

    it('keys in error bodies of every path are redacted', async () => {
      for (const [path, body] of [
        ['/v1/chat/completions', chatBody('gpt', true)],
        ['/v1/messages', messagesBody('claude', false)],
        ['/v1/chat/completions', chatBody('claude', false)],
      ]) {
        // The key of the provider the path goes to (a provider never sees another's key).
        const key = /claude/.test(body) ? ANTHROPIC_KEY : OPENAI_KEY;
        upstream.next((x) => x.json(401, { error: { message: `bad key ${key}!`, type: 'invalid_request_error' } }));
        const res = await post( path, body);
        assert.equal(res.status, 401);
        noKey(await res.text());
      }
    });
  });

  // The gateway parses upstream bodies where it read them (chunk framing removed in
  // place; a burst larger than the connection's small buffer continues in the worker's
  // shared read buffer). These pin the cases a read boundary can cut.
  describe('upstream body framing', () => {
    const completion = (content) => ({
      id: 'c', object: 'chat.completion', created: 1, model: 'up',
      choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
    });

    it('a stream written one byte per write (chunk lines, extensions, CRLFs and trailers cut anywhere) arrives whole, and its upstream connection is reused', async () => {
      const events = chatStreamEvents(['alpha', 'beta', 'gamma']);
      let wire = '';
      for (const e of events) wire += `${Buffer.byteLength(e).toString(16)};ext=1\r\n${e}\r\n`;
      wire += '0\r\nX-Trailer: t\r\n\r\n';
      upstream.next(async (x) => {
        x.socket.setNoDelay(true);
        x.sse();
        for (const byte of Buffer.from(wire)) {
          x.write(Buffer.of(byte));
          await new Promise((r) => setImmediate(r)); // pacing only: each byte its own write
        }
      });
      const res = await post('/v1/chat/completions', chatBody('gpt', true));
      assert.equal(res.status, 200);
      const text = await res.text();
      assert.equal(text, events.join(''), 'the events, byte for byte, without framing, extensions or trailer');
      const before = upstream.connections;
      // The same upstream connection answers the next request: the body ended where it should.
      upstream.next((x) => x.json(200, completion('again')));
      const next = await post('/v1/chat/completions', chatBody('gpt', false));
      assert.equal((await next.json()).choices[0].message.content, 'again');
      assert.equal(upstream.connections, before, 'no new upstream connection');
    });

    it('a burst larger than the read buffer (events of 60 KiB written at once) and a 300 KiB answer arrive intact', async () => {
      const big = (i) => sseData(chatChunk(String.fromCharCode(97 + i).repeat(60 * 1024)));
      const events = [sseData(chatChunk('')), big(0), big(1), big(2), big(3), 'data: [DONE]\n\n'];
      upstream.next(async (x) => {
        x.sse();
        // One write: the gateway finds well over 64 KiB waiting in its socket.
        x.write(Buffer.concat(events.map((e) => Buffer.concat([Buffer.from(`${Buffer.byteLength(e).toString(16)}\r\n`), Buffer.from(e), Buffer.from('\r\n')]))));
        x.endChunks();
      });
      const res = await post('/v1/chat/completions', chatBody('gpt', true));
      assert.equal(await res.text(), events.join(''));

      const content = 'z'.repeat(300 * 1024);
      upstream.next((x) => x.json(200, completion(content)));
      const plain = await post('/v1/chat/completions', chatBody('gpt', false));
      assert.equal(plain.status, 200);
      assert.equal((await plain.json()).choices[0].message.content, content);
    });

    it('a kept connection the upstream closed meanwhile loses no request: it goes again, once, on a new connection', async () => {
      const closedByUpstream = deferred();
      upstream.next(async (x) => {
        x.json(200, completion('first'));
        await x.waitDrained();
        x.socket.destroy(); // a FIN without Connection: close, just after the answer: the gateway kept it
        await x.closed;
        closedByUpstream.resolve();
      });
      const first = await post('/v1/chat/completions', chatBody('gpt', false));
      assert.equal((await first.json()).choices[0].message.content, 'first');
      await closedByUpstream.promise;
      const connections = upstream.connections;
      const requests = upstream.requests.length;
      upstream.next((x) => x.json(200, completion('second')));
      const second = await post('/v1/chat/completions', chatBody('gpt', false));
      assert.equal(second.status, 200);
      assert.equal((await second.json()).choices[0].message.content, 'second');
      assert.equal(upstream.connections, connections + 1, 'one new connection');
      assert.equal(upstream.requests.length, requests + 1, 'the request reached the upstream once');
    });

    it('a connection closed when its answer ends still delivers the last piece read with that end', async () => {
      // The end of the body and the events before it arrive in one read, and the
      // connection is not kept (pool max_idle 0): those bytes must outlive it.
      const events = chatStreamEvents(['last', 'words']);
      upstream.next(async (x) => {
        x.sse();
        await x.waitDrained();
        x.write(events.map((e) => `${Buffer.byteLength(e).toString(16)}\r\n${e}\r\n`).join('') + '0\r\n\r\n');
      });
      const res = await post('/v1/chat/completions', chatBody('gpt-nopool', true));
      assert.equal(await res.text(), events.join(''));
      const answer = { id: 'c', object: 'chat.completion', created: 1, model: 'up', choices: [{ index: 0, message: { role: 'assistant', content: 'whole' }, finish_reason: 'stop' }] };
      upstream.next((x) => {
        const payload = JSON.stringify(answer);
        x.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`);
      });
      const plain = await post('/v1/chat/completions', chatBody('gpt-nopool', false));
      assert.deepEqual(await plain.json(), answer);
    });

    it('a malformed chunk size mid-stream ends the stream with an error event, after the good events of the same read', async () => {
      const good = sseData(chatChunk('one'));
      upstream.next(async (x) => {
        x.sse();
        await x.waitDrained();
        x.write(`${Buffer.byteLength(good).toString(16)}\r\n${good}\r\nzz\r\nnot a chunk\r\n`); // one write
      });
      const res = await post('/v1/chat/completions', chatBody('gpt', true));
      const body = await res.text();
      assert.match(body, /"content":"one"/);
      assert.equal(finalErrorCode(body), 'upstream_bad_response');
    });
  });

  describe('upstream answers that are not what they claim', () => {
    it('an HTML error page becomes a JSON error in the client API shape, status kept', async () => {
      const html = `<html><body><h1>502 Bad Gateway</h1>${'<p>filler</p>'.repeat(200)}</body></html>`;
      upstream.next((x) => {
        x.head(502, { 'Content-Type': 'text/html', 'Content-Length': Buffer.byteLength(html) });
        x.write(html);
      });
      const res = await post( '/v1/chat/completions', chatBody('gpt', false));
      assert.equal(res.status, 502);
      assert.match(res.headers.get('content-type'), /application\/json/);
      const body = await res.json();
      assert.equal(body.error.type, 'upstream_error');
      assert.ok(body.error.message.length < 600, 'the vendor text is trimmed');
      assert.match(body.error.message, /502 Bad Gateway/);

      upstream.next((x) => {
        x.head(503, { 'Content-Type': 'text/html', 'Content-Length': Buffer.byteLength(html) });
        x.write(html);
      });
      const anth = await post( '/v1/messages', messagesBody('claude', false));
      assert.equal(anth.status, 503);
      const ab = await anth.json();
      assert.equal(ab.type, 'error');
      assert.equal(typeof ab.error.type, 'string');
    });

    it('a 200 pass-through whose body is not JSON is 502 upstream_bad_response', async () => {
      upstream.next((x) => {
        x.head(200, { 'Content-Type': 'application/json', 'Content-Length': 12 });
        x.write('{"choices": ');
      });
      const res = await post( '/v1/chat/completions', chatBody('gpt', false));
      assert.equal(res.status, 502);
      assert.equal((await res.json()).error.code, 'upstream_bad_response');
    });

    it('inbound JSON nested deeper than the limit is 400 before anything is forwarded', async () => {
      const seen = upstream.requests.length;
      const deep = `${'['.repeat(200)}${']'.repeat(200)}`;
      const res = await post( '/v1/chat/completions', `{"model":"gpt","messages":[],"x":${deep}}`);
      assert.equal(res.status, 400);
      const body = await res.json();
      assert.equal(body.error.code, 'invalid_json');
      assert.match(body.error.message, /nested deeper than/);
      assert.equal(upstream.requests.length, seen);
    });
  });
});

describe('the body timeouts', () => {
  it('a stream that keeps arriving within idle but outlasts total ends with the total timeout, counted as total', async (t) => {
    const upstream = await startFaultyUpstream({ t });
    upstream.defaultBehaviour = async (x) => {
      x.sse();
      // An event every 20 ms (well within idle) until the gateway closes the connection.
      let closed = false;
      x.closed.then(() => {
        closed = true;
      });
      for (let i = 0; i < 1000 && !closed; i++) {
        x.chunk(sseData(chatChunk(`p${i} `)));
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    const gw = await startTahua({
      t,
      config: gatewayConfig({
        providers: [{ name: 'oai', type: 'openai', base_url: upstream.baseUrl(), api_key: OPENAI_KEY, stream_usage: false,
                      timeouts: { connect: '2s', first_byte: '2s', idle: '5s', total: '400ms' } }],
        models: [{ name: 'gpt', provider: 'oai' }],
      }),
    });
    const res = await send(gw.url, '/v1/chat/completions', { method: 'POST', body: chatBody('gpt', true) });
    const body = await res.text();
    assert.equal(finalErrorCode(body), 'upstream_timeout');
    assert.match(sseEvents(body).at(-1).data, /total timeout 400ms/);
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_upstream_timeouts_total', { provider: 'oai', kind: 'total' }), 1);
    assert.equal(sum(m, 'tahua_upstream_timeouts_total', { provider: 'oai', kind: 'idle' }), 0);
  });
});

describe('out of file descriptors', () => {
  it('a new upstream connection that finds no descriptor is 503 gateway_overloaded, not an upstream failure', async (t) => {
    const LIMIT = 48;
    const upstream = await startFaultyUpstream({ t });
    upstream.defaultBehaviour = (x) =>
      x.json(200, { id: 'c', object: 'chat.completion', created: 1, model: 'up', choices: [{ index: 0, message: { role: 'assistant', content: 'x' }, finish_reason: 'stop' }] });
    const gw = await startTahua({
      t,
      prefix: ['prlimit', `--nofile=${LIMIT}:${LIMIT}`, '--'],
      // The config watcher opens the file now and then: the descriptor table must stay
      // exactly full while the test counts.
      args: ['--no-watch'],
      config: gatewayConfig({
        server: { max_connections: 1000 },
        providers: [{ name: 'oai', type: 'openai', base_url: upstream.baseUrl(), api_key: OPENAI_KEY, timeouts: TIMEOUTS, pool: { max_idle: 0 } }],
        models: [{ name: 'gpt', provider: 'oai' }],
      }),
    });
    // Fill the descriptor table with idle keep-alive connections, one descriptor each,
    // each proven accepted by its answer, until no number under the limit is free
    // (read from /proc: inherited descriptors above the limit do not count).
    const used = () => readdirSync(`/proc/${gw.child.pid}/fd`).filter((fd) => Number(fd) < LIMIT).length;
    const open = [];
    while (used() < LIMIT) {
      assert.ok(open.length < 2 * LIMIT, 'the descriptor table never filled');
      const c = await RawClient.connect(gw.port);
      await c.write(rawRequest('GET', '/healthz'));
      assert.equal((await c.readResponse(10_000)).status, 200);
      open.push(c);
    }
    // An accepted connection asks for an upstream call: no descriptor is left for it.
    await open[0].write(postRaw('/v1/chat/completions', chatBody('gpt', false)));
    const res = await open[0].readResponse(10_000);
    assert.equal(res.status, 503);
    const err = JSON.parse(res.body).error;
    assert.equal(err.code, 'gateway_overloaded');
    assert.equal(err.type, 'server_error');
    assert.equal(upstream.requests.length, 0);
    await gw.stderr.waitUntil(() => gw.stderr.json().some((l) => /out of file descriptors/.test(l.msg ?? '')), 5000, 'the warning');
    for (const c of open) c.destroy();
    // Not counted against the upstream: no upstream error, no breaker or ejection input.
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_upstream_errors_total'), 0);
  });
});
