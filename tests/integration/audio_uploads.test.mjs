// Uploads and audio (issue 25, second part): /v1/audio/transcriptions and translations
// and /v1/images/edits take multipart uploads, which the gateway spools to a temporary
// file as they arrive (never in memory) after the key was checked, routes by the form's
// `model` wherever it lies in the form, and sends on from the spool (so a retry replays
// it); /v1/audio/speech relays its audio as it comes. Each call is the one a user of the
// official `openai` SDK writes.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, mkdtempSync, writeFileSync, createWriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import http from 'node:http';
import OpenAI, { toFile } from 'openai';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { parseMetrics } from './lib/metrics.mjs';

const KEY = 'tk-audio-0123456789abcdef';
const NARROW = 'tk-audio-narrow-0123456789';
const sha256 = (b) => createHash('sha256').update(b).digest('hex');
const dir = mkdtempSync(join(tmpdir(), 'tahua-audio-'));

async function start(t, { server = {}, models = [], retry } = {}) {
  const upstream = await startMockUpstream({ t });
  const config = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl(), retry ? { retry } : {}), { name: 'local', type: 'mock' }],
    models: [
      { name: 'listener', provider: 'up', upstream_model: 'whisper-1', pricing: { per_audio_second: 0.0001 } },
      { name: 'listener-4o', provider: 'up', upstream_model: 'gpt-4o-transcribe', pricing: { input: 2.5, output: 10 } },
      { name: 'voice', provider: 'up', upstream_model: 'tts-1', pricing: { per_character: 0.000015 } },
      { name: 'editor', provider: 'up', upstream_model: 'dall-e-2', pricing: { per_image: 0.02 } },
      { name: 'mock-listener', provider: 'local' },
      ...models,
    ],
    server,
  });
  config.tenants = [{ name: 'team' }];
  config.keys = [
    { name: 'k', tenant: 'team', sha256: sha256(KEY) },
    { name: 'narrow', tenant: 'team', sha256: sha256(NARROW), models: ['voice'] },
  ];
  const gw = await startTahua({ t, config });
  const client = (key = KEY) => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
  return { gw, upstream, client };
}

function audioFile(bytes, name = 'clip.wav') {
  const data = randomBytes(bytes);
  const path = join(dir, `${bytes}-${name}`);
  writeFileSync(path, data);
  return { path, sha: sha256(data), size: bytes };
}

const record = (gw, path) => gw.waitForAccessLog((l) => l.path === path).then((l) => l.at(-1));

// A raw request, for what the SDK does not send (Expect: 100-continue, a hand-made form).
function rawPost(url, path, headers, body) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = http.request({ host: u.hostname, port: u.port, path, method: 'POST', headers });
    let continued = false;
    req.on('continue', () => {
      continued = true;
      req.end(body);
    });
    req.on('response', (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json;
        try { json = JSON.parse(text); } catch { json = undefined; }
        resolve({ status: res.statusCode, headers: res.headers, text, json, continued });
      });
    });
    req.on('error', reject);
    if (!headers.expect) req.end(body);
    else req.flushHeaders();
  });
}

async function rss(gw) {
  const res = await fetch(`${gw.url}/metrics`);
  const m = parseMetrics(await res.text());
  return m.samples.find((s) => s.name === 'process_resident_memory_bytes').value;
}

