// Every row of the error table (docs/errors.md): status, OpenAI error shape, code; no stack
// traces and no provider key in any error body.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { post, request, chatBody, expectError, rawToResult } from './lib/http.mjs';
import { RawClient, rawRequest } from './lib/raw.mjs';
import { closedPort, withTimeout } from './lib/util.mjs';
import { sharedFixture } from './lib/fixtures.mjs';

const KEY = 'sk-errors-test-key-5e6f7a8b';
const MAX_BODY = 4096;
const MAX_HEADER = 2048;

describe('gateway errors', () => {
  const fx = sharedFixture(async () => {
    const upstream = await startMockUpstream();
    const down = await closedPort();
    const gw = await startTahua({
      env: { TAHUA_IT_UNSET_KEY: undefined },
      config: gatewayConfig({
        server: { max_body_bytes: MAX_BODY, max_header_bytes: MAX_HEADER },
        providers: [
          openaiProvider('up', upstream.baseUrl(), { api_key: KEY }),
          openaiProvider('nokey', upstream.baseUrl(), { api_key: undefined, api_key_env: 'TAHUA_IT_UNSET_KEY' }),
          openaiProvider('down', `http://127.0.0.1:${down}/v1`, { api_key: KEY }),
        ],
        models: [
          { name: 'gpt-test', provider: 'up' },
          { name: 'nokey-model', provider: 'nokey' },
          { name: 'down-model', provider: 'down' },
        ],
      }),
    });
    return { gw, upstream, close: async () => { await gw.kill(); await upstream.close(); } };
  });

  /** expectError plus: the body must not leak the provider key. */
  function expectGatewayError(res, status, code) {
    assert.ok(!res.text.includes(KEY), 'provider key not in the response');
    return expectError(res, status, code);
  }

  it('body that is not valid JSON -> 400 invalid_json', async () => {
    const { gw } = fx.current;
    expectGatewayError(await post(gw.url, '/v1/chat/completions', '{"model": "gpt-test", '), 400, 'invalid_json');
  });

  it('body that is not a JSON object -> 400', async () => {
    const { gw } = fx.current;
    expectGatewayError(await post(gw.url, '/v1/chat/completions', '["gpt-test"]'), 400, ['invalid_json', 'invalid_request']);
  });

  it('stream that is not a boolean -> 400 invalid_request', async () => {
    const { gw } = fx.current;
    const res = await post(gw.url, '/v1/chat/completions', { ...chatBody('gpt-test'), stream: 'yes' });
    expectGatewayError(res, 400, 'invalid_request');
  });

  it('missing model -> 400 missing_model', async () => {
    const { gw } = fx.current;
    const { model, ...noModel } = chatBody('gpt-test');
    assert.ok(model);
    expectGatewayError(await post(gw.url, '/v1/chat/completions', noModel), 400, 'missing_model');
    expectGatewayError(await post(gw.url, '/v1/embeddings', { input: 'x' }), 400, 'missing_model');
  });

  it('unknown model -> 404 model_not_found naming the model', async () => {
    const { gw, upstream } = fx.current;
    const before = upstream.requests.length;
    const err = expectGatewayError(
      await post(gw.url, '/v1/chat/completions', chatBody('no-such-model-xyz')),
      404,
      'model_not_found',
    );
    assert.match(err.message, /no-such-model-xyz/);
    assert.equal(upstream.requests.length, before, 'nothing sent upstream');
  });

  it('unknown path -> 404 unknown_url', async () => {
    const { gw } = fx.current;
    expectGatewayError(await request(gw.url, '/v1/nope'), 404, 'unknown_url');
    expectGatewayError(await post(gw.url, '/v2/chat/completions', chatBody('gpt-test')), 404, 'unknown_url');
  });

  it('method not allowed on a known path -> 405 method_not_allowed', async () => {
    const { gw } = fx.current;
    expectGatewayError(await request(gw.url, '/v1/chat/completions'), 405, 'method_not_allowed');
    expectGatewayError(await post(gw.url, '/v1/models', {}), 405, 'method_not_allowed');
    expectGatewayError(await request(gw.url, '/v1/embeddings', { method: 'DELETE' }), 405, 'method_not_allowed');
  });

  it('provider whose api_key_env is unset -> 503 provider_unavailable', async () => {
    const { gw, upstream } = fx.current;
    const before = upstream.requests.length;
    expectGatewayError(await post(gw.url, '/v1/chat/completions', chatBody('nokey-model')), 503, 'provider_unavailable');
    assert.equal(upstream.requests.length, before, 'nothing sent upstream');
  });

  it('upstream unreachable (closed port) -> 502 upstream_unreachable', async () => {
    const { gw } = fx.current;
    expectGatewayError(await post(gw.url, '/v1/chat/completions', chatBody('down-model')), 502, 'upstream_unreachable');
    expectGatewayError(
      await post(gw.url, '/v1/chat/completions', chatBody('down-model', { stream: true })),
      502,
      'upstream_unreachable',
    );
  });

  it('upstream answering something that is not HTTP -> 502 upstream_bad_response', async () => {
    const { gw, upstream } = fx.current;
    upstream.next({ mode: 'garbage' });
    expectGatewayError(await post(gw.url, '/v1/chat/completions', chatBody('gpt-test')), 502, 'upstream_bad_response');
  });

  it('the gateway keeps serving after all of the above', async () => {
    const { gw } = fx.current;
    const res = await post(gw.url, '/v1/chat/completions', chatBody('gpt-test'));
    assert.equal(res.status, 200, res.text);
    assert.ok(!gw.output().includes(KEY), 'provider key not in the logs');
  });
});

