// Streaming behaviour: no buffering, client aborts propagate upstream, upstream failures
// mid-stream become a final SSE error event, upstream timeouts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gatewayWithUpstream, openaiClient, sharedFixture, MODEL } from './lib/fixtures.mjs';
import { gatewayConfig, startTahua } from './lib/tahua.mjs';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { post, chatBody, collectData, chatText, expectError, openStream, expectFinalErrorEvent } from './lib/http.mjs';
import { RawClient, rawRequest } from './lib/raw.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { withTimeout, eventually } from './lib/util.mjs';
import net from 'node:net';

// The payload of a chunked body (whole, as received).
function dechunk(text) {
  let out = '';
  let at = 0;
  for (;;) {
    const eol = text.indexOf('\r\n', at);
    const size = parseInt(text.slice(at, eol), 16);
    assert.ok(Number.isInteger(size), `a chunk size line at ${at}`);
    if (size === 0) return out;
    out += text.slice(eol + 2, eol + 2 + size);
    at = eol + 2 + size + 2;
  }
}

const STREAM = chatBody(MODEL, { stream: true });

describe('streaming through tahua', () => {
  const ref = sharedFixture(() => gatewayWithUpstream());

  it('forwards the first event before the upstream has finished', async () => {
    const fx = ref.current;
    const ex = fx.upstream.next({ mode: 'hold' });
    const { events, first } = await openStream(fx.gw.url, STREAM);
    assert.equal(ex.state, 'streaming', 'upstream is still holding the stream');
    assert.deepEqual(JSON.parse(first.data).choices[0].delta.role, 'assistant');
    ex.release();
    const rest = await withTimeout(collectData(events), 5000, 'the rest of the stream');
    assert.equal(rest.at(-1), '[DONE]');
    assert.equal(chatText(rest), ex.text);
    await withTimeout(ex.finished, 1000, 'upstream finished');
  });

  it('serves two held streams concurrently on one worker', async () => {
    const fx = ref.current;
    const ex1 = fx.upstream.next({ mode: 'hold' });
    const ex2 = fx.upstream.next({ mode: 'hold' });
    const s1 = await openStream(fx.gw.url, STREAM);
    const s2 = await openStream(fx.gw.url, STREAM);
    ex2.release();
    ex1.release();
    const [r1, r2] = await withTimeout(Promise.all([collectData(s1.events), collectData(s2.events)]), 5000, 'both streams');
    assert.equal(r1.at(-1), '[DONE]');
    assert.equal(r2.at(-1), '[DONE]');
  });

  it('client abort (AbortController) closes the upstream connection mid-stream', async () => {
    const fx = ref.current;
    const ex = fx.upstream.next({ mode: 'hold' });
    const ac = new AbortController();
    await openStream(fx.gw.url, STREAM, { signal: ac.signal });
    ac.abort();
    await withTimeout(ex.clientClosed, 5000, 'tahua closing the upstream socket');
    assert.equal(ex.state, 'closed');
    await eventually(async () => sum(await scrape(fx.gw.url), 'tahua_active_streams') === 0, {
      what: 'tahua_active_streams back to 0',
    });
    const next = await post(fx.gw.url, '/v1/chat/completions', chatBody(MODEL));
    assert.equal(next.status, 200, 'the gateway still serves after an abort');
  });

  it('client socket destroyed mid-stream closes the upstream connection', async () => {
    const fx = ref.current;
    const ex = fx.upstream.next({ mode: 'hold' });
    const client = await RawClient.connect(fx.gw.port);
    await client.write(rawRequest('POST', '/v1/chat/completions', {
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(STREAM),
    }));
    await client.waitForText('data: ');
    client.destroy();
    await withTimeout(ex.clientClosed, 5000, 'tahua closing the upstream socket');
  });

  it('a client that hangs up before a non-streaming answer came closes the upstream connection, counted as 499', async () => {
    // Nothing is written to the client before the answer: only the client watch (armed
    // at the worker's watch tick) can notice. Without it the upstream would be held
    // until its first_byte timeout, and the request counted as a 504.
    const fx = ref.current;
    const ex = fx.upstream.next({ mode: 'stall-headers' });
    const before = sum(await scrape(fx.gw.url), 'tahua_requests_total', { status: '499' });
    const client = await RawClient.connect(fx.gw.port);
    await client.write(rawRequest('POST', '/v1/chat/completions', {
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(chatBody(MODEL)),
    }));
    await ex.received;
    client.destroy();
    await withTimeout(ex.clientClosed, 5000, 'tahua closing the upstream socket');
    await eventually(async () => sum(await scrape(fx.gw.url), 'tahua_requests_total', { status: '499' }) === before + 1, {
      what: 'one more 499 in tahua_requests_total',
    });
  });

  it('upstream reset mid-stream ends the stream with an upstream_stream_interrupted event', async () => {
    const fx = ref.current;
    const ex = fx.upstream.next({ mode: 'hold' });
    const { events } = await openStream(fx.gw.url, STREAM);
    ex.reset();
    const rest = await withTimeout(collectData(events), 5000, 'the stream to end');
    const error = expectFinalErrorEvent(rest, ['upstream_stream_interrupted']);
    assert.equal(error.type, 'upstream_error');
  });

  it('the SDK sees an upstream reset as an error, not a clean end', async () => {
    const fx = ref.current;
    const ex = fx.upstream.next({ mode: 'hold' });
    const stream = await openaiClient(fx.gw).chat.completions.create({ model: MODEL, messages: STREAM.messages, stream: true });
    const iter = stream[Symbol.asyncIterator]();
    const first = await withTimeout(iter.next(), 3000, 'first chunk');
    assert.equal(first.value.choices[0].delta.role, 'assistant');
    ex.reset();
    await assert.rejects(
      withTimeout((async () => {
        for (let r = await iter.next(); !r.done; r = await iter.next());
      })(), 5000, 'the SDK stream to end'),
      (err) => err.code === 'upstream_stream_interrupted',
    );
  });
});

