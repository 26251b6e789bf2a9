// An answer given before a request's body was read (an upload refused at its headers: a
// wrong key, no files provider, a body over its limit) reaches the client. The gateway
// answers, then reads and discards what the client still sends for a bounded time and
// size (a lingering close, as nginx's lingering_time / lingering_timeout), so the
// client's stack sees the answer rather than a reset. With the official SDKs and curl,
// bodies of 1, 4 and 64 MiB; a client that trickles is still cut off at the bound.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import net from 'node:net';
import OpenAI, { toFile } from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { makeTempDir } from './lib/util.mjs';

const KEY = 'tk-early-0123456789abcdef';
const sha256 = (b) => createHash('sha256').update(b).digest('hex');
const MiB = 1024 * 1024;

async function start(t, { files = true, server = {}, uploadLimit = 128 * MiB } = {}) {
  const upstream = await startMockUpstream({ t });
  const config = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl())],
    models: [{ name: 'fast', provider: 'up' }],
    server: { max_body_bytes: 2 * MiB, uploads: { max_bytes: { '/v1/files': uploadLimit } }, ...server },
  });
  config.tenants = [{ name: 'team' }];
  config.keys = [{ name: 'k', tenant: 'team', sha256: sha256(KEY) }];
  if (files) config.files = { provider: 'up' };
  const gw = await startTahua({ t, config });
  return { gw, upstream };
}

async function refusal(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  assert.fail('the request was not refused');
}

describe('answers given before the body was read', () => {
  it('reach the openai SDK: 401 for a wrong key, 404 without a files provider, 413 over the limit', async (t) => {
    const { gw } = await start(t);
    const { gw: bare } = await start(t, { files: false });
    const { gw: small } = await start(t, { uploadLimit: 2 * MiB });
    const client = (g, key) => new OpenAI({ baseURL: `${g.url}/v1`, apiKey: key, maxRetries: 0 });
    for (const size of [1 * MiB, 4 * MiB, 64 * MiB]) {
      const file = async () => toFile(Buffer.alloc(size, 'a'), 'data.jsonl');
      const wrongKey = await refusal(client(gw, 'tk-wrong-key-000000000000').files.create({ file: await file(), purpose: 'fine-tune' }));
      assert.equal(wrongKey.status, 401, `${size / MiB} MiB, wrong key: ${wrongKey.message}`);
      const noFiles = await refusal(client(bare, KEY).files.create({ file: await file(), purpose: 'fine-tune' }));
      assert.equal(noFiles.status, 404, `${size / MiB} MiB, no files provider: ${noFiles.message}`);
      if (size > 2 * MiB) {
        const over = await refusal(client(small, KEY).files.create({ file: await file(), purpose: 'fine-tune' }));
        assert.equal(over.status, 413, `${size / MiB} MiB, over the upload limit: ${over.message}`);
      }
    }
    const m = await scrape(gw.url);
    assert.ok(sum(m, 'tahua_lingering_closes_total') >= 3, 'counted');
    assert.ok(sum(m, 'tahua_lingering_bytes_total') > 0, 'what the client still sent was read');
  });

  it('reach the Anthropic SDK: a message over max_body_bytes is a 413 it can read', async (t) => {
    const { gw } = await start(t);
    const anthropic = new Anthropic({ baseURL: gw.url, apiKey: KEY, maxRetries: 0 });
    for (const size of [4 * MiB, 64 * MiB]) {
      const e = await refusal(anthropic.messages.create({ model: 'fast', max_tokens: 5, messages: [{ role: 'user', content: 'x'.repeat(size) }] }));
      assert.equal(e.status, 413, `${size / MiB} MiB: ${e.message}`);
    }
  });

  it('reach curl, with and without Expect: 100-continue (the refusal comes instead of 100 Continue)', async (t) => {
    const { gw } = await start(t);
    const dir = makeTempDir();
    for (const size of [1 * MiB, 4 * MiB, 64 * MiB]) {
      const file = join(dir, `f${size}`);
      writeFileSync(file, Buffer.alloc(size, 'b'));
      for (const expect of ['Expect:', 'Expect: 100-continue']) {
        const r = spawnSync('curl', ['-sS', '-o', '/dev/null', '-w', '%{http_code} %{http_connect}', '-H', 'Authorization: Bearer tk-wrong-key-000000000000',
          '-H', expect, '-F', 'purpose=fine-tune', '-F', `file=@${file}`, `${gw.url}/v1/files`], { encoding: 'utf8', timeout: 60_000 });
        assert.equal(r.status, 0, `${size / MiB} MiB, ${expect}: ${r.stderr}`);
        assert.match(r.stdout, /^401 /, `${size / MiB} MiB, ${expect}: ${r.stdout}`);
      }
    }
  });

  it('a client that trickles its body after the answer is cut off at lingering_time', async (t) => {
    const { gw } = await start(t, { server: { lingering_time: '1s', lingering_timeout: '400ms' } });
    // Half-open: it keeps sending after the gateway's FIN, as a client still uploading does.
    const socket = net.connect({ port: gw.port, host: '127.0.0.1', allowHalfOpen: true });
    await new Promise((resolve) => socket.once('connect', resolve));
    let answer = '';
    socket.on('data', (d) => { answer += d.toString('latin1'); });
    const closed = new Promise((resolve) => socket.once('close', resolve));
    socket.on('error', () => {});
    socket.write(`POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tk-wrong-key-000000000000\r\n` +
      `Content-Type: multipart/form-data; boundary=b\r\nContent-Length: ${16 * MiB}\r\n\r\n`);
    // A byte every 100 ms: each read comes well within lingering_timeout, so only the
    // total bound ends it.
    const trickle = setInterval(() => { if (!socket.destroyed) socket.write('x'); }, 100);
    t.after(() => clearInterval(trickle));
    await closed;
    clearInterval(trickle);
    assert.match(answer, /^HTTP\/1\.1 401 /);
    const m = await scrape(gw.url);
    assert.ok(sum(m, 'tahua_lingering_closes_total', { end: 'time' }) >= 1, 'ended by lingering_time');
  });
});
