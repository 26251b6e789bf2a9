// Provider retries: only before anything reached the client, on a connection that never
// carried the request or on a retryable status, with backoff and Retry-After.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gatewayWithUpstream, MODEL } from './lib/fixtures.mjs';
import { chatBody, collectData, openStream, post, request } from './lib/http.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { closedPort, withTimeout } from './lib/util.mjs';

const retries = async (gw) =>
  Number(/^tahua_upstream_retries_total\{provider="[^"]+"\} (\d+)$/m.exec((await request(gw.url, '/metrics')).text)?.[1] ?? 0);

describe('retries', () => {
  it('a 503 is retried and the client sees one success; the upstream saw two tries', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t, provider: { retry: { attempts: 3, backoff: '10ms' } } });
    upstream.next({ mode: 'error', status: 503 });
    const res = await post(gw.url, '/v1/chat/completions', chatBody(MODEL));
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.object, 'chat.completion');
    assert.equal(upstream.requests.length, 2);
    assert.equal(await retries(gw), 1);
    const [line] = await gw.waitForAccessLog((l) => l.path === '/v1/chat/completions');
    assert.equal(line.attempts, 2);
    assert.equal(line.status, 200);
  });

  it('a stream is retried only before its first byte', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t, provider: { retry: { attempts: 2, backoff: '10ms' } } });
    upstream.next({ mode: 'error', status: 502 });
    const { events } = await openStream(gw.url, chatBody(MODEL, { stream: true }));
    assert.equal((await withTimeout(collectData(events), 5000, 'the retried stream')).at(-1), '[DONE]');
    assert.equal(upstream.requests.length, 2);
  });

  it('without a retry policy the upstream status is passed through', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t });
    upstream.next({ mode: 'error', status: 503 });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 503);
    assert.equal(upstream.requests.length, 1);
  });

  it('a Retry-After longer than max_backoff is not waited for: the 429 goes to the client', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({
      t,
      provider: { retry: { attempts: 3, backoff: '10ms', max_backoff: '500ms' } },
    });
    upstream.next({ mode: 'error', status: 429, headers: { 'retry-after': '30' } });
    const res = await post(gw.url, '/v1/chat/completions', chatBody(MODEL));
    assert.equal(res.status, 429);
    assert.equal(res.headers['retry-after'], '30', "the upstream's own answer, headers included");
    assert.equal(upstream.requests.length, 1);
  });

  it('statuses outside on_status are not retried', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t, provider: { retry: { attempts: 3, on_status: [503] } } });
    upstream.next({ mode: 'error', status: 500 });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 500);
    assert.equal(upstream.requests.length, 1);
  });

  it('refused connections are retried, then 502 upstream_unreachable', async (t) => {
    const port = await closedPort();
    const gw = await startTahua({
      t,
      config: gatewayConfig({
        providers: [openaiProvider('down', `http://127.0.0.1:${port}/v1`, { retry: { attempts: 3, backoff: '5ms' } })],
        models: [{ name: 'down', provider: 'down' }],
      }),
    });
    const res = await post(gw.url, '/v1/chat/completions', chatBody('down'));
    assert.equal(res.status, 502);
    assert.equal(res.json.error.code, 'upstream_unreachable');
    assert.equal(await retries(gw), 2);
  });
});
