// Files and batches (issue 25): /v1/files and /v1/batches routed to `files.provider`,
// owned by the tenant that made them. Every id another tenant names is a 404 — an
// upstream id alone reads nothing — and a list shows the caller's own items only. A
// batch file's lines are checked against the key's model access and renamed to the
// upstream's models before the upload goes on. Each call is the one a user of the
// official `openai` SDK writes.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import OpenAI, { toFile } from 'openai';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { request } from './lib/http.mjs';
import { eventually } from './lib/util.mjs';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { REPO_ROOT } from './lib/tahua.mjs';

const A = 'tk-files-team-a-0123456789';
const B = 'tk-files-team-b-0123456789';
const A_NARROW = 'tk-files-team-a-narrow-0123';
const sha256 = (b) => createHash('sha256').update(b).digest('hex');

async function start(t, { files = { provider: 'up', poll_interval: '100ms' } } = {}) {
  const upstream = await startMockUpstream({ t });
  const other = await startMockUpstream({ t });
  const config = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl()), openaiProvider('other', other.baseUrl())],
    models: [
      { name: 'fast', provider: 'up', upstream_model: 'gpt-4o-mini-2024-07-18', pricing: { input: 0.15, output: 0.6, batch_input: 0.075, batch_output: 0.3 } },
      { name: 'smart', provider: 'up', upstream_model: 'gpt-4o' },
      { name: 'elsewhere', provider: 'other', upstream_model: 'gpt-4o' },
    ],
  });
  config.tenants = [{ name: 'team-a' }, { name: 'team-b' }];
  config.keys = [
    { name: 'a', tenant: 'team-a', sha256: sha256(A) },
    { name: 'a-narrow', tenant: 'team-a', sha256: sha256(A_NARROW), models: ['fast'] },
    { name: 'b', tenant: 'team-b', sha256: sha256(B) },
  ];
  if (files) config.files = files;
  const gw = await startTahua({ t, config });
  const client = (key) => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
  return { gw, upstream, other, a: client(A), b: client(B), narrow: client(A_NARROW) };
}

const jsonl = (lines) => toFile(Buffer.from(lines.map((l) => JSON.stringify(l)).join('\n') + '\n'), 'batch.jsonl');
const chatLine = (id, model) => ({ custom_id: id, method: 'POST', url: '/v1/chat/completions', body: { model, messages: [{ role: 'user', content: `hi ${id}` }] } });
const notFound = (e) => e.status === 404 && e.error?.code === 'file_not_found';

