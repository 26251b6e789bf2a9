// Failover: a retry goes to another deployment of the model, then the model's fallback
// models are tried in order, and when everything failed the model's configured fallback
// answer is sent (marked). Statuses outside fallback_on and anything after the first
// streamed byte are never failed over.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { openaiClient, sharedFixture } from './lib/fixtures.mjs';
import { chatBody, chatText, collectData, expectFinalErrorEvent, openStream, post, send, sseEvents } from './lib/http.mjs';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { closedPort, withTimeout } from './lib/util.mjs';
import { readSse, replyText, startAnthropicMock } from './lib/vendor_mocks.mjs';

const RETRY = { attempts: 2, on_status: [429, 502, 503, 504], backoff: '10ms', max_backoff: '1s' };
const UNSET_KEY_VAR = 'TAHUA_IT_FAILOVER_KEY_NOT_SET';
const BUSY = 'Service busy, try later';
const LOCAL = { name: 'local', type: 'mock', mock: { completion_tokens: 3, chunk_delay: '0ms' } };

const chat = (gw, model, extra) => post(gw.url, '/v1/chat/completions', chatBody(model, extra));
/** The first access log line of a request for `requestedModel` on `path`. */
const lineFor = async (gw, requestedModel, path = '/v1/chat/completions') =>
  (await gw.waitForAccessLog((l) => l.path === path && (l.requested_model ?? l.model) === requestedModel))[0];

function start(t, { providers, models, server = {} }) {
  return startTahua({ t, env: { [UNSET_KEY_VAR]: undefined }, config: gatewayConfig({ providers, models, server }) });
}

describe('failover across deployments', () => {
  it('a 503 from one deployment is retried on the other; the client sees one 200', async (t) => {
    const upA = await startMockUpstream({ t });
    const upB = await startMockUpstream({ t });
    const gw = await start(t, {
      server: { deployment_header: true },
      providers: [openaiProvider('pa', upA.baseUrl(), { retry: RETRY }), openaiProvider('pb', upB.baseUrl(), { retry: RETRY })],
      models: [
        {
          name: 'm',
          balancing: 'round_robin',
          // a is heavier, so smooth round robin picks it first.
          deployments: [
            { id: 'a', provider: 'pa', upstream_model: 'x', weight: 3 },
            { id: 'b', provider: 'pb', upstream_model: 'x', weight: 1 },
          ],
        },
      ],
    });
    upA.next({ mode: 'error', status: 503 });
    upA.next({ mode: 'error', status: 503 }); // a second try on A would fail too

    const { data, response } = await openaiClient(gw).chat.completions.create(chatBody('m')).withResponse();
    assert.equal(response.status, 200);
    assert.equal(data.object, 'chat.completion');
    assert.equal(data.choices[0].message.content, 'Hello from the mock upstream.');
    assert.equal(upA.requests.length, 1, 'A tried once');
    assert.equal(upB.requests.length, 1, 'the retry went to B');
    assert.equal(upB.requests[0].json.model, 'x');
    assert.equal(response.headers.get('x-tahua-deployment'), 'b');
    assert.equal(response.headers.get('x-tahua-model'), null, 'no fallbacks configured: no X-Tahua-Model');

    const line = await lineFor(gw, 'm');
    assert.equal(line.attempts, 2);
    assert.equal(line.deployment, 'b');
    assert.equal(line.status, 200);
    assert.equal(line.fallback, undefined, 'a retry is not a fallback');
  });
});

