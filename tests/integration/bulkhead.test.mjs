// limits.max_concurrent_*: requests over a cap get 429 at once, others go on.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gatewayWithUpstream, MODEL } from './lib/fixtures.mjs';
import { chatBody, collectData, openStream, post } from './lib/http.mjs';
import { withTimeout } from './lib/util.mjs';

const STREAM = chatBody(MODEL, { stream: true });

describe('bulkhead', () => {
  it('caps concurrent streams with a 429 and Retry-After while other requests continue', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t, limits: { max_concurrent_streams: 1 } });
    const ex = upstream.next({ mode: 'hold' });
    const { events } = await openStream(gw.url, STREAM);

    const over = await post(gw.url, '/v1/chat/completions', STREAM);
    assert.equal(over.status, 429);
    assert.equal(over.headers['retry-after'], '1');
    assert.equal(over.json.error.code, 'concurrency_limit_exceeded');
    assert.equal(over.json.error.type, 'rate_limit_error');
    assert.equal(upstream.requests.length, 1, 'the refused stream never reached the upstream');

    // A non-streaming request is not a stream: it goes through.
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);

    ex.release();
    assert.equal((await withTimeout(collectData(events), 5000, 'the held stream')).at(-1), '[DONE]');
    // The slot is free again once the stream has completed.
    const again = await openStream(gw.url, STREAM);
    assert.equal((await withTimeout(collectData(again.events), 5000, 'the next stream')).at(-1), '[DONE]');
  });

  it('caps concurrent requests of any kind', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t, limits: { max_concurrent_requests: 1 } });
    const ex = upstream.next({ mode: 'hold' });
    const { events } = await openStream(gw.url, STREAM);
    const over = await post(gw.url, '/v1/chat/completions', chatBody(MODEL));
    assert.equal(over.status, 429);
    // Requests the gateway answers itself are not counted.
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('no-such-model'))).status, 404);
    ex.release();
    await withTimeout(collectData(events), 5000, 'the held stream');
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
  });
});