describe('files and batches', () => {
  it('a file is its tenant\'s: retrieve, content, list and delete; another tenant gets 404 for every id and sees none', async (t) => {
    const { a, b, upstream } = await start(t);
    const data = Buffer.from('{"prompt": "fine-tune me"}\n'.repeat(100));
    const f = await a.files.create({ file: await toFile(data, 'train.jsonl'), purpose: 'fine-tune' });
    assert.match(f.id, /^file-mock/);
    assert.equal(f.bytes, data.length);
    assert.equal(upstream.requests.at(-1).form.files[0].sha256, sha256(data), 'the upload reaches the provider as sent');
    assert.ok(!upstream.requests.at(-1).headers.authorization.includes(A), 'the provider gets its own key');
    assert.equal((await a.files.retrieve(f.id)).filename, 'train.jsonl');
    const content = await a.files.content(f.id);
    assert.equal(Buffer.from(await content.arrayBuffer()).toString(), data.toString());
    // Team B: the same ids, nothing.
    const other = await b.files.create({ file: await toFile(Buffer.from('b'), 'b.jsonl'), purpose: 'fine-tune' });
    await assert.rejects(b.files.retrieve(f.id), notFound);
    await assert.rejects(b.files.content(f.id), notFound);
    await assert.rejects(b.files.delete(f.id), notFound);
    await assert.rejects(b.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' }), notFound);
    // An id that exists upstream but was never uploaded through the gateway is nobody's.
    upstream.files.set('file-direct', { object: { id: 'file-direct', object: 'file' }, content: Buffer.from('x') });
    await assert.rejects(a.files.retrieve('file-direct'), notFound);
    // Lists: the provider's page with the caller's items only.
    const listA = [];
    for await (const x of a.files.list()) listA.push(x.id);
    assert.deepEqual(listA, [f.id]);
    const listB = [];
    for await (const x of b.files.list()) listB.push(x.id);
    assert.deepEqual(listB, [other.id]);
    const del = await a.files.delete(f.id);
    assert.equal(del.deleted, true);
    await assert.rejects(a.files.retrieve(f.id), notFound, 'a deleted file is gone from the records too');
  });

  it('a batch file\'s lines are checked against the key and renamed to the upstream\'s models', async (t) => {
    const { a, narrow, upstream } = await start(t);
    const f = await a.files.create({ file: await jsonl([chatLine('1', 'fast'), chatLine('2', 'smart')]), purpose: 'batch' });
    const sent = upstream.files.get(f.id).content.toString().trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(sent.map((l) => l.body.model), ['gpt-4o-mini-2024-07-18', 'gpt-4o']);
    assert.deepEqual(sent.map((l) => l.custom_id), ['1', '2']);
    // A key limited to `fast` cannot get `smart` run by way of a batch.
    await assert.rejects(narrow.files.create({ file: await jsonl([chatLine('1', 'fast'), chatLine('2', 'smart')]), purpose: 'batch' }),
      (e) => e.status === 403 && /Line 2 of the batch file names the model 'smart', which this API key may not use/.test(e.message));
    await assert.rejects(a.files.create({ file: await jsonl([chatLine('1', 'nope')]), purpose: 'batch' }),
      (e) => e.status === 404 && /Line 1 .* 'nope'/.test(e.message));
    await assert.rejects(a.files.create({ file: await jsonl([chatLine('1', 'elsewhere')]), purpose: 'batch' }),
      (e) => e.status === 400 && /provider 'up' .* does not serve/.test(e.message));
    await assert.rejects(a.files.create({ file: await toFile(Buffer.from('{"custom_id":"1"}\nnot json\n'), 'x.jsonl'), purpose: 'batch' }),
      (e) => e.status === 400 && /Line 1 of the batch file has no url/.test(e.message));
    const uploads = [...upstream.files.keys()].length;
    assert.equal(uploads, 1, 'no refused batch file reached the provider');
  });

  it('batches: create, retrieve, list, cancel; the output file is the owner\'s to read', async (t) => {
    const { a, b, upstream } = await start(t);
    const f = await a.files.create({ file: await jsonl([chatLine('1', 'fast'), chatLine('2', 'fast')]), purpose: 'batch' });
    const batch = await a.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    assert.equal(batch.status, 'in_progress');
    await assert.rejects(b.batches.retrieve(batch.id), notFound);
    await assert.rejects(b.batches.cancel(batch.id), notFound);
    const listB = [];
    for await (const x of b.batches.list()) listB.push(x.id);
    assert.deepEqual(listB, []);
    upstream.completeBatch(batch.id);
    const done = await a.batches.retrieve(batch.id);
    assert.equal(done.status, 'completed');
    const out = await a.files.content(done.output_file_id);
    const lines = (await out.text()).trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((l) => l.custom_id), ['1', '2']);
    await assert.rejects(b.files.content(done.output_file_id), notFound);
    const listA = [];
    for await (const x of a.batches.list()) listA.push(x.id);
    assert.deepEqual(listA, [batch.id]);
    const second = await a.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    assert.equal((await a.batches.cancel(second.id)).status, 'cancelled');
  });

  it('a batch is metered by the poller when it ends: its tokens per model, at the batch price, once', async (t) => {
    const { a, gw, upstream } = await start(t);
    const f = await a.files.create({ file: await jsonl([chatLine('1', 'fast'), chatLine('2', 'fast'), chatLine('3', 'smart')]), purpose: 'batch' });
    const batch = await a.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    upstream.completeBatch(batch.id, { prompt: 100, completion: 20 });
    const lines = await gw.waitForAccessLog((l) => l.request_id === `batch-${batch.id}`, { count: 2, timeout: 10_000 });
    const byModel = Object.fromEntries(lines.map((l) => [l.model, l]));
    assert.equal(byModel.fast.prompt_tokens, 200);
    assert.equal(byModel.fast.completion_tokens, 40);
    assert.equal(byModel.fast.tenant, 'team-a');
    assert.equal(byModel.fast.api, 'openai-batch');
    assert.ok(Math.abs(byModel.fast.cost_usd - (200 * 0.075 + 40 * 0.3) / 1e6) < 1e-12, `batch price: ${byModel.fast.cost_usd}`);
    assert.equal(byModel.smart.prompt_tokens, 100);
    assert.equal(byModel.smart.cost_usd, null, 'no pricing, no cost');
    // Metered once: the registration is gone. A second batch, still running, shows that
    // later turns happened (it is asked about again) without the first being asked again.
    const polled = upstream.requests.filter((r) => r.path === `/v1/batches/${batch.id}`).length;
    const running = await a.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const asked = () => upstream.requests.filter((r) => r.path === `/v1/batches/${running.id}`).length;
    await eventually(() => asked() >= 3, { timeout: 10_000, what: 'three more poller turns' });
    assert.equal(upstream.requests.filter((r) => r.path === `/v1/batches/${batch.id}`).length, polled);
    assert.equal(gw.accessLog().filter((l) => l.request_id === `batch-${batch.id}`).length, 2);
  });

  it('Azure OpenAI files and batches: the resource\'s paths with its api-version', async (t) => {
    const upstream = await startMockUpstream({ t });
    const config = gatewayConfig({
      providers: [{ name: 'az', type: 'azure-openai', base_url: `${upstream.origin()}/openai`, api_version: '2024-10-21', api_key: 'az-key' }],
      models: [{ name: 'fast', provider: 'az', upstream_model: 'gpt-4o-mini-eu' }],
    });
    config.tenants = [{ name: 'team-a' }];
    config.keys = [{ name: 'a', tenant: 'team-a', sha256: sha256(A) }];
    config.files = { provider: 'az' };
    const gw = await startTahua({ t, config });
    const a = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: A, maxRetries: 0 });
    const f = await a.files.create({ file: await jsonl([chatLine('1', 'fast')]), purpose: 'batch' });
    assert.equal(upstream.requests.at(-1).path, '/openai/files?api-version=2024-10-21');
    assert.equal(upstream.requests.at(-1).headers['api-key'], 'az-key');
    assert.equal(JSON.parse(upstream.files.get(f.id).content.toString()).body.model, 'gpt-4o-mini-eu', 'renamed to the deployment');
    const list = [];
    for await (const x of a.files.list({ purpose: 'batch' })) list.push(x.id);
    assert.deepEqual(list, [f.id]);
    assert.equal(upstream.requests.at(-1).path, '/openai/files?api-version=2024-10-21&purpose=batch');
    const b = await a.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    assert.equal((await a.batches.retrieve(b.id)).id, b.id);
    assert.equal(upstream.requests.at(-1).path, `/openai/batches/${b.id}?api-version=2024-10-21`);
  });

  it('the files block of docs/files-and-batches.md is a working config', async (t) => {
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'files-and-batches.md'), 'utf8');
    const block = [...guide.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]).find((y) => y.startsWith('files:'));
    assert.ok(block, 'docs/files-and-batches.md has the files example block');
    const upstream = await startMockUpstream({ t });
    const config = gatewayConfig({
      providers: [openaiProvider('openai', upstream.baseUrl()), { ...openaiProvider('azure-eu', upstream.baseUrl()), type: 'azure-openai', api_version: '2024-10-21' }],
      models: [{ name: 'fast', provider: 'openai' }],
    });
    config.tenants = [{ name: 'team-a' }, { name: 'team-eu' }];
    config.keys = [{ name: 'a', tenant: 'team-a', sha256: sha256(A) }];
    config.files = YAML.parse(block).files;
    const gw = await startTahua({ t, config });
    const a = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: A, maxRetries: 0 });
    const f = await a.files.create({ file: await toFile(Buffer.from('x'), 'x.txt'), purpose: 'user_data' });
    assert.equal((await a.files.retrieve(f.id)).id, f.id);
  });

  it('per-tenant providers; without a files section the endpoints say so', async (t) => {
    const { a, b, upstream, other } = await start(t, { files: { provider: 'up', tenants: { 'team-b': 'other' } } });
    await a.files.create({ file: await toFile(Buffer.from('a'), 'a.txt'), purpose: 'user_data' });
    await b.files.create({ file: await toFile(Buffer.from('b'), 'b.txt'), purpose: 'user_data' });
    assert.equal(upstream.files.size, 1);
    assert.equal(other.files.size, 1);
    const { gw } = await start(t, { files: null });
    const r = await request(gw.url, '/v1/files', { headers: { authorization: `Bearer ${A}` } });
    assert.equal(r.status, 404);
    assert.match(r.json.error.message, /not served by this gateway/);
  });
});
