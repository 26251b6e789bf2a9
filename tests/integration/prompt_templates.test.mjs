// Prompt templates (docs/prompt-templates.md): PromptTemplate resources in a config
// directory and through the admin API, named by requests (`prompt: {id, version,
// variables}`) on chat, messages and Responses; rendered before routing into what the
// provider gets (the `prompt` field never forwarded); variables checked by type; unknown
// ids 404 in the client's API shape; the version used in the access log and usage record.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { gatewayConfig, openaiProvider, REPO_ROOT, startTahua } from './lib/tahua.mjs';
import { expectError, post } from './lib/http.mjs';
import { startOpenAIChatMock, startAnthropicMock } from './lib/vendor_mocks.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';
import { toYaml } from './lib/yaml.mjs';

const TEMPLATES = `
apiVersion: tahua.dev/v1
kind: PromptTemplate
metadata: {name: support-answer}
spec:
  version: "1"
  model: gpt-small
  parameters: {temperature: 0.2, max_tokens: 300}
  variables:
    customer: {type: string}
    tier: {type: string, enum: [free, pro], default: free}
    max_items: {type: integer, required: false}
  messages:
    - {role: system, content: "You answer for {{customer}} ({{tier}} tier), in at most {{ max_items }} items."}
    - {role: user, content: "Hello from {{customer}}."}
---
apiVersion: tahua.dev/v1
kind: PromptTemplate
metadata: {name: support-answer@2}
spec:
  model: gpt-small
  variables: {customer: {type: string}}
  messages:
    - {role: system, content: "v2 for {{customer}}."}
---
apiVersion: tahua.dev/v1
kind: PromptTemplate
metadata: {name: legacy}
spec: {template: "Summarize for {{product}}.", variables: [product]}
`;