describe('upstream timeouts', () => {
  const ref = sharedFixture(() =>
    gatewayWithUpstream({
      provider: { timeouts: { connect: '2s', first_byte: '300ms', idle: '300ms', total: '30s' } },
    }),
  );

  it('no response headers within first_byte -> 504 upstream_timeout', async () => {
    const fx = ref.current;
    const ex = fx.upstream.next({ mode: 'stall-headers' });
    const started = Date.now();
    const res = await post(fx.gw.url, '/v1/chat/completions', chatBody(MODEL));
    const elapsed = Date.now() - started;
    expectError(res, 504, 'upstream_timeout');
    assert.ok(elapsed >= 250 && elapsed < 3000, `answered after ${elapsed}ms`);
    await withTimeout(ex.clientClosed, 2000, 'tahua closing the stalled upstream connection');
  });

  it('streaming request with no response headers within first_byte -> 504 upstream_timeout', async () => {
    const fx = ref.current;
    fx.upstream.next({ mode: 'stall-headers' });
    const res = await post(fx.gw.url, '/v1/chat/completions', STREAM);
    expectError(res, 504, 'upstream_timeout');
  });

  it('upstream silent mid-stream longer than idle -> final SSE error event upstream_timeout (idle), as documented', async () => {
    const fx = ref.current;
    const ex = fx.upstream.next({ mode: 'hold' }); // never released
    const { events } = await openStream(fx.gw.url, STREAM);
    const rest = await withTimeout(collectData(events), 3000, 'the stream to end after the idle timeout');
    // A timeout, not an interruption: the stream table of docs/errors.md says so.
    const error = expectFinalErrorEvent(rest, ['upstream_timeout']);
    assert.equal(error.type, 'upstream_error');
    assert.match(error.message, /idle timeout \d+ms/);
    await withTimeout(ex.clientClosed, 2000, 'tahua closing the idle upstream connection');
  });

  it('timeouts are counted by the limit that expired', async () => {
    const fx = ref.current;
    const m = await scrape(fx.gw.url);
    const count = (kind) => sum(m, 'tahua_upstream_timeouts_total', { provider: 'up', kind });
    assert.ok(count('first_byte') >= 2, 'first_byte timeouts counted');
    assert.ok(count('idle') >= 1, 'the idle timeout counted');
    assert.equal(count('connect'), 0);
  });

  it('an upstream that keeps sending within idle is not cut', async () => {
    const fx = ref.current;
    const res = await post(fx.gw.url, '/v1/chat/completions', STREAM);
    assert.equal(res.status, 200);
    assert.match(res.text, /data: \[DONE\]\n\n$/);
  });
});

