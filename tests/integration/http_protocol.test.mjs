// HTTP/1.1 on the client side, byte-exact: keep-alive, pipelining, Connection: close,
// and the server timeouts (slowloris head, slow body, idle keep-alive).
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { gatewayConfig, startTahua } from './lib/tahua.mjs';
import { RawClient, rawRequest } from './lib/raw.mjs';
import { withTimeout } from './lib/util.mjs';

const HEADER_TIMEOUT_MS = 300;
const BODY_TIMEOUT_MS = 400;
const KEEPALIVE_TIMEOUT_MS = 400;

const chat = (stream) =>
  rawRequest('POST', '/v1/chat/completions', {
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'mock', stream, messages: [{ role: 'user', content: 'hi' }] }),
  });

describe('client-side HTTP/1.1', () => {
  let gw;
  before(async () => {
    gw = await startTahua({
      config: gatewayConfig({
        server: {
          header_timeout: `${HEADER_TIMEOUT_MS}ms`,
          body_timeout: `${BODY_TIMEOUT_MS}ms`,
          keepalive_timeout: `${KEEPALIVE_TIMEOUT_MS}ms`,
        },
        providers: [{ name: 'm', type: 'mock', mock: { completion_tokens: 3, chunk_delay: '20ms', embedding_dimensions: 4 } }],
        models: [{ name: 'mock', provider: 'm' }],
      }),
    });
  });
  after(() => gw?.kill());

  it('pipelined requests in one write get responses in order on the same connection', async () => {
    const client = await RawClient.connect(gw.port);
    await client.write(chat(true) + rawRequest('GET', '/healthz') + rawRequest('GET', '/v1/models'));
    const first = await client.readResponse();
    assert.equal(first.status, 200);
    assert.match(first.headers['content-type'], /^text\/event-stream/);
    assert.match(first.body.toString(), /data: \[DONE\]\n\n$/, 'the slow stream comes first, complete');
    const second = await client.readResponse();
    assert.equal(second.status, 200, 'healthz second');
    assert.doesNotMatch(second.body.toString(), /"object"\s*:\s*"list"/);
    const third = await client.readResponse();
    assert.equal(third.status, 200);
    assert.equal(JSON.parse(third.body).object, 'list', 'models third');
    // Still the same open connection: a fourth request is served on it.
    await client.write(chat(false));
    const fourth = await client.readResponse();
    assert.equal(JSON.parse(fourth.body).object, 'chat.completion');
    assert.equal(client.eof, false);
    client.destroy();
  });

  it('a head whose framing or Host is not plain is refused: Transfer-Encoding other than chunked (in any of its fields), two Hosts, none', async () => {
    const body = JSON.stringify({ model: 'mock', messages: [{ role: 'user', content: 'hi' }] });
    const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
    const cases = [
      ['Host: a\r\nTransfer-Encoding: gzip\r\n', /Unsupported Transfer-Encoding/],
      ['Host: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n', /Unsupported Transfer-Encoding/],
      ['Host: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n', /Malformed HTTP request/],
      ['Host: a\r\nHost: b\r\nTransfer-Encoding: chunked\r\n', /more than one Host header/],
      ['Transfer-Encoding: chunked\r\n', /no Host header/],
    ];
    for (const [head, message] of cases) {
      const client = await RawClient.connect(gw.port);
      await client.write(`POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n${head}\r\n${chunked}`);
      const res = await client.readResponse();
      assert.equal(res.status, 400, head);
      assert.match(JSON.parse(res.body).error.message, message, head);
      client.destroy();
    }
    // The same body, chunked, with one Host: served.
    const client = await RawClient.connect(gw.port);
    await client.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${chunked}`);
    const ok = await client.readResponse();
    assert.equal(ok.status, 200);
    assert.equal(JSON.parse(ok.body).object, 'chat.completion');
    client.destroy();
  });

  it('Connection: close is honoured after the response', async () => {
    const client = await RawClient.connect(gw.port);
    await client.write(rawRequest('GET', '/healthz', { headers: { Connection: 'close' } }));
    assert.equal((await client.readResponse()).status, 200);
    await withTimeout(client.closed, 2000, 'close after Connection: close');
  });

  it('HTTP/1.0 without keep-alive is closed after the response', async () => {
    const client = await RawClient.connect(gw.port);
    await client.write('GET /healthz HTTP/1.0\r\n\r\n');
    assert.equal((await client.readResponse()).status, 200);
    await withTimeout(client.closed, 2000, 'close after an HTTP/1.0 response');
  });

  it('an HTTP/1.0 stream is sent unchunked and ended by closing the connection', async () => {
    const client = await RawClient.connect(gw.port);
    const body = JSON.stringify({ model: 'mock', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    await client.write(
      `POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    await withTimeout(client.closed, 3000, 'the end of an HTTP/1.0 stream');
    const res = await client.readResponse(); // no length and no chunking: the body ends at EOF
    assert.equal(res.status, 200);
    assert.equal(res.headers['transfer-encoding'], undefined);
    assert.match(res.body.toString(), /^data: \{/);
    assert.match(res.body.toString(), /data: \[DONE\]\n\n$/);
  });

  it('slowloris: a partial request head is dropped after header_timeout', async () => {
    const client = await RawClient.connect(gw.port);
    const started = Date.now();
    await client.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n');
    await withTimeout(client.closed, 3000, 'the gateway to drop the connection');
    const elapsed = client.closedAt - started;
    assert.ok(elapsed >= HEADER_TIMEOUT_MS - 50, `not dropped before header_timeout (${elapsed}ms)`);
  });

  it('slowloris: trickling header bytes does not extend header_timeout', async () => {
    const client = await RawClient.connect(gw.port);
    const started = Date.now();
    await client.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
    const drip = setInterval(() => {
      if (!client.eof) client.socket.write('a');
    }, 40);
    try {
      await withTimeout(client.closed, 3000, 'the gateway to drop the trickling connection');
    } finally {
      clearInterval(drip);
    }
    const elapsed = client.closedAt - started;
    assert.ok(elapsed < HEADER_TIMEOUT_MS * 4, `dropped after ${elapsed}ms, header_timeout ${HEADER_TIMEOUT_MS}ms`);
  });

  it('a request body that stops arriving is dropped after body_timeout', async () => {
    const client = await RawClient.connect(gw.port);
    await client.write(
      'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"model":',
    );
    const started = Date.now();
    await withTimeout(client.closed, 3000, 'the gateway to drop the connection');
    const elapsed = client.closedAt - started;
    assert.ok(elapsed >= BODY_TIMEOUT_MS - 50, `not dropped before body_timeout (${elapsed}ms)`);
  });

  it('an idle keep-alive connection is closed after keepalive_timeout', async () => {
    const client = await RawClient.connect(gw.port);
    await client.write(rawRequest('GET', '/healthz'));
    assert.equal((await client.readResponse()).status, 200);
    const idleSince = Date.now();
    await withTimeout(client.closed, 3000, 'the idle connection to be closed');
    const elapsed = client.closedAt - idleSince;
    assert.ok(elapsed >= KEEPALIVE_TIMEOUT_MS - 50, `closed after ${elapsed}ms idle, keepalive_timeout ${KEEPALIVE_TIMEOUT_MS}ms`);
  });
});