async function start(t, { admin = false } = {}) {
  const openai = await startOpenAIChatMock({ t });
  const anthropic = await startAnthropicMock({ t });
  const dir = makeTempDir();
  const config = gatewayConfig({
    providers: [
      openaiProvider('oai', openai.baseUrl(), { apis: ['chat', 'responses'] }),  // /v1/responses passes through
      { name: 'anth', type: 'anthropic', base_url: anthropic.baseUrl(), api_key: 'sk-ant-test', timeouts: { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' } },
    ],
    models: [
      { name: 'gpt-small', provider: 'oai', upstream_model: 'gpt-upstream' },
      { name: 'claude', provider: 'anth', upstream_model: 'claude-upstream' },
    ],
  });
  config.access_log = { enabled: true };
  config.usage = { spill_dir: join(dir, 'spill'), sinks: [{ name: 'file', type: 'file', path: join(dir, 'usage.jsonl') }] };
  if (admin) config.admin = adminSection();
  writeFileSync(join(dir, 'gateway.yaml'), toYaml(config));
  writeFileSync(join(dir, 'prompts.yaml'), TEMPLATES);
  const started = admin ? await startWithAdmin(t, null, { args: ['--config', dir] }) : { gw: await startTahua({ t, args: ['--config', dir] }) };
  return { ...started, openai, anthropic, usageFile: join(dir, 'usage.jsonl') };
}

const records = (file) => {
  try {
    return readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
  } catch {
    return [];
  }
};

describe('prompt templates', () => {
  it('a chat request names a template: rendered before routing, defaults applied, the prompt field not forwarded, the version recorded', async (t) => {
    const { gw, openai, usageFile } = await start(t);
    const r = await post(gw.url, '/v1/chat/completions', {
      prompt: { id: 'support-answer', version: '1', variables: { customer: 'Acme', max_items: 3 } },
      messages: [{ role: 'user', content: 'My {{customer}} order is late.' }],
    });
    assert.equal(r.status, 200, r.text);
    const seen = openai.requests.at(-1).body;
    assert.equal(seen.model, 'gpt-upstream', "the template's default model, routed");
    assert.deepEqual(seen.messages, [
      { role: 'system', content: 'You answer for Acme (free tier), in at most 3 items.' },
      { role: 'user', content: 'Hello from Acme.' },
      { role: 'user', content: 'My {{customer}} order is late.' },  // the client's own text is never a template
    ]);
    assert.equal(seen.temperature, 0.2);
    assert.equal(seen.max_tokens, 300);
    assert.equal(seen.prompt, undefined, 'no provider sees the prompt field');
    // The request's own model and parameters win over the template's defaults.
    await post(gw.url, '/v1/chat/completions', {
      model: 'gpt-small', temperature: 0.9,
      prompt: { id: 'support-answer', variables: { customer: 'Beta' } },
    });
    assert.equal(openai.requests.at(-1).body.temperature, 0.9);
    assert.deepEqual(openai.requests.at(-1).body.messages, [{ role: 'system', content: 'v2 for Beta.' }], 'no version: the latest (2)');
    // The older single-text shape still loads: one user message.
    await post(gw.url, '/v1/chat/completions', { model: 'gpt-small', prompt: { id: 'legacy', variables: { product: 'tahua' } } });
    assert.deepEqual(openai.requests.at(-1).body.messages, [{ role: 'user', content: 'Summarize for tahua.' }]);
    const lines = () => gw.accessLog().filter((l) => l.path === '/v1/chat/completions');
    await eventually(() => lines().length >= 3, { what: 'the access log lines' });
    assert.deepEqual(lines().map((l) => l.prompt), ['support-answer@1', 'support-answer@2', 'legacy@1']);
    await eventually(() => records(usageFile).length >= 3, { what: 'the usage records' });
    assert.deepEqual(records(usageFile).map((u) => u.prompt), ['support-answer@1', 'support-answer@2', 'legacy@1']);
  });

  it('a body nested deeper than 32 levels (the router takes 128) is rendered too, not sent on with its prompt field', async (t) => {
    const { gw, openai } = await start(t);
    let deep = 'x';
    for (let i = 0; i < 40; i += 1) deep = [deep];
    const r = await post(gw.url, '/v1/chat/completions', {
      model: 'gpt-small',
      prompt: { id: 'legacy', variables: { product: 'tahua' } },
      metadata_deep: deep,
    });
    assert.equal(r.status, 200, r.text);
    const seen = openai.requests.at(-1).body;
    assert.equal(seen.prompt, undefined, 'the prompt field rendered away');
    assert.deepEqual(seen.messages, [{ role: 'user', content: 'Summarize for tahua.' }]);
  });

  it('the official SDK: a Responses request with OpenAI\'s own prompt field, rendered by tahua', async (t) => {
    const { gw, openai } = await start(t);
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'sk-unused', maxRetries: 0 });
    const response = await client.responses.create({
      prompt: { id: 'support-answer', version: '1', variables: { customer: 'Acme', tier: 'pro' } },
      input: 'Where is my order?',
    });
    assert.equal(response.status, 'completed');
    const seen = openai.requests.at(-1);
    assert.equal(seen.path, '/v1/responses');
    assert.equal(seen.body.prompt, undefined);
    assert.equal(seen.body.model, 'gpt-upstream');
    assert.deepEqual(seen.body.input, [
      { role: 'system', content: 'You answer for Acme (pro tier), in at most  items.' },
      { role: 'user', content: 'Hello from Acme.' },
      { role: 'user', content: 'Where is my order?' },
    ]);
  });

  it('an Anthropic messages request: the system text goes to `system`', async (t) => {
    const { gw, anthropic } = await start(t);
    const r = await post(gw.url, '/v1/messages', {
      model: 'claude', max_tokens: 50, system: 'Be brief.',
      prompt: { id: 'support-answer', version: '1', variables: { customer: 'Acme' } },
      messages: [{ role: 'user', content: 'hi' }],
    }, { headers: { 'anthropic-version': '2023-06-01' } });
    assert.equal(r.status, 200, r.text);
    const seen = anthropic.requests.at(-1).body;
    assert.equal(seen.system, 'You answer for Acme (free tier), in at most  items.\n\nBe brief.');
    assert.deepEqual(seen.messages.map((m) => m.content), ['Hello from Acme.', 'hi']);
    assert.equal(seen.prompt, undefined);
  });

  it('missing, ill-typed and unknown variables are one 400 naming each; an unknown id is 404 prompt_not_found in both API shapes', async (t) => {
    const { gw, openai } = await start(t);
    const before = openai.requests.length;
    const bad = await post(gw.url, '/v1/chat/completions', {
      prompt: { id: 'support-answer', version: '1', variables: { tier: 'gold', max_items: 'three', colour: 'red' } },
    });
    expectError(bad, 400, 'invalid_prompt');
    assert.equal(bad.json.error.message,
      "Prompt support-answer@1: unknown variable 'colour'; missing variable 'customer'; variable 'tier' must be one of 'free', 'pro'; variable 'max_items' must be an integer, not a string.");
    expectError(await post(gw.url, '/v1/chat/completions', { prompt: 'support-answer' }), 400, 'invalid_prompt');
    const missing = await post(gw.url, '/v1/chat/completions', { prompt: { id: 'nope' } });
    expectError(missing, 404, 'prompt_not_found');
    assert.match(missing.json.error.message, /Prompt 'nope' not found/);
    expectError(await post(gw.url, '/v1/chat/completions', { prompt: { id: 'support-answer', version: '7' } }), 404, 'prompt_not_found');
    const anthropic = await post(gw.url, '/v1/messages', { model: 'claude', max_tokens: 5, prompt: { id: 'nope' }, messages: [] },
      { headers: { 'anthropic-version': '2023-06-01' } });
    assert.equal(anthropic.status, 404);
    assert.equal(anthropic.json.type, 'error');
    assert.equal(anthropic.json.error.type, 'not_found_error');
    assert.equal(openai.requests.length, before, 'nothing reached a provider');
  });

  it('templates change through the admin API without a restart; a broken one is refused naming the field', async (t) => {
    const { gw, admin, openai } = await start(t, { admin: true });
    const put = await admin('PUT', '/admin/v1/resources/PromptTemplate/support-answer@3', {
      json: { model: 'gpt-small', variables: { customer: { type: 'string' } }, messages: [{ role: 'system', content: 'v3 for {{customer}}.' }] },
    });
    assert.equal(put.status, 200, put.text);
    await eventually(async () => {
      await post(gw.url, '/v1/chat/completions', { prompt: { id: 'support-answer', variables: { customer: 'C' } } });
      return openai.requests.at(-1).body.messages[0].content === 'v3 for C.';
    }, { what: 'version 3 as the latest' });
    const broken = await admin('PUT', '/admin/v1/resources/PromptTemplate/other', {
      json: { messages: [{ role: 'user', content: 'Hi {{who}}' }] },
    });
    assert.equal(broken.status, 400);
    assert.match(broken.json.error.message, /PromptTemplate\/other\.spec\.messages\[0\]\.content: \{\{who\}\} names no declared variable/);
    // A version the config declares is the one that renders: a stored one is refused.
    const shadowed = await admin('PUT', '/admin/v1/resources/PromptTemplate/support-answer@2', {
      json: { model: 'gpt-small', variables: { customer: { type: 'string' } }, messages: [{ role: 'system', content: 'not v2' }] },
    });
    assert.equal(shadowed.status, 409, shadowed.text);
    assert.equal(shadowed.json.error.code, 'declared_in_config');
    // Numbers render as a person writes them (not 5E-1).
    const numeric = await admin('PUT', '/admin/v1/resources/PromptTemplate/ratio@1', {
      json: { model: 'gpt-small', variables: { r: { type: 'number' } }, messages: [{ role: 'user', content: 'r={{r}}' }] },
    });
    assert.equal(numeric.status, 200, numeric.text);
    for (const [r, text] of [[0.5, 'r=0.5'], [1234.5, 'r=1234.5'], [3, 'r=3'], [1e-7, 'r=1e-07']]) {
      await eventually(async () => {
        const res = await post(gw.url, '/v1/chat/completions', { prompt: { id: 'ratio', variables: { r } } });
        return res.status === 200 && openai.requests.at(-1).body.messages[0].content === text;
      }, { what: `${r} rendered as ${text}` });
    }
    assert.equal((await admin('DELETE', '/admin/v1/resources/PromptTemplate/support-answer@3')).status, 200);
    await eventually(async () => {
      await post(gw.url, '/v1/chat/completions', { prompt: { id: 'support-answer', variables: { customer: 'C' } } });
      return openai.requests.at(-1).body.messages[0].content === 'v2 for C.';
    }, { what: 'back to version 2' });
  });
});