describe('timeouts by scope', () => {
  it('the top-level timeouts apply to providers without their own; a route overrides them', async (t) => {
    const upstream = await startMockUpstream({ t });
    const config = gatewayConfig({
      providers: [{ name: 'up', type: 'openai', base_url: upstream.baseUrl(), api_key: 'sk-test-provider-key' }],
      models: [{ name: MODEL, provider: 'up' }],
    });
    config.timeouts = { first_byte: '300ms' };
    config.routes = [{ name: 'patient', match: { model: 'patient' }, target: MODEL, timeouts: { first_byte: '10s' } }];
    const gw = await startTahua({ t, config });
    upstream.defaultBehaviour = { delayMs: 1000 };
    const direct = await post(gw.url, '/v1/chat/completions', chatBody(MODEL));
    expectError(direct, 504, 'upstream_timeout');
    const [line] = await gw.waitForAccessLog((l) => l.request_id === direct.headers['x-request-id']);
    assert.equal(line.timeout, 'first_byte');
    const routed = await post(gw.url, '/v1/chat/completions', chatBody('patient'));
    assert.equal(routed.status, 200, 'the route waits longer than the global first_byte');
  });
});

describe('stream heartbeats', () => {
  it('a connection that has not sent its request yet survives the heartbeat sweeps', async (t) => {
    const fx = await gatewayWithUpstream({ t, server: { stream_heartbeat: '100ms' } });
    const idle = await RawClient.connect(fx.gw.port); // accepted, no request yet
    t.after(() => idle.destroy());
    const ex = fx.upstream.next({ mode: 'hold' });
    const client = await RawClient.connect(fx.gw.port);
    t.after(() => client.destroy());
    await client.write(
      rawRequest('POST', '/v1/chat/completions', { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(STREAM) }),
    );
    // Heartbeats on the stream prove sweeps ran while the idle connection was there.
    const count = () => (client.buf.toString().match(/\r\n: keep-alive\n\n\r\n/g) ?? []).length;
    await client.waitFor(() => count() >= 2, 3000, 'two heartbeats');
    ex.release();
    await client.readResponse();
    await idle.write(rawRequest('GET', '/healthz'));
    assert.equal((await idle.readResponse()).status, 200);
    assert.ok(fx.gw.running, 'the gateway is still running');
  });

  it('sends ": keep-alive" comments while the upstream is silent, and none while it streams', async (t) => {
    const fx = await gatewayWithUpstream({ t, server: { stream_heartbeat: '100ms' } });
    const ex = fx.upstream.next({ mode: 'hold' });
    const client = await RawClient.connect(fx.gw.port);
    t.after(() => client.destroy());
    await client.write(
      rawRequest('POST', '/v1/chat/completions', {
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(STREAM),
      }),
    );
    // The upstream holds after its first event: heartbeats must keep coming.
    const count = () => (client.buf.toString().match(/\r\n: keep-alive\n\n\r\n/g) ?? []).length;
    await client.waitFor(() => count() >= 3, 3000, 'three heartbeats on a silent stream');
    ex.release();
    const res = await client.readResponse();
    const body = res.body.toString();
    assert.match(body, /data: \[DONE\]\n\n$/);
    // Heartbeats are SSE comments between events, never inside one.
    for (const block of body.split('\n\n').filter(Boolean)) {
      assert.ok(block.startsWith('data: ') || block === ': keep-alive', `well-formed block: ${JSON.stringify(block)}`);
    }
    // The stream still parses for an SDK: the content is intact.
    assert.equal(
      body.split('\n\n').filter((b) => b.startsWith('data: {')).map((b) => JSON.parse(b.slice(6)).choices?.[0]?.delta?.content ?? '').join(''),
      ex.text,
    );
  });
});

