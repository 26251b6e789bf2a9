// TLS: HTTPS upstreams (custom CA, system store, verify off, host name check), egress
// through an HTTPS_PROXY CONNECT tunnel, and a TLS listener.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import https from 'node:https';
import { makeCa, issueCert } from './lib/certs.mjs';
import { startMockUpstream, DEFAULT_PIECES } from './lib/mock_upstream.mjs';
import { startConnectProxy } from './lib/connect_proxy.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { post, chatBody, expectError } from './lib/http.mjs';
import { openaiClient } from './lib/fixtures.mjs';

const ca = makeCa();
const goodCert = issueCert(ca, ['DNS:localhost', 'IP:127.0.0.1']);
const wrongNameCert = issueCert(ca, ['DNS:wrong.example']);

describe('HTTPS upstreams', () => {
  let upstream;
  let wrongName;
  let gw;
  before(async () => {
    upstream = await startMockUpstream({ tls: goodCert });
    wrongName = await startMockUpstream({ tls: wrongNameCert });
    const tlsProvider = (name, base, tls) => openaiProvider(name, base, tls ? { tls } : {});
    gw = await startTahua({
      config: gatewayConfig({
        providers: [
          tlsProvider('with-ca', upstream.baseUrl(), { ca_file: ca.caFile }),
          tlsProvider('system-store', upstream.baseUrl(), null),
          tlsProvider('no-verify', upstream.baseUrl(), { verify: false }),
          tlsProvider('wrong-name', wrongName.baseUrl(), { ca_file: ca.caFile }),
        ],
        models: [
          { name: 'with-ca', provider: 'with-ca' },
          { name: 'system-store', provider: 'system-store' },
          { name: 'no-verify', provider: 'no-verify' },
          { name: 'wrong-name', provider: 'wrong-name' },
        ],
      }),
    });
  });
  after(async () => {
    await gw?.kill();
    await upstream?.close();
    await wrongName?.close();
  });

  it('trusts the upstream through tls.ca_file', async () => {
    const res = await post(gw.url, '/v1/chat/completions', chatBody('with-ca'));
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.choices[0].message.content, DEFAULT_PIECES.join(''));
    const stream = await post(gw.url, '/v1/chat/completions', chatBody('with-ca', { stream: true }));
    assert.match(stream.text, /data: \[DONE\]\n\n$/);
  });

  it('rejects a self-signed chain with the system store -> 502 upstream_tls_error', async () => {
    const before = upstream.requests.length;
    expectError(await post(gw.url, '/v1/chat/completions', chatBody('system-store')), 502, 'upstream_tls_error');
    assert.equal(upstream.requests.length, before, 'no request got through');
  });

  it('tls.verify: false skips verification', async () => {
    const res = await post(gw.url, '/v1/chat/completions', chatBody('no-verify'));
    assert.equal(res.status, 200, res.text);
  });

  it('checks the host name against the certificate -> 502 upstream_tls_error', async () => {
    expectError(await post(gw.url, '/v1/chat/completions', chatBody('wrong-name')), 502, 'upstream_tls_error');
    assert.equal(wrongName.requests.length, 0);
  });
});

describe('HTTP_PROXY egress', () => {
  it('sends plain-http upstream requests to the proxy in absolute form', async (t) => {
    const upstream = await startMockUpstream({ t });
    const proxy = await startConnectProxy({ t });
    const gw = await startTahua({
      t,
      env: { HTTP_PROXY: proxy.url },
      config: gatewayConfig({
        providers: [openaiProvider('plain', upstream.baseUrl('localhost'))],
        models: [{ name: 'plain', provider: 'plain' }],
      }),
    });
    const res = await post(gw.url, '/v1/chat/completions', chatBody('plain'));
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(proxy.requests, [`http://localhost:${upstream.port}/v1/chat/completions`]);
    assert.deepEqual(proxy.connects, []);
    assert.equal(upstream.requests.length, 1);
    assert.equal(upstream.requests[0].headers.host, `localhost:${upstream.port}`);
  });
});

describe('HTTPS_PROXY egress', () => {
  async function gatewayViaProxy(t, env) {
    const upstream = await startMockUpstream({ tls: goodCert, t });
    const proxy = await startConnectProxy({ t });
    const gw = await startTahua({
      t,
      env: { HTTPS_PROXY: proxy.url, ...env },
      config: gatewayConfig({
        providers: [openaiProvider('remote', upstream.baseUrl('localhost'), { tls: { ca_file: ca.caFile } })],
        models: [{ name: 'remote', provider: 'remote' }],
      }),
    });
    return { upstream, proxy, gw };
  }

  it('tunnels https upstreams through CONNECT', async (t) => {
    const { upstream, proxy, gw } = await gatewayViaProxy(t);
    const res = await post(gw.url, '/v1/chat/completions', chatBody('remote'));
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(proxy.connects, [`localhost:${upstream.port}`]);
    assert.equal(upstream.requests.length, 1);
    assert.equal(upstream.requests[0].headers.host, `localhost:${upstream.port}`);
  });

  it('NO_PROXY bypasses the proxy', async (t) => {
    const { upstream, proxy, gw } = await gatewayViaProxy(t, { NO_PROXY: 'localhost' });
    const res = await post(gw.url, '/v1/chat/completions', chatBody('remote'));
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(proxy.connects, []);
    assert.equal(upstream.requests.length, 1);
  });
});

describe('TLS listener', () => {
  /** An HTTPS request to the gateway trusting only the test CA. */
  function httpsRequest(url, { method = 'GET', body } = {}) {
    return new Promise((resolve, reject) => {
      const req = https.request(url, { method, ca: ca.ca, headers: body ? { 'content-type': 'application/json' } : {} }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode, text }));
      });
      req.on('error', reject);
      req.setTimeout(5000, () => req.destroy(new Error('https request timed out')));
      req.end(body);
    });
  }

  it('serves HTTPS with listener tls.cert_file/key_file', async (t) => {
    const gw = await startTahua({
      t,
      config: gatewayConfig({
        listeners: [{ address: '127.0.0.1', port: 0, tls: { cert_file: goodCert.certFile, key_file: goodCert.keyFile } }],
        providers: [{ name: 'm', type: 'mock' }],
        models: [{ name: 'mock', provider: 'm' }],
      }),
    });
    assert.equal(gw.listeners[0].tls, true);
    assert.ok(gw.url.startsWith('https://'));
    assert.equal((await httpsRequest(`${gw.url}/healthz`)).status, 200);
    const chat = await httpsRequest(`${gw.url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify(chatBody('mock')) });
    assert.equal(chat.status, 200, chat.text);
    assert.equal(JSON.parse(chat.text).object, 'chat.completion');
  });

  it('serves HTTPS and plain listeners side by side', async (t) => {
    const gw = await startTahua({
      t,
      config: gatewayConfig({
        listeners: [
          { address: '127.0.0.1', port: 0 },
          { address: '127.0.0.1', port: 0, tls: { cert_file: goodCert.certFile, key_file: goodCert.keyFile } },
        ],
        providers: [{ name: 'm', type: 'mock' }],
        models: [{ name: 'mock', provider: 'm' }],
      }),
    });
    const plain = gw.listeners.find((l) => !l.tls);
    const secure = gw.listeners.find((l) => l.tls);
    assert.ok(plain && secure, 'one plain and one TLS listening line');
    assert.equal((await httpsRequest(`https://127.0.0.1:${secure.port}/healthz`)).status, 200);
    const models = await openaiClient({ url: `http://127.0.0.1:${plain.port}` }).models.list();
    assert.deepEqual(models.data.map((m) => m.id), ['mock']);
  });
});
