// OpenTelemetry traces: W3C traceparent continued or started, propagated to every
// upstream attempt, one server span and one client span per attempt exported over
// OTLP/HTTP to a receiver (protobuf by default, decoded with OpenTelemetry JS's own
// decoders; JSON with `protocol: json`), GenAI attributes, sampling, content capture,
// and an exporter that is down costing requests nothing.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startMockUpstream, MOCK_PROMPT_TOKENS, DEFAULT_PIECES } from './lib/mock_upstream.mjs';
import { startCollector, attributes } from './lib/collector.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { post, chatBody } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { eventually } from './lib/util.mjs';
import { makeCa, issueCert } from './lib/certs.mjs';

const MODEL = 'gpt-test';
const MARKER = 'TRACE-PROMPT-MARKER-7y3';
const PARENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT_SPAN = '00f067aa0ba902b7';

async function setup(t, { tracing = {}, provider = {}, collector, env = {} } = {}) {
  const upstream = await startMockUpstream({ t });
  const c = collector ?? (await startCollector({ t }));
  const config = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl(), provider)],
    models: [{ name: MODEL, provider: 'up' }],
  });
  config.tracing = { endpoint: `${c.url}/v1/traces`, flush_interval: '50ms', ...tracing };
  const gw = await startTahua({ config, t, env });
  return { upstream, collector: c, gw };
}

const byKind = (spans, kind) => spans.filter((s) => s.kind === kind);

const CONTENT_TYPES = { protobuf: 'application/x-protobuf', json: 'application/json' };