describe('uploads and audio', () => {
  it('transcriptions.create: the upload reaches the upstream byte for byte, routed by the form\'s model, metered in seconds', async (t) => {
    const { gw, upstream, client } = await start(t);
    const f = audioFile(200_000);
    const r = await client().audio.transcriptions.create({ model: 'listener', file: createReadStream(f.path), language: 'en' });
    assert.equal(r.text, `heard ${f.size} bytes ${f.sha.slice(0, 12)} by whisper-1`, 'the public name rewritten to the upstream\'s');
    const got = upstream.requests.at(-1);
    assert.equal(got.path, '/v1/audio/transcriptions');
    assert.equal(got.form.fields.model, 'whisper-1');
    assert.equal(got.form.fields.language, 'en');
    assert.equal(got.form.files.length, 1);
    assert.equal(got.form.files[0].sha256, f.sha);
    assert.equal(got.form.files[0].filename, `${f.size}-clip.wav`);
    assert.ok(!got.headers.authorization?.includes(KEY), 'the caller\'s key is never forwarded');
    const rec = await record(gw, '/v1/audio/transcriptions');
    assert.equal(rec.status, 200);
    assert.equal(rec.model, 'listener');
    assert.equal(rec.audio_seconds, 7, `200 kB at 32 kB a second: ${JSON.stringify(rec)}`);
    assert.ok(Math.abs(rec.cost_usd - 7 * 0.0001) < 1e-12, `cost ${rec.cost_usd}`);
  });

  it('a form whose file comes before its model (as the SDK sends it) and one whose model comes first both route', async (t) => {
    const { upstream, gw } = await start(t);
    for (const order of [['file', 'model'], ['model', 'file']]) {
      const form = new FormData();
      for (const part of order) {
        if (part === 'file') form.append('file', new Blob([Buffer.alloc(40_000, 7)], { type: 'audio/wav' }), 'a.wav');
        else form.append('model', 'listener');
      }
      form.append('response_format', 'text');
      const res = await fetch(`${gw.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${KEY}` }, body: form });
      assert.equal(res.status, 200, await res.clone().text());
      assert.match(res.headers.get('content-type'), /^text\/plain/);
      assert.match(await res.text(), /^heard 40000 bytes .* by whisper-1$/, 'a text answer passes as it is');
      assert.equal(upstream.requests.at(-1).form.files[0].size, 40_000);
    }
  });

  it('a streamed transcription relays its events and meters their token usage', async (t) => {
    const { gw, client } = await start(t);
    const f = audioFile(64_000);
    const stream = await client().audio.transcriptions.create({ model: 'listener-4o', file: createReadStream(f.path), stream: true });
    const types = [];
    let text = '';
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'transcript.text.done') text = ev.text;
    }
    assert.equal(types.at(-1), 'transcript.text.done');
    assert.ok(types.filter((x) => x === 'transcript.text.delta').length >= 3);
    assert.match(text, /^heard 64000 bytes .* by gpt-4o-transcribe$/);
    const rec = await record(gw, '/v1/audio/transcriptions');
    assert.equal(rec.prompt_tokens, 40);
    assert.equal(rec.completion_tokens, 12);
    assert.ok(Math.abs(rec.cost_usd - (40 * 2.5 + 12 * 10) / 1e6) < 1e-12);
  });

  it('translations.create and images.edit go the same way; an edit is priced per image', async (t) => {
    const { gw, upstream, client } = await start(t);
    const f = audioFile(96_000, 'speech.mp3');
    const tr = await client().audio.translations.create({ model: 'listener', file: createReadStream(f.path), response_format: 'verbose_json' });
    assert.match(tr.text, /^translated 96000 bytes/);
    assert.equal(upstream.requests.at(-1).path, '/v1/audio/translations');
    const rec = await record(gw, '/v1/audio/translations');
    assert.equal(rec.audio_seconds, 3);
    const image = await toFile(Buffer.alloc(30_000, 1), 'cat.png', { type: 'image/png' });
    const edit = await client().images.edit({ model: 'editor', image, prompt: 'add a hat', n: 2 });
    assert.equal(edit.data.length, 2);
    const up = upstream.requests.at(-1);
    assert.equal(up.path, '/v1/images/edits');
    assert.equal(up.form.fields.model, 'dall-e-2');
    assert.equal(up.form.fields.n, '2');
    assert.equal(up.form.files[0].size, 30_000);
    const er = await record(gw, '/v1/images/edits');
    assert.equal(er.images, 2);
    assert.ok(Math.abs(er.cost_usd - 0.04) < 1e-12);
  });

  it('speech.create relays the audio as it comes, and meters the characters spoken', async (t) => {
    const { gw, upstream, client } = await start(t);
    const held = upstream.next({ mode: 'hold', speechPieces: 4 });
    const res = await client().audio.speech.create({ model: 'voice', voice: 'alloy', input: 'héllo wörld' });
    assert.equal(res.headers.get('content-type'), 'audio/mpeg');
    const reader = res.body.getReader();
    // The first piece arrives while the upstream still holds the rest: nothing is buffered.
    const first = await reader.read();
    assert.ok(first.value.length > 0);
    assert.notEqual(held.state, 'finished');
    held.release();
    let total = first.value.length;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.length;
    }
    assert.equal(total, 4 * 16384);
    assert.equal(upstream.requests.at(-1).json.model, 'tts-1');
    const rec = await record(gw, '/v1/audio/speech');
    assert.equal(rec.characters, 11, 'code points, not bytes');
    assert.ok(Math.abs(rec.cost_usd - 11 * 0.000015) < 1e-12);
    assert.equal(rec.prompt_tokens, null, 'no token estimate from audio bytes');
  });

  it('the key is checked before the body is read: a refused upload is never taken in', async (t) => {
    const { gw, upstream } = await start(t);
    const body = Buffer.alloc(2_000_000, 1);
    const r = await rawPost(gw.url, '/v1/audio/transcriptions', {
      authorization: 'Bearer tk-wrong', 'content-type': 'multipart/form-data; boundary=b', 'content-length': body.length, expect: '100-continue',
    }, body);
    assert.equal(r.status, 401);
    assert.equal(r.continued, false, 'no 100 Continue: the client never sent its body');
    assert.equal(r.headers.connection, 'close', 'the unread body ends the connection');
    assert.equal(upstream.requests.length, 0);
    // A key limited to other models learns it once the form's model is read.
    const f = audioFile(10_000);
    const { client } = { client: new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: NARROW, maxRetries: 0 }) };
    await assert.rejects(client.audio.transcriptions.create({ model: 'listener', file: createReadStream(f.path) }), (e) => e.status === 403);
  });

  it('bad uploads get precise errors: not a form, a malformed one, over the path\'s limit', async (t) => {
    const { gw } = await start(t, { server: { uploads: { max_bytes: { '/v1/audio/transcriptions': 100_000 } } } });
    const auth = { authorization: `Bearer ${KEY}` };
    let r = await rawPost(gw.url, '/v1/audio/transcriptions', { ...auth, 'content-type': 'application/json' }, '{"model":"listener"}');
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /takes a multipart\/form-data body/);
    r = await rawPost(gw.url, '/v1/audio/transcriptions', { ...auth, 'content-type': 'multipart/form-data; boundary=zz' },
      '--zz\r\nContent-Disposition: form-data; name="model"\r\n\r\nlistener\r\n--zz\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nabc');
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /multipart form is malformed: .*closing boundary/);
    r = await rawPost(gw.url, '/v1/audio/transcriptions', { ...auth, 'content-type': 'multipart/form-data; boundary=zz' }, Buffer.alloc(150_000, 1));
    assert.equal(r.status, 413);
    assert.match(r.json.error.message, /larger than 100000 bytes/);
    // Another upload path keeps its default limit (100 MiB).
    const f = audioFile(150_000);
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: KEY, maxRetries: 0 });
    const ok = await client.audio.translations.create({ model: 'listener', file: createReadStream(f.path) });
    assert.match(ok.text, /^translated 150000 bytes/);
    // A provider without audio says so.
    await assert.rejects(client.audio.transcriptions.create({ model: 'mock-listener', file: createReadStream(audioFile(5_000).path) }),
      (e) => e.status === 400 && /endpoint is not supported by provider type 'mock'/.test(e.message));
  });

  it('Azure OpenAI: the upload goes to the deployment\'s path with the api-key header', async (t) => {
    const upstream = await startMockUpstream({ t });
    const config = gatewayConfig({
      providers: [{ name: 'az', type: 'azure-openai', base_url: `${upstream.origin()}/openai`, api_version: '2024-10-21', api_key: 'az-key' }],
      models: [{ name: 'listener', provider: 'az', upstream_model: 'whisper-eu' }, { name: 'voice', provider: 'az', upstream_model: 'tts-eu' }],
    });
    const gw = await startTahua({ t, config });
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const f = audioFile(20_000);
    const r = await client.audio.transcriptions.create({ model: 'listener', file: createReadStream(f.path) });
    assert.match(r.text, /^heard 20000 bytes/);
    const got = upstream.requests.at(-1);
    assert.equal(got.path, '/openai/deployments/whisper-eu/audio/transcriptions?api-version=2024-10-21');
    assert.equal(got.headers['api-key'], 'az-key');
    assert.equal(got.form.files[0].sha256, f.sha);
    const speech = await client.audio.speech.create({ model: 'voice', voice: 'alloy', input: 'hi' });
    assert.equal((await speech.arrayBuffer()).byteLength, 4 * 16384);
    assert.equal(upstream.requests.at(-1).path, '/openai/deployments/tts-eu/audio/speech?api-version=2024-10-21');
  });

  it('an upload is retried from its spool: the second attempt sends the same bytes', async (t) => {
    const { upstream, client } = await start(t, { retry: { attempts: 2, backoff: '1ms', on_status: [503] } });
    upstream.next({ mode: 'error', status: 503 });
    const f = audioFile(300_000);
    const r = await client().audio.transcriptions.create({ model: 'listener', file: createReadStream(f.path) });
    assert.match(r.text, /^heard 300000 bytes/);
    assert.equal(upstream.requests.length, 2);
    assert.deepEqual(upstream.requests.map((q) => q.form.files[0].sha256), [f.sha, f.sha]);
  });

  it('a 50 MB upload streams through: the gateway\'s resident memory grows by at most 8 MiB', async (t) => {
    const { gw, upstream, client } = await start(t);
    const path = join(dir, 'big.wav');
    const hash = createHash('sha256');
    await new Promise((resolve, reject) => {
      const out = createWriteStream(path);
      for (let i = 0; i < 50; ++i) {
        const piece = randomBytes(1 << 20);
        hash.update(piece);
        out.write(piece);
      }
      out.end(resolve);
      out.on('error', reject);
    });
    const sha = hash.digest('hex');
    // Warm up (the first request sizes the worker's buffers), then measure.
    await client().audio.transcriptions.create({ model: 'listener', file: createReadStream(audioFile(10_000).path) });
    const before = await rss(gw);
    const r = await client().audio.transcriptions.create({ model: 'listener', file: createReadStream(path) });
    const after = await rss(gw);
    assert.match(r.text, /^heard 52428800 bytes/);
    assert.equal(upstream.requests.at(-1).form.files[0].sha256, sha);
    assert.ok(after - before <= 8 * 1024 * 1024, `RSS grew by ${((after - before) / 1048576).toFixed(1)} MiB`);
  });
});
