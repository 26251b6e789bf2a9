// What tahua sends upstream: credentials, extra headers, the body bytes, the model
// rewrite, connection reuse; and how upstream errors come back.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { gatewayWithUpstream, MODEL } from './lib/fixtures.mjs';
import { post, chatBody, send, collectData, sseEvents } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';

const ENV_KEY = 'sk-from-env-7f3a9c1e5b';
const LITERAL_KEY = 'sk-literal-d41d8cd98f';
const CLIENT_KEY = 'sk-client-secret-0000';

describe('request forwarding', () => {
  let upstream;
  let gw;
  before(async () => {
    upstream = await startMockUpstream();
    const base = upstream.baseUrl();
    gw = await startTahua({
      env: { TAHUA_IT_UPSTREAM_KEY: ENV_KEY },
      config: gatewayConfig({
        providers: [
          openaiProvider('envkey', base, {
            api_key: undefined,
            api_key_env: 'TAHUA_IT_UPSTREAM_KEY',
            headers: { 'OpenAI-Organization': 'org-tahua-test', 'X-Extra-Header': 'extra-value' },
          }),
          openaiProvider('literal', base, { api_key: LITERAL_KEY }),
        ],
        models: [
          { name: 'env-model', provider: 'envkey' },
          { name: 'lit-model', provider: 'literal', upstream_model: 'real-upstream-model' },
          { name: 'same-model', provider: 'literal' },
        ],
      }),
    });
  });
  after(async () => {
    await gw?.kill();
    await upstream?.close();
  });

  const lastForwarded = () => upstream.requests.at(-1);

  it('replaces the client Authorization with the api_key_env key', async () => {
    const res = await post(gw.url, '/v1/chat/completions', chatBody('env-model'), {
      headers: { authorization: `Bearer ${CLIENT_KEY}` },
    });
    assert.equal(res.status, 200, res.text);
    const fwd = lastForwarded();
    assert.equal(fwd.headers.authorization, `Bearer ${ENV_KEY}`);
    const authHeaders = fwd.rawHeaders.filter((_, i) => i % 2 === 0 && fwd.rawHeaders[i].toLowerCase() === 'authorization');
    assert.equal(authHeaders.length, 1, 'exactly one Authorization header upstream');
    assert.ok(!fwd.rawHeaders.join('\n').includes(CLIENT_KEY), 'client key not forwarded anywhere');
  });

  it('sends the provider headers', async () => {
    await post(gw.url, '/v1/chat/completions', chatBody('env-model'));
    const fwd = lastForwarded();
    assert.equal(fwd.headers['openai-organization'], 'org-tahua-test');
    assert.equal(fwd.headers['x-extra-header'], 'extra-value');
  });

  it('uses a literal api_key, and no provider headers of another provider', async () => {
    const res = await post(gw.url, '/v1/chat/completions', chatBody('same-model'), {
      headers: { authorization: `Bearer ${CLIENT_KEY}` },
    });
    assert.equal(res.status, 200, res.text);
    const fwd = lastForwarded();
    assert.equal(fwd.headers.authorization, `Bearer ${LITERAL_KEY}`);
    assert.equal(fwd.headers['openai-organization'], undefined);
  });

  it('sends the upstream Host and the base_url path', async () => {
    await post(gw.url, '/v1/embeddings', { model: 'same-model', input: 'x' });
    const fwd = lastForwarded();
    assert.equal(fwd.path, '/v1/embeddings');
    assert.equal(fwd.headers.host, `127.0.0.1:${upstream.port}`);
    assert.equal(fwd.method, 'POST');
  });

  it('rewrites only the top-level model value to upstream_model; other bytes unchanged', async () => {
    const original =
      '{"metadata":{"model":"lit-model"},"messages":[{"role":"user","content":"keep  \\u00e9 \\"model\\": bytes"}],\n' +
      '  "model" : "lit-model",\t"temperature":0.50,"extra":[1,2.0,3e2]}';
    const res = await post(gw.url, '/v1/chat/completions', original);
    assert.equal(res.status, 200, res.text);
    const expected = original.replace(/"model" : "lit-model"/, '"model" : "real-upstream-model"');
    assert.equal(lastForwarded().text, expected);
    assert.equal(lastForwarded().headers['content-length'], String(Buffer.byteLength(expected)));
  });

  it('forwards the body byte-for-byte when the upstream name is the public one', async () => {
    const original = '{ "model":"same-model" ,"messages":[{"role":"user","content":"\\ud83d\\ude00 h\u00e9"}], "n":1 }';
    const res = await post(gw.url, '/v1/chat/completions', original);
    assert.equal(res.status, 200, res.text);
    assert.ok(lastForwarded().body.equals(Buffer.from(original)), `forwarded ${lastForwarded().text}`);
  });

  it('passes an upstream error through with its status and body', async () => {
    const body = { error: { message: 'Rate limit reached for requests', type: 'requests', param: null, code: 'rate_limit_exceeded' } };
    upstream.next({ mode: 'error', status: 429, body });
    const res = await post(gw.url, '/v1/chat/completions', chatBody('same-model'));
    assert.equal(res.status, 429);
    assert.deepEqual(res.json, body);
  });

  it('passes an upstream error through for a streaming request too', async () => {
    const body = { error: { message: 'Incorrect API key provided', type: 'invalid_request_error', param: null, code: 'invalid_api_key' } };
    upstream.next({ mode: 'error', status: 401, body });
    const res = await post(gw.url, '/v1/chat/completions', chatBody('same-model', { stream: true }));
    assert.equal(res.status, 401);
    assert.deepEqual(res.json, body);
  });

  it('never prints provider keys in its logs', () => {
    const out = gw.output();
    assert.ok(!out.includes(ENV_KEY), 'env key not logged');
    assert.ok(!out.includes(LITERAL_KEY), 'literal key not logged');
    assert.ok(!out.includes(CLIENT_KEY), 'client key not logged');
  });
});