describe('tracing (OTLP/HTTP)', () => {
  for (const protocol of ['protobuf', 'json']) it(`continues the caller trace: server span, client span, traceparent to the upstream, GenAI attributes (${protocol})`, async (t) => {
    // protobuf is the default: the first run leaves `protocol` out.
    const { upstream, collector, gw } = await setup(t, { tracing: protocol === 'json' ? { protocol } : {} });
    const res = await post(gw.url, '/v1/chat/completions',
      chatBody(MODEL, { content: MARKER, max_tokens: 50, temperature: 0.25 }),
      { headers: { traceparent: `00-${PARENT_TRACE}-${PARENT_SPAN}-01`, tracestate: 'vendor=abc' } });
    assert.equal(res.status, 200);
    const spans = await collector.waitFor((c) => c.spans().length >= 2 && c.spans(), 'two spans');
    assert.equal(spans.length, 2);
    const [server] = byKind(spans, 2);
    const [client] = byKind(spans, 3);
    assert.deepEqual(collector.requests.map((r) => [r.path, r.headers['content-type']]), [['/v1/traces', CONTENT_TYPES[protocol]]]);
    assert.equal(server.traceId, PARENT_TRACE);
    assert.equal(server.parentSpanId, PARENT_SPAN, 'the server span is a child of the caller span');
    assert.equal(client.traceId, PARENT_TRACE);
    assert.equal(client.parentSpanId, server.spanId, 'the attempt is a child of the server span');
    assert.match(server.spanId, /^[0-9a-f]{16}$/);
    assert.notEqual(client.spanId, server.spanId);
    // The upstream saw this attempt's span as its parent, and the caller's tracestate.
    const sent = upstream.requests[0].headers;
    assert.equal(sent.traceparent, `00-${PARENT_TRACE}-${client.spanId}-01`);
    assert.equal(sent.tracestate, 'vendor=abc');
    const a = attributes(server);
    assert.equal(a['gen_ai.operation.name'], 'chat');
    assert.equal(a['gen_ai.provider.name'], 'openai');
    assert.equal(a['gen_ai.request.model'], MODEL);
    assert.equal(a['gen_ai.response.model'], MODEL);
    assert.equal(a['gen_ai.request.max_tokens'], 50);
    assert.equal(a['gen_ai.request.temperature'], 0.25);
    assert.equal(a['gen_ai.usage.input_tokens'], MOCK_PROMPT_TOKENS);
    assert.equal(a['gen_ai.usage.output_tokens'], DEFAULT_PIECES.length);
    assert.equal(a['http.response.status_code'], 200);
    assert.equal(a['tahua.deployment'], 'up');
    assert.equal(a['tahua.version'], 'stable');
    assert.equal(a['tahua.end_reason'], 'done');
    assert.deepEqual(a['gen_ai.response.finish_reasons'], ['stop']);
    assert.ok(a['gen_ai.server.time_to_first_token'] > 0);
    assert.deepEqual(server.events.map((e) => e.name), ['gen_ai.first_token']);
    assert.equal(server.status.code, 0);
    const ca = attributes(client);
    assert.equal(ca['gen_ai.request.model'], MODEL);
    assert.equal(ca['http.response.status_code'], 200);
    assert.equal(ca['server.address'], '127.0.0.1');
    assert.ok(BigInt(client.startTimeUnixNano) >= BigInt(server.startTimeUnixNano));
    assert.ok(BigInt(client.endTimeUnixNano) <= BigInt(server.endTimeUnixNano));
    // Unix nanoseconds of now (not a monotonic clock's), and the event inside its span.
    assert.ok(Math.abs(Number(BigInt(server.startTimeUnixNano) / 1_000_000n) - Date.now()) < 60_000, server.startTimeUnixNano);
    assert.ok(BigInt(server.events[0].timeUnixNano) >= BigInt(server.startTimeUnixNano));
    assert.ok(BigInt(server.events[0].timeUnixNano) <= BigInt(server.endTimeUnixNano));
    assert.equal(client.name, `chat ${MODEL}`);
    assert.equal(server.name, 'POST /v1/chat/completions');
    assert.deepEqual(client.events.map((e) => e.name), ['tahua.response_headers']);
    assert.equal(client.status.code, 0);
    assert.equal(ca['server.port'], Number(new URL(upstream.baseUrl()).port));
    assert.equal(ca['gen_ai.usage.output_tokens'], DEFAULT_PIECES.length, 'the answering attempt carries the tokens');
    assert.equal(attributes({ attributes: spans[0].resource.attributes })['service.name'], 'tahua');
    assert.equal(collector.bodies[0].json.resourceSpans[0].scopeSpans[0].scope.name, 'tahua');
    // No prompt or completion text unless asked for.
    assert.ok(!JSON.stringify(collector.bodies).includes(MARKER));
    assert.ok(!JSON.stringify(collector.bodies).includes(DEFAULT_PIECES[1]));
    // The access log line carries the same ids.
    const [line] = await gw.waitForAccessLog((l) => l.path === '/v1/chat/completions');
    assert.equal(line.trace_id, PARENT_TRACE);
    assert.equal(line.span_id, server.spanId);
  });

  it('starts a trace when none came, and a retried attempt is a span of its own', async (t) => {
    const { upstream, collector, gw } = await setup(t, { provider: { retry: { attempts: 2, backoff: '5ms', on_status: [503] } } });
    upstream.next({ mode: 'error', status: 503 });
    const res = await post(gw.url, '/v1/chat/completions', chatBody(MODEL, { stream: true }));
    assert.equal(res.status, 200);
    const spans = await collector.waitFor((c) => c.spans().length >= 3 && c.spans(), 'three spans');
    const [server] = byKind(spans, 2);
    const attempts = byKind(spans, 3).sort((x, y) => (BigInt(x.startTimeUnixNano) < BigInt(y.startTimeUnixNano) ? -1 : 1));
    assert.equal(attempts.length, 2);
    assert.match(server.traceId, /^[0-9a-f]{32}$/);
    assert.equal(server.parentSpanId, undefined, 'a root span');
    assert.deepEqual(attempts.map((s) => attributes(s)['http.response.status_code']), [503, 200]);
    assert.equal(attempts[0].status.code, 2, 'the failed attempt is an error span');
    assert.equal(attributes(server)['tahua.attempts'], 2);
    assert.equal(attributes(server)['tahua.stream'], true);
    assert.deepEqual(attributes(server)['gen_ai.response.finish_reasons'], ['stop'], 'from the stream');
    for (const [i, s] of attempts.entries()) {
      assert.equal(s.parentSpanId, server.spanId);
      assert.equal(upstream.requests[i].headers.traceparent, `00-${server.traceId}-${s.spanId}-01`);
    }
  });

  it('sample_ratio 0: nothing exported for a success, an error still is; the upstream is told not sampled', async (t) => {
    const { upstream, collector, gw } = await setup(t, { tracing: { sample_ratio: 0 } });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
    upstream.next({ mode: 'garbage' });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 502);
    const spans = await collector.waitFor((c) => c.spans().length >= 2 && c.spans(), 'the failed request\'s spans');
    const [server] = byKind(spans, 2);
    assert.equal(attributes(server)['http.response.status_code'], 502);
    assert.equal(server.status.code, 2);
    assert.equal(byKind(spans, 2).length, 1, 'only the failed request');
    assert.match(server.status.message, /^upstream_/);
    assert.equal(server.status.message, attributes(server)['error.type']);
    // One worker: the unsampled success was handed over before the failure, so had it
    // been exported it would be counted with the failure's two. The counter moves when
    // the collector's answer reaches the exporter, after the collector saw the spans.
    const exported = await eventually(async () => {
      const n = sum(await scrape(gw.url), 'tahua_trace_spans_exported_total');
      return n >= 2 && n;
    }, { what: 'the failed request\'s spans counted as exported' });
    assert.equal(exported, 2);
    assert.match(upstream.requests[0].headers.traceparent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
    // An unsampled caller's decision stands too.
    await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: { traceparent: `00-${PARENT_TRACE}-${PARENT_SPAN}-00` } });
    assert.equal(upstream.requests.at(-1).headers.traceparent.slice(0, 36), `00-${PARENT_TRACE}-`);
  });

  it('gen_ai.response.model is the model the answer names, on the server span and the answering attempt', async (t) => {
    // The configured upstream name is what was asked for; a provider's alias answers with
    // its dated model, and that is what the client received.
    const upstream = await startMockUpstream({ t });
    const c = await startCollector({ t });
    const config = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up', upstream_model: 'up-chat' }] });
    config.tracing = { endpoint: `${c.url}/v1/traces`, flush_interval: '50ms' };
    const gw = await startTahua({ config, t });
    for (const stream of [false, true]) {
      upstream.next({ answerModel: 'up-chat-2024-08-06' });
      const r = await post(gw.url, '/v1/chat/completions', chatBody(MODEL, { stream }));
      assert.equal(r.status, 200);
      const spans = await c.waitFor((col) => byKind(col.spans(), 2).some((s) => attributes(s)['tahua.stream'] === stream) && col.spans(), 'the spans');
      const server = byKind(spans, 2).find((s) => attributes(s)['tahua.stream'] === stream);
      const client = byKind(spans, 3).find((s) => s.parentSpanId === server.spanId);
      assert.equal(attributes(server)['gen_ai.request.model'], MODEL);
      assert.equal(attributes(server)['gen_ai.response.model'], 'up-chat-2024-08-06', `stream: ${stream}`);
      assert.equal(attributes(client)['gen_ai.request.model'], 'up-chat');
      assert.equal(attributes(client)['gen_ai.response.model'], 'up-chat-2024-08-06');
      assert.equal(attributes(client)['gen_ai.usage.output_tokens'], DEFAULT_PIECES.length);
    }
  });

  it('with tracing off, the caller\'s traceparent and tracestate reach the upstream unchanged', async (t) => {
    // A gateway that does not trace must not break the caller's trace (W3C Trace Context):
    // an application that traces, behind tahua, in front of a server that traces.
    const upstream = await startMockUpstream({ t });
    const gw = await startTahua({ t, config: gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up' }] }) });
    const parent = `00-${PARENT_TRACE}-${PARENT_SPAN}-01`;
    for (const stream of [false, true]) {
      const r = await post(gw.url, '/v1/chat/completions', chatBody(MODEL, { stream }), { headers: { traceparent: parent, tracestate: 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE' } });
      assert.equal(r.status, 200);
      assert.equal(upstream.requests.at(-1).headers.traceparent, parent);
      assert.equal(upstream.requests.at(-1).headers.tracestate, 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE');
    }
    // Nothing made up when the caller sent none, and nothing passed that does not parse.
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
    assert.equal(upstream.requests.at(-1).headers.traceparent, undefined);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: { traceparent: 'garbage', tracestate: 'a=b' } })).status, 200);
    assert.equal(upstream.requests.at(-1).headers.traceparent, undefined);
    assert.equal(upstream.requests.at(-1).headers.tracestate, undefined);
  });

  it('an invalid traceparent starts a new trace', async (t) => {
    const { upstream, gw } = await setup(t);
    for (const bad of ['00-00000000000000000000000000000000-00f067aa0ba902b7-01', 'ff-' + PARENT_TRACE + '-' + PARENT_SPAN + '-01',
      '00-' + PARENT_TRACE.toUpperCase() + '-' + PARENT_SPAN + '-01', 'garbage']) {
      assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: { traceparent: bad } })).status, 200);
      const sent = upstream.requests.at(-1).headers.traceparent;
      assert.match(sent, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
      assert.notEqual(sent.slice(3, 35), PARENT_TRACE);
    }
  });

  it('capture_content puts the prompt and the completion on the server span', async (t) => {
    const { collector, gw } = await setup(t, { tracing: { capture_content: true } });
    await post(gw.url, '/v1/chat/completions', chatBody(MODEL, { content: MARKER, stream: true }));
    const [server] = await collector.waitFor((c) => byKind(c.spans(), 2).length >= 1 && byKind(c.spans(), 2), 'the server span');
    const a = attributes(server);
    assert.ok(a['gen_ai.input.messages'].includes(MARKER));
    assert.ok(a['gen_ai.output.messages'].includes(DEFAULT_PIECES[1]));
  });

  it('a collector that is down fails no request; its spans are counted as dropped', async (t) => {
    const collector = await startCollector({ t });
    collector.failWith(503);
    const { gw } = await setup(t, { collector });
    for (let i = 0; i < 5; i++) assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
    const m = await eventually(async () => {
      const s = await scrape(gw.url);
      return sum(s, 'tahua_trace_spans_dropped_total') >= 10 && s;
    }, { what: 'ten spans dropped', timeout: 5000 });
    assert.equal(sum(m, 'tahua_trace_spans_dropped_total'), 10);
    assert.ok(sum(m, 'tahua_trace_export_failures_total') >= 1);
    assert.equal(sum(m, 'tahua_trace_spans_exported_total'), 0);
    collector.recover();
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
    await collector.waitFor((c) => c.spans().length === 2, 'spans once the collector is back');
  });

  it('an https collector is checked against the trusted CAs; batches go over one kept-alive connection', async (t) => {
    const ca = makeCa();
    const collector = await startCollector({ t, tls: issueCert(ca, ['DNS:localhost']) });
    // OpenSSL's default verify paths honour SSL_CERT_FILE: here, the test CA.
    const { gw } = await setup(t, { collector, env: { SSL_CERT_FILE: ca.caFile } });
    for (let i = 1; i <= 3; i++) {
      assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
      await collector.waitFor((c) => c.spans().length === 2 * i, `the spans of request ${i}`);
    }
    assert.ok(collector.requests.length >= 3, `${collector.requests.length} export requests`);
    assert.equal(collector.connections, 1, 'one connection for every batch');
    // Not trusted without the CA: the spans are dropped, no request fails.
    const untrusting = await setup(t, { collector });
    assert.equal((await post(untrusting.gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
    await eventually(async () => sum(await scrape(untrusting.gw.url), 'tahua_trace_spans_dropped_total') === 2,
      { what: 'spans dropped by an exporter that does not trust the collector', timeout: 5000 });
    assert.equal(collector.spans().length, 6);
  });
});