describe('fallback models', () => {
  it('refused connections, 502s and a keyless provider fail over along the chain', async (t) => {
    const port = await closedPort();
    const up = await startMockUpstream({ t });
    const gw = await start(t, {
      providers: [
        openaiProvider('down', `http://127.0.0.1:${port}/v1`, { retry: RETRY }),
        openaiProvider('sick', up.baseUrl(), { retry: RETRY }),
        openaiProvider('keyless', up.baseUrl(), { api_key: undefined, api_key_env: UNSET_KEY_VAR }),
        LOCAL,
      ],
      models: [
        { name: 'refused', provider: 'down', fallbacks: ['good'] },
        { name: 'flaky', provider: 'sick', upstream_model: 'flaky-x', fallbacks: ['flaky2', 'good'] },
        { name: 'flaky2', provider: 'sick', upstream_model: 'flaky2-x' },
        { name: 'nokey', provider: 'keyless', fallbacks: ['good'] },
        { name: 'limited', provider: 'sick', fallbacks: ['good'] },
        { name: 'good', provider: 'local' },
      ],
    });

    // 1. The only upstream refuses connections: the fallback model answers.
    const refused = await chat(gw, 'refused');
    assert.equal(refused.status, 200, refused.text);
    assert.equal(refused.json.object, 'chat.completion');
    assert.equal(refused.headers['x-tahua-model'], 'good');
    assert.equal(refused.json.is_fallback, undefined, 'a real answer is not marked');
    const l1 = await lineFor(gw, 'refused');
    assert.equal(l1.fallback, 'model');
    assert.equal(l1.model, 'good');
    assert.equal(l1.provider, 'local');
    assert.equal(l1.requested_model, 'refused');
    assert.equal(l1.status, 200);

    // The same for a stream request: it fails over before its first byte.
    const { res, events, first } = await openStream(gw.url, chatBody('refused', { stream: true }));
    assert.equal(res.headers.get('x-tahua-model'), 'good');
    const data = [first.data, ...(await withTimeout(collectData(events), 5000, 'the fallback stream'))];
    assert.equal(data.at(-1), '[DONE]');
    assert.ok(data.slice(0, -1).every((d) => !JSON.parse(d).error), data.join('\n'));
    assert.ok(chatText(data).length > 0, 'content from the fallback model');
    const ls = (await gw.waitForAccessLog((l) => l.requested_model === 'refused' && l.stream === true))[0];
    assert.equal(ls.fallback, 'model');
    assert.equal(ls.model, 'good');

    // 2. Two fallbacks: the primary and the first fallback answer 502 (each with its own
    // retry), the second fallback answers.
    for (let i = 0; i < 4; i++) up.next({ mode: 'error', status: 502 });
    const flaky = await chat(gw, 'flaky');
    assert.equal(flaky.status, 200, flaky.text);
    assert.equal(flaky.headers['x-tahua-model'], 'good');
    assert.deepEqual(
      up.requests.map((r) => r.json.model),
      ['flaky-x', 'flaky-x', 'flaky2-x', 'flaky2-x'],
      'the primary then the first fallback, each with its own two attempts',
    );
    const l2 = await lineFor(gw, 'flaky');
    assert.equal(l2.fallback, 'model');
    assert.equal(l2.model, 'good');
    assert.equal(l2.requested_model, 'flaky');

    // 3. A provider without key is refused before any call: the fallback answers.
    const nokey = await chat(gw, 'nokey');
    assert.equal(nokey.status, 200, nokey.text);
    assert.equal(nokey.headers['x-tahua-model'], 'good');
    assert.equal(up.requests.length, 4, 'nothing sent for the keyless provider');
    assert.equal((await lineFor(gw, 'nokey')).fallback, 'model');

    // 4. A 429 whose Retry-After exceeds max_backoff is not retried but failed over.
    up.next({ mode: 'error', status: 429, headers: { 'retry-after': '30' } });
    const limited = await chat(gw, 'limited');
    assert.equal(limited.status, 200, limited.text);
    assert.equal(limited.headers['x-tahua-model'], 'good');
    assert.equal(limited.headers['retry-after'], undefined, "the 429's Retry-After does not leak into the answer");
    assert.equal(up.requests.length, 5);
  });

  it('statuses outside fallback_on are passed through, not failed over', async (t) => {
    const up = await startMockUpstream({ t });
    const gw = await start(t, {
      providers: [openaiProvider('up', up.baseUrl(), { retry: RETRY }), LOCAL],
      models: [
        { name: 'strict', provider: 'up', fallbacks: ['good'], fallback_response: { message: BUSY } },
        { name: 'only503', provider: 'up', fallbacks: ['good'], fallback_on: [503] },
        { name: 'good', provider: 'local' },
      ],
    });
    up.next({ mode: 'error', status: 400, body: { error: { message: 'bad temperature', type: 'invalid_request_error', param: 'temperature', code: null } } });
    const bad = await chat(gw, 'strict');
    assert.equal(bad.status, 400, bad.text);
    assert.equal(bad.json.error.message, 'bad temperature', "the upstream's own body");
    assert.equal(bad.json.is_fallback, undefined);
    assert.equal(bad.headers['x-tahua-fallback'], undefined);
    assert.equal(bad.headers['x-tahua-model'], 'strict', 'answered by the requested model');
    assert.equal(up.requests.length, 1, 'a 400 is neither retried nor failed over');
    assert.equal((await lineFor(gw, 'strict')).fallback, undefined);

    // 500 is in the default fallback_on but not in this model's.
    up.next({ mode: 'error', status: 500 });
    const five = await chat(gw, 'only503');
    assert.equal(five.status, 500, five.text);
    assert.equal(five.json.error.code, 'mock_error');
    assert.equal(five.headers['x-tahua-model'], 'only503');
    assert.equal(up.requests.length, 2);
  });

  it('an open circuit breaker sends requests straight to the fallback model', async (t) => {
    const up = await startMockUpstream({ t });
    const gw = await start(t, {
      providers: [
        openaiProvider('cb', up.baseUrl(), {
          circuit_breaker: { window: 2, min_calls: 2, failure_rate: 100, open_for: '60s', half_open_probes: 1 },
        }),
        LOCAL,
      ],
      models: [
        { name: 'primary', provider: 'cb', fallbacks: ['good'] },
        { name: 'good', provider: 'local' },
      ],
    });
    // Trip the breaker: two 500s, each failed over to the fallback model.
    for (let i = 0; i < 2; i++) up.next({ mode: 'error', status: 500 });
    for (let i = 0; i < 2; i++) {
      const r = await chat(gw, 'primary');
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers['x-tahua-model'], 'good');
    }
    assert.equal(up.requests.length, 2);
    await gw.stderr.waitUntil(
      () => gw.stderr.json().some((l) => l.msg === 'circuit breaker' && l.to === 'open'),
      3000,
      'the breaker of "cb" to open',
    );

    const before = up.requests.length;
    for (let i = 0; i < 3; i++) {
      const r = await chat(gw, 'primary');
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers['x-tahua-model'], 'good');
      assert.equal(r.json.object, 'chat.completion');
    }
    assert.equal(up.requests.length, before, 'the primary upstream is not touched while its breaker is open');
    const lines = await gw.waitForAccessLog((l) => l.requested_model === 'primary', { count: 5 });
    assert.ok(lines.every((l) => l.fallback === 'model' && l.model === 'good' && l.status === 200));
  });
});