describe('upstream connection reuse', () => {
  let fx;
  before(async () => {
    fx = await gatewayWithUpstream();
  });
  after(() => fx?.close());

  it('sequential requests share one keep-alive upstream connection', async () => {
    for (let i = 0; i < 3; i += 1) {
      const res = await post(fx.gw.url, '/v1/chat/completions', chatBody(MODEL));
      assert.equal(res.status, 200, res.text);
    }
    for (let i = 0; i < 2; i += 1) {
      const res = await send(fx.gw.url, '/v1/chat/completions', { method: 'POST', json: chatBody(MODEL, { stream: true }) });
      const data = await collectData(sseEvents(res));
      assert.equal(data.at(-1), '[DONE]');
    }
    const emb = await post(fx.gw.url, '/v1/embeddings', { model: MODEL, input: 'x' });
    assert.equal(emb.status, 200);
    assert.equal(fx.upstream.requests.length, 6);
    assert.equal(fx.upstream.connections, 1, 'one TCP connection for all six requests');
    const m = await scrape(fx.gw.url);
    assert.equal(sum(m, 'tahua_upstream_connections_opened_total', { provider: 'up' }), 1);
  });
});

// What comes back from an upstream's head: its own headers, less the hop-by-hop ones
// (and those its Connection header names), what the gateway writes itself, and its
// cookies; its x-request-id under another name (the gateway's is the client's).
describe('the upstream answer\'s headers', () => {
  it('relays the upstream\'s own headers and none of its hop-by-hop ones', async (t) => {
    const http = await import('node:http');
    const upstream = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        const body = JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: 'm',
          choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
        res.writeHead(200, [
          'Content-Type', 'application/json; charset=utf-8', 'Content-Length', String(Buffer.byteLength(body)),
          'connection', 'X-Hop, keep-alive', 'X-Hop', 'named in Connection', 'Keep-Alive', 'timeout=5',
          'SET-COOKIE', 'session=upstream', 'X-Request-Id', 'upstream-id-123', 'Alt-Svc', 'h3=":443"', 'Server', 'upstream-server',
          'Proxy-Connection', 'keep-alive', 'X-Custom', 'kept', 'openai-processing-ms', '12',
        ]);
        res.end(body);
      });
    });
    await new Promise((r) => upstream.listen(0, '127.0.0.1', r));
    t.after(() => { upstream.closeAllConnections(); upstream.close(); });
    const gw = await startTahua({ t, config: gatewayConfig({ providers: [openaiProvider('raw', `http://127.0.0.1:${upstream.address().port}/v1`)], models: [{ name: 'm', provider: 'raw' }] }) });
    for (let i = 0; i < 2; i += 1) {  // twice: the second most likely on a reused connection, both ways
      const res = await post(gw.url, '/v1/chat/completions', chatBody('m'), { headers: { 'x-request-id': `client-id-${i}` } });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.json.choices[0].message.content, 'hi');
      const h = res.headers;
      assert.equal(h['x-custom'], 'kept');
      assert.equal(h['openai-processing-ms'], '12');
      assert.match(h['content-type'], /^application\/json/);
      assert.equal(h['x-upstream-request-id'], 'upstream-id-123');
      assert.equal(h['x-request-id'], `client-id-${i}`);
      for (const gone of ['x-hop', 'keep-alive', 'set-cookie', 'alt-svc', 'proxy-connection']) assert.equal(h[gone], undefined, gone);
      assert.notEqual(h.server, 'upstream-server');
    }
  });
});