describe('HTTP framing errors (one gateway per test, so a crash is attributed)', () => {
  /** A gateway with small limits and an in-process provider, stopped when `t` ends. */
  const framingGateway = (t) =>
    startTahua({
      t,
      config: gatewayConfig({
        server: { max_body_bytes: MAX_BODY, max_header_bytes: MAX_HEADER },
        providers: [{ name: 'm', type: 'mock' }],
        models: [{ name: 'gpt-test', provider: 'm' }],
      }),
    });

  /** The gateway still accepts and serves a new connection. */
  async function expectAlive(gw) {
    const probe = await request(gw.url, '/healthz').catch((err) => ({ status: err.cause?.code ?? err.message }));
    assert.equal(probe.status, 200, `gateway alive after the test; stderr tail:\n${gw.stderr.lines.slice(-3).join('\n')}`);
    assert.ok(gw.running, `gateway still running (signal ${gw.exitSignal})`);
  }

  it('body over max_body_bytes -> 413 request_too_large (Content-Length)', async (t) => {
    const gw = await framingGateway(t);
    const body = JSON.stringify(chatBody('gpt-test', { content: 'x'.repeat(MAX_BODY) }));
    expectError(await post(gw.url, '/v1/chat/completions', body), 413, 'request_too_large');
    await expectAlive(gw);
  });

  it('chunked body over max_body_bytes -> 413 request_too_large', async (t) => {
    const gw = await framingGateway(t);
    const client = await RawClient.connect(gw.port);
    const body = JSON.stringify(chatBody('gpt-test', { content: 'y'.repeat(MAX_BODY) }));
    const half = Math.floor(body.length / 2);
    const chunk = (s) => `${Buffer.byteLength(s).toString(16)}\r\n${s}\r\n`;
    await client.write(
      rawRequest('POST', '/v1/chat/completions', {
        headers: { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' },
        body: `${chunk(body.slice(0, half))}${chunk(body.slice(half))}0\r\n\r\n`,
      }),
    );
    expectError(rawToResult(await client.readResponse()), 413, 'request_too_large');
    client.destroy();
    await expectAlive(gw);
  });

  it('headers over max_header_bytes -> 431 headers_too_large', async (t) => {
    const gw = await framingGateway(t);
    const client = await RawClient.connect(gw.port);
    await client.write(rawRequest('GET', '/v1/models', { headers: { 'X-Big': 'h'.repeat(MAX_HEADER + 100) } }));
    expectError(rawToResult(await client.readResponse()), 431, 'headers_too_large');
    client.destroy();
    await expectAlive(gw);
  });

  it('Content-Length with Transfer-Encoding: chunked -> 400 bad_request, connection closed, nothing smuggled', async (t) => {
    const gw = await framingGateway(t);
    const client = await RawClient.connect(gw.port);
    await client.write(
      'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
        'Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n' +
        '0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n',
    );
    expectError(rawToResult(await client.readResponse()), 400, 'bad_request');
    await withTimeout(client.closed, 3000, 'the gateway to close the connection');
    assert.equal(client.buf.length, 0, `no second response, got ${client.buf.toString('latin1')}`);
    await expectAlive(gw);
  });

  it('two different Content-Length headers -> 400 bad_request, connection closed', async (t) => {
    const gw = await framingGateway(t);
    const client = await RawClient.connect(gw.port);
    await client.write(
      'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 4\r\n\r\n{}{}',
    );
    expectError(rawToResult(await client.readResponse()), 400, 'bad_request');
    await withTimeout(client.closed, 3000, 'the gateway to close the connection');
    await expectAlive(gw);
  });

  it('malformed request line -> 400 bad_request, connection closed', async (t) => {
    const gw = await framingGateway(t);
    const client = await RawClient.connect(gw.port);
    await client.write('THIS IS NOT HTTP\r\n\r\n');
    expectError(rawToResult(await client.readResponse()), 400, 'bad_request');
    await withTimeout(client.closed, 3000, 'the gateway to close the connection');
    await expectAlive(gw);
  });
});
