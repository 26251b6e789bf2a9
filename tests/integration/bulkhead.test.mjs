// limits.max_concurrent_* and routes[].limits: requests over a cap get 429 at once (or
// wait in line with limits.queue_timeout), others go on; caps hold across workers.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gatewayWithUpstream, MODEL, PROVIDER } from './lib/fixtures.mjs';
import { chatBody, collectData, openStream, post } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { eventually, withTimeout } from './lib/util.mjs';
import { RawClient, rawRequest } from './lib/raw.mjs';

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

  it('a cap holds across workers: one stream in flight means one, whichever worker takes the next connection', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t, server: { workers: 2 }, limits: { max_concurrent_streams: 1 } });
    const ex = upstream.next({ mode: 'hold' });
    const { events } = await openStream(gw.url, STREAM);
    // Eight new connections: SO_REUSEPORT spreads them over both workers (a per-worker
    // share would let the other worker's first one through).
    for (let i = 0; i < 8; i += 1) {
      const client = await RawClient.connect(gw.port);
      await client.write(rawRequest('POST', '/v1/chat/completions', { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(STREAM) }));
      const over = await client.readResponse();
      client.destroy();
      assert.equal(over.status, 429, `stream attempt ${i} while one is in flight`);
    }
    assert.equal(upstream.requests.length, 1);
    assert.equal(sum(await scrape(gw.url), 'tahua_bulkhead_in_use', { kind: 'streams' }), 1);
    ex.release();
    await withTimeout(collectData(events), 5000, 'the held stream');
    // The client has the stream's last bytes a moment before the worker that wrote them
    // ends the request and frees its slot (the next request may reach the other worker
    // first): the slot's release is awaited, as the gauge shows it.
    await eventually(async () => sum(await scrape(gw.url), 'tahua_bulkhead_in_use', { kind: 'streams' }) === 0, { what: 'the stream\'s slot freed' });
    assert.equal((await post(gw.url, '/v1/chat/completions', STREAM)).status, 200);
  });

  it('a route has its own cap; requests outside the route are not counted against it', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({
      t,
      routes: [{ name: 'batch', match: { model: 'batch' }, target: MODEL, limits: { max_concurrent_requests: 1 } }],
    });
    const ex = upstream.next({ mode: 'hold' });
    const { events } = await openStream(gw.url, chatBody('batch', { stream: true }));
    const over = await post(gw.url, '/v1/chat/completions', chatBody('batch'));
    assert.equal(over.status, 429);
    assert.equal(over.json.error.code, 'concurrency_limit_exceeded');
    assert.match(over.json.error.message, /route 'batch'/);
    // The same model asked for directly does not go through the route.
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
    const metrics = await scrape(gw.url);
    assert.equal(sum(metrics, 'tahua_bulkhead_rejections_total', { scope: 'route:batch' }), 1);
    assert.equal(sum(metrics, 'tahua_bulkhead_in_use', { scope: 'route:batch', kind: 'requests' }), 1);
    ex.release();
    await withTimeout(collectData(events), 5000, 'the held stream');
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('batch'))).status, 200);
  });

  it('with queue_timeout a request over the cap waits for a slot instead of failing', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({
      t,
      limits: { max_concurrent_streams: 1, queue_timeout: '10s', max_queue: 1 },
    });
    const first = upstream.next({ mode: 'hold' });
    const { events } = await openStream(gw.url, STREAM);
    const second = upstream.next();
    const queued = post(gw.url, '/v1/chat/completions', STREAM);
    await eventually(async () => sum(await scrape(gw.url), 'tahua_bulkhead_waiting', { scope: 'global', kind: 'streams' }) === 1, {
      what: 'the second stream waiting in line',
    });
    assert.equal(upstream.requests.length, 1, 'the waiting stream has not reached the upstream');
    // The line holds one: a third is refused at once.
    const third = await post(gw.url, '/v1/chat/completions', STREAM);
    assert.equal(third.status, 429);
    first.release();
    await withTimeout(collectData(events), 5000, 'the first stream');
    const res = await withTimeout(queued, 5000, 'the queued stream');
    assert.equal(res.status, 200);
    assert.match(res.text, /data: \[DONE\]\n\n$/);
    await withTimeout(second.finished, 5000, 'the queued stream upstream');
  });

  it('a request that waited queue_timeout without a slot gets 429', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t, limits: { max_concurrent_requests: 1, queue_timeout: '200ms' } });
    const ex = upstream.next({ mode: 'hold' });
    const { events } = await openStream(gw.url, STREAM);
    const over = await post(gw.url, '/v1/chat/completions', chatBody(MODEL));
    assert.equal(over.status, 429);
    assert.equal(over.json.error.code, 'concurrency_limit_exceeded');
    assert.equal(upstream.requests.length, 1);
    assert.equal(sum(await scrape(gw.url), 'tahua_bulkhead_waiting', { scope: 'global', kind: 'requests' }), 0);
    ex.release();
    await withTimeout(collectData(events), 5000, 'the held stream');
  });
});