describe('prompt templates: the guide (docs/prompt-templates.md)', () => {
  it("the guide's PromptTemplate and its curl request render as described", async (t) => {
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'prompt-templates.md'), 'utf8');
    assert.ok(guide.includes('\n## Using it\n'), 'the page has its guide');
    const section = guide.slice(guide.indexOf('\n## Using it\n'));
    const resource = /```yaml\n([\s\S]*?)```/.exec(section)[1];
    const curl = /```bash\n([\s\S]*?)```/.exec(section)[1];
    const body = JSON.parse(/-d '([\s\S]*?)'/.exec(curl)[1]);
    assert.match(resource, /kind: PromptTemplate/);
    const openai = await startOpenAIChatMock({ t });
    const dir = makeTempDir();
    const config = gatewayConfig({
      providers: [openaiProvider('oai', openai.baseUrl())],
      models: [{ name: 'gpt-4o-mini', provider: 'oai', upstream_model: 'gpt-upstream' }],
    });
    writeFileSync(join(dir, 'gateway.yaml'), toYaml(config));
    writeFileSync(join(dir, 'prompt.yaml'), resource);
    const gw = await startTahua({ t, args: ['--config', dir] });
    const r = await post(gw.url, '/v1/responses', body);
    assert.equal(r.status, 200, r.text);
    // The provider lists no `responses` (the default): the rendered request reaches the
    // server as a chat completion.
    assert.equal(openai.requests.at(-1).path, '/v1/chat/completions');
    const seen = openai.requests.at(-1).body;
    assert.equal(seen.model, 'gpt-upstream');
    assert.equal(seen.temperature, 0.2);
    assert.deepEqual(seen.messages, [
      { role: 'system', content: 'You answer for Acme (free tier).' },
      { role: 'user', content: 'Where is my order?' },
    ]);
  });
});