describe('slow clients', () => {
  // 20,000 events of ~1 KiB (~20 MB): more than the socket buffers of a client that
  // reads nothing (the send side grows to tcp_wmem's 4 MB at most) plus its 1 MiB stream
  // buffer, so it must overflow. The fast client's stream (~0.5 MB) is smaller than the
  // buffer alone: however the machine schedules its reads, it cannot overflow.
  const BIG = Array.from({ length: 20_000 }, (_, i) => `${String(i).padStart(6, '0')}${'x'.repeat(900)}`);
  const MEDIUM = BIG.slice(0, 500);

  it('a client that stops reading is cut with an error event; the upstream is cancelled and fast clients are unaffected', async (t) => {
    const fx = await gatewayWithUpstream({ t, server: { workers: 1, stream_buffer_bytes: 1048576 } });
    // Its upstream sends everything but the end, then holds: the stream is still live.
    const slowEx = fx.upstream.next({ pieces: BIG, mode: 'hold', holdAt: BIG.length });
    // The slow client sends its request and then reads nothing: a paused socket (no
    // reads, so the kernel does not grow its receive window either).
    const slow = net.connect({ port: fx.gw.port, host: '127.0.0.1' });
    t.after(() => slow.destroy());
    await new Promise((resolve, reject) => slow.once('connect', resolve).once('error', reject));
    slow.pause();
    const received = [];
    // The body ends with its last chunk and the connection stays open (keep-alive: the
    // framing is intact, so the client may send its next request on it).
    let tail = '';
    let bodyEnded;
    const slowEnded = new Promise((resolve) => {
      bodyEnded = resolve;
    });
    slow.on('data', (d) => {
      received.push(d);
      tail = (tail + d.toString('latin1')).slice(-16);
      if (tail.endsWith('\r\n0\r\n\r\n')) bodyEnded();
    });
    slow.write(rawRequest('POST', '/v1/chat/completions', { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(STREAM) }));
    await slowEx.received;

    // A fast client on the same worker streams meanwhile, to the end.
    const fastEx = fx.upstream.next({ pieces: MEDIUM });
    const client = openaiClient(fx.gw, { timeout: 60_000 });
    const stream = await client.chat.completions.create({ ...STREAM, stream: true });
    let fastText = '';
    for await (const chunk of stream) fastText += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(fastText, MEDIUM.join(''), 'the fast client got every byte');
    await withTimeout(fastEx.finished, 5000, 'the fast stream finished upstream');

    // The slow one overflowed: its upstream was cancelled before it finished sending.
    await withTimeout(slowEx.clientClosed, 10_000, 'tahua cancelling the slow stream upstream');
    assert.equal(slowEx.state, 'closed');
    const metrics = await scrape(fx.gw.url);
    assert.equal(sum(metrics, 'tahua_stream_buffer_overflows_total'), 1);

    // Reading now, the slow client gets a well-formed stream: whole events in order,
    // then the overflow error event as the last one (no [DONE]: it did not complete).
    slow.resume();
    await withTimeout(slowEnded, 20_000, 'the rest of the slow stream');
    const raw = Buffer.concat(received).toString('utf8');
    assert.match(raw, /^HTTP\/1\.1 200 /);
    assert.match(raw, /\r\n0\r\n\r\n$/, 'the chunked body is terminated');
    const body = dechunk(raw.slice(raw.indexOf('\r\n\r\n') + 4));
    const blocks = body.split('\n\n').filter(Boolean);
    const last = blocks.pop();
    assert.match(last, /^data: /);
    assert.equal(JSON.parse(last.slice(6)).error.code, 'stream_buffer_overflow');
    let text = '';
    for (const block of blocks) {
      assert.ok(block.startsWith('data: {'), `a whole event: ${block.slice(0, 40)}`);
      text += JSON.parse(block.slice(6)).choices[0].delta.content ?? '';
    }
    assert.ok(text.length > 0 && text.length < BIG.join('').length, 'part of the stream, not all of it');
    assert.ok(BIG.join('').startsWith(text), 'what arrived is the start of the stream, in order and intact');
    assert.doesNotMatch(raw.slice(0, raw.indexOf('\r\n\r\n')), /connection: close/i);
    // The same connection serves the next request.
    const nextAnswer = new Promise((resolve) => {
      let buf = '';
      slow.removeAllListeners('data');
      slow.on('data', (d) => {
        buf += d.toString('latin1');
        if (/^HTTP\/1\.1 200 [\s\S]*\r\n\r\n\{"status":"ok"\}$/.test(buf)) resolve(buf);
      });
    });
    slow.write(rawRequest('GET', '/healthz'));
    await withTimeout(nextAnswer, 5000, 'the next answer on the same connection');
  });
});
