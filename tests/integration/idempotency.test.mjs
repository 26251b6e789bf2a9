// Idempotency-Key (docs/tenants-and-limits.md "Idempotency"): a retry gets the stored answer and the
// upstream sees one call; completed streams are replayed; a key reused for another
// request is refused; a retry while the first is still answering is told to wait; a
// failed first attempt frees the key; with Redis, a retry through another replica gets
// the same answer.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { gatewayWithUpstream, MODEL } from './lib/fixtures.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { chatBody, collectData, openStream, post } from './lib/http.mjs';
import { startRedis } from './lib/redis.mjs';
import { withTimeout } from './lib/util.mjs';

const key = (k) => ({ 'idempotency-key': k });

describe('idempotency', () => {
  it('a retry with the same key gets the same answer, and the upstream saw one call', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t });
    const first = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: key('k-1') });
    const again = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: key('k-1') });
    assert.equal(first.status, 200);
    assert.equal(again.status, 200);
    assert.equal(again.text, first.text);
    assert.equal(again.headers['x-idempotent-replayed'], 'true');
    assert.equal(first.headers['x-idempotent-replayed'], undefined);
    assert.equal(upstream.requests.length, 1);
    // Through the SDK, with the header as a request option.
    const sdk = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'sk-x', maxRetries: 0 });
    const a = await sdk.chat.completions.create(chatBody(MODEL), { headers: key('sdk-1') });
    const b = await sdk.chat.completions.create(chatBody(MODEL), { headers: key('sdk-1') });
    assert.deepEqual(b, a);
    assert.equal(upstream.requests.length, 2);
  });

  it('replays a completed stream, event for event, without a second upstream call', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t });
    const body = chatBody(MODEL, { stream: true });
    const { events, first } = await openStream(gw.url, body, { headers: key('s-1') });
    const original = [first.data, ...(await collectData(events))];
    assert.equal(original.at(-1), '[DONE]');
    const replay = await openStream(gw.url, body, { headers: key('s-1') });
    assert.equal(replay.res.headers.get('x-idempotent-replayed'), 'true');
    const replayed = [replay.first.data, ...(await collectData(replay.events))];
    assert.deepEqual(replayed, original);
    assert.equal(upstream.requests.length, 1);
  });

  it('refuses the key for a different request (422) and a retry while the first runs (409)', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t });
    const held = upstream.next({ mode: 'hold' });
    const body = chatBody(MODEL, { stream: true });
    const { events } = await openStream(gw.url, body, { headers: key('k-2') });
    const during = await post(gw.url, '/v1/chat/completions', body, { headers: key('k-2') });
    assert.equal(during.status, 409);
    assert.equal(during.json.error.code, 'idempotency_in_progress');
    assert.equal(during.headers['retry-after'], '1');
    held.release();
    await withTimeout(collectData(events), 5000, 'the first stream');
    const other = await post(gw.url, '/v1/chat/completions', chatBody(MODEL, { content: 'something else' }), { headers: key('k-2') });
    assert.equal(other.status, 422);
    assert.equal(other.json.error.code, 'idempotency_key_reused');
    assert.equal(upstream.requests.length, 1);
    const bad = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: key('has space') });
    assert.equal(bad.status, 400);
  });

  it('a failed first attempt frees the key: the retry runs', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t });
    upstream.next({ mode: 'error', status: 500 });
    const failed = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: key('k-3') });
    assert.equal(failed.status, 500);
    const retry = await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: key('k-3') });
    assert.equal(retry.status, 200);
    assert.equal(retry.headers['x-idempotent-replayed'], undefined);
    assert.equal(upstream.requests.length, 2);
  });

  it('with Redis, a retry through another replica gets the stored answer', async (t) => {
    const upstream = await startMockUpstream({ t });
    const redis = await startRedis({ t });
    const config = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: MODEL, provider: 'up' }] });
    config.store = { type: 'redis', redis: { url: redis.url } };
    const one = await startTahua({ t, config });
    const two = await startTahua({ t, config });
    const first = await post(one.url, '/v1/chat/completions', chatBody(MODEL), { headers: key('r-1') });
    const again = await post(two.url, '/v1/chat/completions', chatBody(MODEL), { headers: key('r-1') });
    assert.equal(again.text, first.text);
    assert.equal(again.headers['x-idempotent-replayed'], 'true');
    assert.equal(upstream.requests.length, 1);
  });
});