describe('fallback models across APIs and failure kinds', () => {
  it('a first-byte timeout fails over; the stalled upstream connection is closed', async (t) => {
    const up = await startMockUpstream({ t });
    const gw = await start(t, {
      providers: [
        openaiProvider('slow', up.baseUrl(), { timeouts: { connect: '2s', first_byte: '200ms', idle: '5s', total: '30s' } }),
        LOCAL,
      ],
      models: [
        { name: 'slow', provider: 'slow', fallbacks: ['good'] },
        { name: 'good', provider: 'local' },
      ],
    });
    const ex = up.next({ mode: 'stall-headers' });
    const r = await chat(gw, 'slow');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-tahua-model'], 'good');
    await withTimeout(ex.clientClosed, 2000, 'tahua to drop the stalled upstream exchange');
    assert.equal(up.requests.length, 1);
  });

  it('an Anthropic-type primary (529) falls back to an OpenAI-type model with a clean request', async (t) => {
    const anthropic = await startAnthropicMock({ t });
    const up = await startMockUpstream({ t });
    const gw = await start(t, {
      providers: [
        { name: 'anth', type: 'anthropic', base_url: anthropic.baseUrl(), api_key: 'sk-ant-k', timeouts: { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' } },
        openaiProvider('oai', up.baseUrl()),
      ],
      models: [
        { name: 'claude', provider: 'anth', upstream_model: 'claude-x', fallbacks: ['gpt'], fallback_on: [503, 529] },
        { name: 'gpt', provider: 'oai', upstream_model: 'gpt-x' },
      ],
    });
    anthropic.failNext({ status: 529 });
    const r = await chat(gw, 'claude', { content: 'Say hi' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-tahua-model'], 'gpt');
    assert.equal(r.json.choices[0].message.content, 'Hello from the mock upstream.');
    assert.equal(anthropic.requests.length, 1);
    assert.equal(anthropic.requests[0].path, '/v1/messages');
    assert.equal(up.requests.length, 1);
    const sent = up.requests[0];
    assert.equal(sent.path, '/v1/chat/completions');
    assert.equal(sent.json.model, 'gpt-x');
    assert.deepEqual(sent.json.messages, [{ role: 'user', content: 'Say hi' }], 'the client messages, untranslated');
    assert.equal(sent.json.max_tokens, undefined, 'nothing left over from the Anthropic encoding');
    assert.equal(sent.headers['x-api-key'], undefined, 'no Anthropic credentials leak to the fallback');
    assert.equal(sent.headers.authorization, 'Bearer sk-test-provider-key');
  });

  it('/v1/messages: an OpenAI-type primary (503) falls back to an Anthropic-type model, streamed', async (t) => {
    const anthropic = await startAnthropicMock({ t });
    const up = await startMockUpstream({ t });
    const gw = await start(t, {
      providers: [
        openaiProvider('oai', up.baseUrl()),
        { name: 'anth', type: 'anthropic', base_url: anthropic.baseUrl(), api_key: 'sk-ant-k', timeouts: { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' } },
      ],
      models: [
        { name: 'gpt', provider: 'oai', upstream_model: 'gpt-x', fallbacks: ['claude'] },
        { name: 'claude', provider: 'anth', upstream_model: 'claude-x' },
      ],
    });
    up.next({ mode: 'error', status: 503 });
    const res = await send(gw.url, '/v1/messages', {
      method: 'POST',
      headers: { 'anthropic-version': '2023-06-01' },
      json: { model: 'gpt', max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'Hi there' }] },
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-tahua-model'), 'claude');
    const events = await withTimeout(readSse(res), 5000, 'the Anthropic stream');
    assert.equal(events[0].event, 'message_start');
    assert.equal(events.at(-1).event, 'message_stop');
    const text = events
      .filter((e) => e.event === 'content_block_delta')
      .map((e) => e.json.delta.text ?? '')
      .join('');
    assert.equal(text, replyText('Anthropic', 'Hi there'));
    assert.ok(!events.some((e) => e.event === 'error'));
    assert.equal(up.requests.length, 1);
    assert.equal(anthropic.requests.length, 1);
    const sent = anthropic.requests[0].body;
    assert.equal(sent.model, 'claude-x');
    assert.equal(sent.stream, true);
    assert.equal(sent.max_tokens, 64);
  });
});

describe('fallback response', () => {
  // One gateway for the suite: every upstream is down, in different ways.
  const fx = sharedFixture(async () => {
    const port = await closedPort();
    const up = await startMockUpstream();
    const gw = await start(undefined, {
      providers: [
        openaiProvider('down', `http://127.0.0.1:${port}/v1`, { retry: RETRY }),
        openaiProvider('sick', up.baseUrl(), { retry: RETRY }),
        openaiProvider('keyless', up.baseUrl(), { api_key: undefined, api_key_env: UNSET_KEY_VAR }),
      ],
      models: [
        { name: 'dead', provider: 'down', fallback_response: { message: BUSY } },
        { name: 'sick', provider: 'sick', fallback_response: { message: BUSY, status: 503 } },
        { name: 'chain', provider: 'down', fallbacks: ['nokey'], fallback_response: { message: BUSY } },
        { name: 'nokey', provider: 'keyless' },
        { name: 'soft', provider: 'down', fallback_response: { message: BUSY, status: 200 } },
      ],
    });
    return { gw, up, close: async () => { await gw.kill(); await up.close(); } };
  });

  it('chat: a marked 503 answer in chat.completion shape', async () => {
    const { gw, up } = fx.current;
    const r = await chat(gw, 'dead');
    assert.equal(r.status, 503, r.text);
    assert.match(r.headers['content-type'] ?? '', /^application\/json/);
    assert.equal(r.headers['x-tahua-fallback'], 'upstream_unreachable');
    assert.equal(r.json.is_fallback, true);
    assert.equal(r.json.object, 'chat.completion');
    assert.equal(r.json.choices[0].message.role, 'assistant');
    assert.equal(r.json.choices[0].message.content, BUSY);
    const line = await lineFor(gw, 'dead');
    assert.equal(line.fallback, 'response');
    assert.equal(line.requested_model, 'dead');
    assert.equal(line.status, 503);

    // A stream request with a non-2xx fallback status gets the JSON answer (what SDKs read).
    const s = await chat(gw, 'dead', { stream: true });
    assert.equal(s.status, 503, s.text);
    assert.match(s.headers['content-type'] ?? '', /^application\/json/);
    assert.equal(s.json?.is_fallback, true);
    assert.equal(s.json.choices[0].message.content, BUSY);

    // An upstream status: the header names it.
    const before = up.requests.length;
    up.next({ mode: 'error', status: 503 });
    up.next({ mode: 'error', status: 503 });
    const sick = await chat(gw, 'sick');
    assert.equal(sick.status, 503, sick.text);
    assert.equal(sick.headers['x-tahua-fallback'], 'upstream_status_503');
    assert.equal(sick.json.is_fallback, true);
    assert.equal(sick.json.choices[0].message.content, BUSY);
    assert.equal(up.requests.length, before + 2, 'retried once before the fallback answer');

    // The chain's last failure (a provider without key) is the reason.
    const chain = await chat(gw, 'chain');
    assert.equal(chain.status, 503, chain.text);
    assert.equal(chain.headers['x-tahua-fallback'], 'provider_unavailable');
    assert.equal(chain.json.is_fallback, true);
    assert.equal(chain.json.choices[0].message.content, BUSY);
    assert.equal(up.requests.length, before + 2, 'nothing sent for the keyless provider');
    assert.equal((await lineFor(gw, 'chain')).fallback, 'response');
  });

  it('/v1/messages and /v1/responses get the answer in their own shape', async () => {
    const { gw } = fx.current;
    const m = await post(
      gw.url,
      '/v1/messages',
      { model: 'dead', max_tokens: 32, messages: [{ role: 'user', content: 'hi' }] },
      { headers: { 'anthropic-version': '2023-06-01' } },
    );
    assert.equal(m.status, 503, m.text);
    assert.equal(m.headers['x-tahua-fallback'], 'upstream_unreachable');
    assert.equal(m.json.is_fallback, true);
    assert.equal(m.json.type, 'message');
    assert.equal(m.json.role, 'assistant');
    assert.deepEqual(
      m.json.content.map((c) => [c.type, c.text]),
      [['text', BUSY]],
    );
    assert.equal((await lineFor(gw, 'dead', '/v1/messages')).fallback, 'response');

    const r = await post(gw.url, '/v1/responses', { model: 'dead', input: 'hi' });
    assert.equal(r.status, 503, r.text);
    assert.equal(r.headers['x-tahua-fallback'], 'upstream_unreachable');
    assert.equal(r.json.is_fallback, true);
    assert.equal(r.json.object, 'response');
    const texts = r.json.output.flatMap((o) => o.content ?? []).map((c) => c.text);
    assert.deepEqual(texts, [BUSY]);
  });

  it('status 200 with stream: well-formed OpenAI, Anthropic and Responses streams carrying the message', async () => {
    const { gw } = fx.current;
    const res = await send(gw.url, '/v1/chat/completions', { method: 'POST', json: chatBody('soft', { stream: true }) });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    assert.equal(res.headers.get('x-tahua-fallback'), 'upstream_unreachable');
    const data = await withTimeout(collectData(sseEvents(res)), 5000, 'the fallback stream');
    assert.equal(data.at(-1), '[DONE]');
    assert.equal(data.filter((d) => d === '[DONE]').length, 1);
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d));
    assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk' && !c.error), data.join('\n'));
    assert.equal(chatText(data), BUSY);
    assert.ok(chunks.some((c) => c.choices?.[0]?.finish_reason === 'stop'), 'a finish_reason');
    const line = await lineFor(gw, 'soft');
    assert.equal(line.fallback, 'response');
    assert.equal(line.status, 200);

    // The same on /v1/messages: a well-formed Anthropic event stream.
    const m = await send(gw.url, '/v1/messages', {
      method: 'POST',
      headers: { 'anthropic-version': '2023-06-01' },
      json: { model: 'soft', max_tokens: 32, stream: true, messages: [{ role: 'user', content: 'hi' }] },
    });
    assert.equal(m.status, 200);
    assert.match(m.headers.get('content-type') ?? '', /^text\/event-stream/);
    assert.equal(m.headers.get('x-tahua-fallback'), 'upstream_unreachable');
    const events = await withTimeout(readSse(m), 5000, 'the Anthropic fallback stream');
    assert.equal(events[0].event, 'message_start');
    assert.equal(events.at(-1).event, 'message_stop');
    const text = events
      .filter((e) => e.event === 'content_block_delta')
      .map((e) => e.json.delta.text ?? '')
      .join('');
    assert.equal(text, BUSY);

    // include_usage: the stream ends with a usage chunk.
    const u = await send(gw.url, '/v1/chat/completions', {
      method: 'POST',
      json: chatBody('soft', { stream: true, stream_options: { include_usage: true } }),
    });
    assert.equal(u.status, 200);
    const udata = await withTimeout(collectData(sseEvents(u)), 5000, 'the fallback stream with usage');
    assert.equal(udata.at(-1), '[DONE]');
    assert.equal(chatText(udata), BUSY);
    const usage = JSON.parse(udata.at(-2));
    assert.deepEqual(usage.choices, [], `a final usage chunk: ${udata.at(-2)}`);
    assert.equal(typeof usage.usage?.total_tokens, 'number');

    // /v1/responses: a Responses event stream.
    const r = await send(gw.url, '/v1/responses', { method: 'POST', json: { model: 'soft', input: 'hi', stream: true } });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('x-tahua-fallback'), 'upstream_unreachable');
    const revents = await withTimeout(readSse(r), 5000, 'the Responses fallback stream');
    assert.equal(revents[0].json?.type, 'response.created');
    assert.equal(revents.at(-1).json?.type, 'response.completed');
    const rtext = revents
      .filter((e) => e.json?.type === 'response.output_text.delta')
      .map((e) => e.json.delta)
      .join('');
    assert.equal(rtext, BUSY);
  });
});

describe('no failover after the first streamed byte', () => {
  it('a stream reset mid-way ends with an error event; nothing else is tried', async (t) => {
    const upA = await startMockUpstream({ t });
    const upB = await startMockUpstream({ t });
    const gw = await start(t, {
      providers: [
        openaiProvider('pa', upA.baseUrl(), { retry: RETRY }),
        openaiProvider('pb', upB.baseUrl(), { retry: RETRY }),
        openaiProvider('pfb', upB.baseUrl(), { retry: RETRY }),
      ],
      models: [
        {
          name: 'm',
          balancing: 'round_robin',
          deployments: [
            { id: 'a', provider: 'pa', upstream_model: 'x', weight: 3 },
            { id: 'b', provider: 'pb', upstream_model: 'x', weight: 1 },
          ],
          fallbacks: ['fb'],
          fallback_response: { message: BUSY, status: 200 },
        },
        { name: 'fb', provider: 'pfb' },
      ],
    });
    const ex = upA.next({ mode: 'hold' });
    const { res, events, first } = await openStream(gw.url, chatBody('m', { stream: true }));
    assert.equal(res.headers.get('x-tahua-model'), 'm');
    assert.equal(JSON.parse(first.data).object, 'chat.completion.chunk');
    await withTimeout(ex.firstEvent, 2000, 'the held first event');
    ex.reset();
    const rest = await withTimeout(collectData(events), 5000, 'the interrupted stream to end');
    const error = expectFinalErrorEvent(rest, ['upstream_stream_interrupted']);
    assert.equal(error.type, 'upstream_error');
    assert.ok(!rest.some((d) => d.includes(BUSY)), 'no fallback answer spliced into the stream');
    assert.equal(upA.requests.length, 1);
    assert.equal(upB.requests.length, 0, 'neither the other deployment nor the fallback model was tried');
    const line = await lineFor(gw, 'm');
    assert.equal(line.fallback, undefined);
    assert.equal(line.attempts, undefined, 'one attempt');
    assert.equal(line.deployment, 'a');
  });
});
