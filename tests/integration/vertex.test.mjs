// The `vertex` provider (Google Cloud Vertex AI) end to end, driven by the official
// `openai` and `@anthropic-ai/sdk` clients: Gemini models through generateContent,
// streamGenerateContent?alt=sse and predict (embeddings), Claude models through
// rawPredict / streamRawPredict, every call carrying an OAuth2 access token that the
// gateway got for a service account (its RS256 assertion verified by the mock token
// endpoint with the account's public key) or from the metadata server. Then the token's
// life: a refresh before it expires, a failed refresh that keeps the old token until it
// expires (then the deployment fails over), the bounded wait for a first token that does
// not come, and the config errors a credentials file can cause. Every wait is on an
// event (a mock's, or a gateway log line), never a sleep.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { REPO_ROOT, checkConfig, gatewayConfig, startTahua, writeConfig } from './lib/tahua.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { makeTempDir } from './lib/util.mjs';
import { TOOL_ARGS, USAGE, replyText } from './lib/vendor_mocks.mjs';
import {
  VERTEX_ANTHROPIC_VERSION,
  embeddingValues,
  makeServiceAccount,
  startMetadataServer,
  startTokenServer,
  startVertexMock,
} from './lib/vertex_mocks.mjs';

const PROJECT = 'my-project';
const LOCATION = 'us-east5';
const TIMEOUTS = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };
const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: { type: 'object', properties: { location: { type: 'string' }, unit: { type: 'string' } }, required: ['location'] },
  },
};

// The environment a test gateway starts in: no Google credentials of the machine's.
function cleanEnv(extra = {}) {
  return { GOOGLE_APPLICATION_CREDENTIALS: undefined, GCE_METADATA_HOST: undefined, HOME: makeTempDir('tahua-home-'), ...extra };
}

function vertexProvider(name, vertex, gcp, extra = {}) {
  return { name, type: 'vertex', base_url: vertex.baseUrl(), gcp: { project: PROJECT, location: LOCATION, ...gcp }, timeouts: TIMEOUTS, ...extra };
}

/** A token endpoint, its service account (credentials file) and Vertex accepting its tokens. */
async function startGoogle(t, { lifetimeS = 3600 } = {}) {
  const tokens = await startTokenServer({ t, lifetimeS });
  tokens.account = makeServiceAccount({ projectId: PROJECT, tokenUri: tokens.url });
  const vertex = await startVertexMock({ t, project: PROJECT, location: LOCATION, isValid: tokens.isValid });
  return { tokens, vertex, account: tokens.account };
}

/** Resolves with the gateway's log lines of `msg` once there are `count` of them matching `pred`. */
function logLines(gw, msg, { count = 1, pred = () => true, timeout = 15_000 } = {}) {
  return gw.stderr.waitUntil(() => {
    const lines = gw.stderr.json().filter((l) => l.msg === msg && pred(l));
    return lines.length >= count && lines;
  }, timeout, `${count} "${msg}" log line(s)`);
}

/** The middle of a PEM key: a piece no log or answer may contain. */
function keyPieces(pem) {
  const body = pem.split('\n').filter((l) => l && !l.startsWith('-----'));
  return [body[1], body[Math.floor(body.length / 2)], 'PRIVATE KEY'];
}

describe('vertex: a service account, both publishers, every client API', () => {
  it('chat, streams and a tool call via Gemini; messages via Claude; embeddings; one token for two providers; no key anywhere', async (t) => {
    const { tokens, vertex, account } = await startGoogle(t);
    const config = gatewayConfig({
      providers: [
        vertexProvider('vertex', vertex, { credentials_file: account.file }),
        // The same credential: one token cache entry, one token fetched for both.
        vertexProvider('vertex-copy', vertex, { credentials_file: account.file }),
        // A location the project does not have (the mock refuses it in Google's shape).
        vertexProvider('vertex-eu', vertex, { credentials_file: account.file, location: 'europe-west1' }),
      ],
      models: [
        { name: 'gemini-vertex', provider: 'vertex', upstream_model: 'gemini-2.5-flash' },
        { name: 'claude-vertex', provider: 'vertex-copy', upstream_model: 'claude-sonnet-4-5@20250929' },
        { name: 'claude-explicit', provider: 'vertex', upstream_model: 'publishers/anthropic/models/claude-haiku-4-5@20251001' },
        { name: 'embed-vertex', provider: 'vertex', upstream_model: 'gemini-embedding-001' },
        { name: 'claude-elsewhere', provider: 'vertex-eu', upstream_model: 'claude-sonnet-4-5@20250929' },
      ],
    });
    config.admin = adminSection();
    const { gw, admin } = await startWithAdmin(t, config, { env: cleanEnv() });
    await logLines(gw, 'cloud token ready');
    assert.equal(tokens.verified, 1, 'one assertion, verified, for the credential both providers use');
    assert.deepEqual(tokens.refusals, []);
    const [token] = [...tokens.issued.keys()];

    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'sk-client', maxRetries: 0 });
    const base = `/v1/projects/${PROJECT}/locations/${LOCATION}/publishers`;

    // Chat, not streamed: Gemini's generateContent.
    const chat = await openai.chat.completions.create({ model: 'gemini-vertex', messages: [{ role: 'user', content: 'Hi Vertex' }] });
    assert.equal(chat.choices[0].message.content, replyText('Vertex Gemini', 'Hi Vertex'));
    assert.equal(chat.usage.prompt_tokens, USAGE.input);
    assert.equal(chat.usage.completion_tokens, USAGE.output);
    let rec = vertex.requests.at(-1);
    assert.equal(rec.path, `${base}/google/models/gemini-2.5-flash:generateContent`);
    assert.equal(rec.bearer, token);
    assert.equal(rec.headers['x-goog-api-key'], undefined);
    assert.ok(!JSON.stringify(rec.headers).includes('sk-client'), 'the client\'s key is not forwarded');

    // Streamed: streamGenerateContent?alt=sse.
    const stream = await openai.chat.completions.create({
      model: 'gemini-vertex',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'Stream it' }],
    });
    let text = '';
    let usage;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, replyText('Vertex Gemini', 'Stream it'));
    assert.equal(usage.completion_tokens, USAGE.output);
    rec = vertex.requests.at(-1);
    assert.equal(rec.path, `${base}/google/models/gemini-2.5-flash:streamGenerateContent`);
    assert.equal(rec.query.get('alt'), 'sse');

    // A tool call.
    const tool = await openai.chat.completions.create({
      model: 'gemini-vertex',
      tools: [WEATHER],
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
    });
    const [call] = tool.choices[0].message.tool_calls;
    assert.equal(tool.choices[0].finish_reason, 'tool_calls');
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.function.arguments), TOOL_ARGS);
    assert.deepEqual(vertex.requests.at(-1).body.tools[0].functionDeclarations[0].name, 'get_weather');

    // Messages, streamed, to Claude on Vertex: passed through as streamRawPredict, the
    // model in the path, Vertex's anthropic_version in the body.
    const anthropic = new Anthropic({ baseURL: gw.url, apiKey: 'sk-client', maxRetries: 0 });
    const final = await anthropic.messages
      .stream({ model: 'claude-vertex', max_tokens: 64, messages: [{ role: 'user', content: 'Hello Claude' }] })
      .finalMessage();
    assert.deepEqual(final.content, [{ type: 'text', text: replyText('Vertex Claude', 'Hello Claude') }]);
    assert.equal(final.stop_reason, 'end_turn');
    assert.equal(final.usage.output_tokens, USAGE.output);
    rec = vertex.requests.at(-1);
    assert.equal(rec.path, `${base}/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict`);
    assert.equal(rec.body.anthropic_version, VERTEX_ANTHROPIC_VERSION);
    assert.equal(rec.body.model, undefined);
    assert.equal(rec.body.stream, true);
    assert.equal(rec.bearer, token, 'the second provider uses the same credential\'s token');

    // Chat translated to Claude (rawPredict), the publisher named outright.
    const viaChat = await openai.chat.completions.create({ model: 'claude-explicit', messages: [{ role: 'user', content: 'Translate me' }] });
    assert.equal(viaChat.choices[0].message.content, replyText('Vertex Claude', 'Translate me'));
    rec = vertex.requests.at(-1);
    assert.equal(rec.path, `${base}/anthropic/models/claude-haiku-4-5@20251001:rawPredict`);
    assert.equal(rec.body.model, undefined);
    assert.equal(rec.body.anthropic_version, VERTEX_ANTHROPIC_VERSION);

    // Embeddings through predict: the SDK asks for base64 and decodes it; floats on request.
    const emb = await openai.embeddings.create({ model: 'embed-vertex', input: ['hello vertex world', 'again'] });
    assert.equal(emb.data.length, 2);
    assert.deepEqual(emb.data[0].embedding, embeddingValues(0));
    assert.deepEqual(emb.data[1].embedding, embeddingValues(1));
    assert.equal(emb.usage.prompt_tokens, 4);
    rec = vertex.requests.at(-1);
    assert.equal(rec.path, `${base}/google/models/gemini-embedding-001:predict`);
    assert.deepEqual(rec.body, { instances: [{ content: 'hello vertex world' }, { content: 'again' }] });
    const floats = await openai.embeddings.create({ model: 'embed-vertex', input: 'one', dimensions: 3, encoding_format: 'float' });
    assert.deepEqual(floats.data[0].embedding, embeddingValues(0, 3));
    assert.deepEqual(vertex.requests.at(-1).body.parameters, { outputDimensionality: 3 });
    await assert.rejects(openai.embeddings.create({ model: 'embed-vertex', input: [[1, 2, 3]] }), (err) => err.status === 400 && /token arrays/.test(err.message));

    // A refusal of Vertex's own (Google's error shape) reaches an Anthropic client in Anthropic's.
    await assert.rejects(
      anthropic.messages.create({ model: 'claude-elsewhere', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }),
      (err) => {
        assert.equal(err.status, 403);
        assert.equal(err.error?.type, 'error');
        assert.equal(err.error?.error?.type, 'permission_error');
        assert.match(err.error?.error?.message ?? '', /Permission denied on resource project my-project location europe-west1/);
        return true;
      },
    );

    // The private key reached no log line and no admin answer; nor did the token.
    const cfg = await admin('GET', '/admin/v1/config');
    assert.equal(cfg.status, 200);
    const providers = cfg.json.providers.filter((p) => p.type === 'vertex');
    assert.equal(providers.length, 3);
    for (const answer of [cfg.text, (await admin('GET', '/admin/v1/deployments')).text, gw.output()]) {
      for (const piece of keyPieces(account.privateKey)) assert.ok(!answer.includes(piece), `"${piece}" leaked`);
      assert.ok(!answer.includes(token), 'the access token leaked');
    }
  });

  it('runs the Vertex AI example of docs/providers.md', async (t) => {
    const { vertex, account } = await startGoogle(t);
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'providers.md'), 'utf8');
    const example = [...guide.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.startsWith('# Vertex AI example'));
    assert.ok(example, 'the guide has the Vertex AI example');
    const config = example
      .replace('port: 8080', 'port: 0')
      .replace('/var/run/secrets/vertex/service-account.json', account.file)
      .replace('    type: vertex\n', `    type: vertex\n    base_url: ${vertex.baseUrl()}\n`);
    const gw = await startTahua({ config, t, listenerCount: 1, env: cleanEnv() });
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const chat = await openai.chat.completions.create({ model: 'gemini-flash', messages: [{ role: 'user', content: 'docs' }] });
    assert.equal(chat.choices[0].message.content, replyText('Vertex Gemini', 'docs'));
    const anthropic = new Anthropic({ baseURL: gw.url, apiKey: 'x', maxRetries: 0 });
    const msg = await anthropic.messages.create({ model: 'claude-sonnet', max_tokens: 32, messages: [{ role: 'user', content: 'docs' }] });
    assert.equal(msg.content[0].text, replyText('Vertex Claude', 'docs'));
    assert.equal(vertex.requests.at(-1).call, 'rawPredict');
    const emb = await openai.embeddings.create({ model: 'embeddings', input: 'docs' });
    assert.deepEqual(emb.data[0].embedding, embeddingValues(0));
  });

  it('the metadata server: Metadata-Flavor: Google, at GCE_METADATA_HOST', async (t) => {
    const md = await startMetadataServer({ t });
    const vertex = await startVertexMock({ t, project: PROJECT, location: 'global', isValid: md.isValid });
    const config = gatewayConfig({
      providers: [vertexProvider('vertex', vertex, { location: 'global' })],
      models: [{ name: 'gemini', provider: 'vertex', upstream_model: 'gemini-2.5-pro' }],
    });
    const tokenArrived = once(md, 'token');
    const gw = await startTahua({ t, config, env: cleanEnv({ GCE_METADATA_HOST: md.host }) });
    const [{ token }] = await tokenArrived;
    await logLines(gw, 'cloud token ready', { pred: (l) => l.credential === `the metadata server (${md.host})` });
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const chat = await openai.chat.completions.create({ model: 'gemini', messages: [{ role: 'user', content: 'From GKE' }] });
    assert.equal(chat.choices[0].message.content, replyText('Vertex Gemini', 'From GKE'));
    assert.equal(vertex.requests.at(-1).bearer, token);
    assert.equal(vertex.requests.at(-1).path, `/v1/projects/${PROJECT}/locations/global/publishers/google/models/gemini-2.5-pro:generateContent`);
    assert.deepEqual(md.requests.map((r) => r.flavor), ['Google']);
  });
});

describe('vertex: the token\'s life', () => {
  it('refreshes before expiry; a failed refresh keeps the old token until it expires, then the deployment fails over', async (t) => {
    const { tokens, vertex, account } = await startGoogle(t, { lifetimeS: 4 });
    const config = gatewayConfig({
      providers: [vertexProvider('vertex', vertex, { credentials_file: account.file }), { name: 'local', type: 'mock', timeouts: TIMEOUTS }],
      models: [
        { name: 'gemini', provider: 'vertex', upstream_model: 'gemini-2.5-flash' },
        { name: 'gemini-with-backup', provider: 'vertex', upstream_model: 'gemini-2.5-flash', fallbacks: ['backup'] },
        { name: 'backup', provider: 'local' },
      ],
    });
    const gw = await startTahua({ t, config, env: cleanEnv() });
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const ask = (model = 'gemini') => openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'tick' }] });

    await logLines(gw, 'cloud token ready');
    await ask();
    assert.equal(vertex.requests.at(-1).bearer, 'ya29.mock-1');

    // Refreshed at half its 4 s life, off the request path.
    await logLines(gw, 'cloud token refreshed');
    await ask();
    assert.equal(vertex.requests.at(-1).bearer, 'ya29.mock-2');
    assert.deepEqual(tokens.refusals, []);

    // The token endpoint fails: the next refresh is refused, the token stays in use.
    tokens.mode = 'fail';
    const [failed] = await logLines(gw, 'cloud token fetch failed');
    assert.match(failed.error, /token endpoint .* answered HTTP 500: internal_failure: the token service is failing/);
    assert.ok(failed.keeps_token_for_s >= 0, JSON.stringify(failed));
    await ask();
    assert.equal(vertex.requests.at(-1).bearer, 'ya29.mock-2', 'the old token, still valid');

    // Once it has expired: a 503 at once, saying why; a model with a fallback fails over.
    await logLines(gw, 'cloud token fetch failed', { pred: (l) => l.token === 'expired' });
    const sent = vertex.requests.length;
    await assert.rejects(ask(), (err) => {
      assert.equal(err.status, 503);
      assert.match(err.message, /provider 'vertex' has no access token: the token of service account .* expired and could not be refreshed: the token endpoint .* answered HTTP 500/);
      return true;
    });
    const res = await openai.chat.completions.create({ model: 'gemini-with-backup', messages: [{ role: 'user', content: 'tick' }] }).withResponse();
    assert.equal(res.response.headers.get('x-tahua-model'), 'backup');
    assert.equal(vertex.requests.length, sent, 'no request went to Vertex without a token');

    // The endpoint is back: the next retry brings a token.
    tokens.mode = 'ok';
    await logLines(gw, 'cloud token refreshed', { count: 2 });
    await ask();
    assert.equal(vertex.requests.at(-1).bearer, [...tokens.issued.keys()].at(-1));
    assert.ok(tokens.verified >= 3);
  });

  it('no first token: requests wait token_wait, then 503 naming the reason; a waiting request proceeds when it arrives', async (t) => {
    const { tokens, vertex, account } = await startGoogle(t);
    tokens.mode = 'fail';
    const config = gatewayConfig({
      providers: [
        vertexProvider('vertex', vertex, { credentials_file: account.file }, { token_wait: '1s' }),
        vertexProvider('patient', vertex, { credentials_file: account.file }, { token_wait: '20s' }),
      ],
      models: [
        { name: 'gemini', provider: 'vertex', upstream_model: 'gemini-2.5-flash' },
        { name: 'gemini-patient', provider: 'patient', upstream_model: 'gemini-2.5-flash' },
      ],
    });
    const gw = await startTahua({ t, config, env: cleanEnv() });
    await once(tokens, 'refused');
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const started = Date.now();
    await assert.rejects(
      openai.chat.completions.create({ model: 'gemini', messages: [{ role: 'user', content: 'hi' }] }),
      (err) => {
        assert.equal(err.status, 503);
        assert.match(err.message, /provider 'vertex' has no access token yet \(waited 1s for service account tahua-test@my-project\.iam\.gserviceaccount\.com \(service-account\.json\)\): the token endpoint http:\/\/127\.0\.0\.1:\d+\/token answered HTTP 500/);
        return true;
      },
    );
    const waited = Date.now() - started;
    assert.ok(waited >= 900 && waited < 5000, `waited ${waited} ms`);
    assert.equal(vertex.requests.length, 0);

    // A request that waits longer is woken by the token's arrival.
    const pending = openai.chat.completions.create({ model: 'gemini-patient', messages: [{ role: 'user', content: 'patience' }] });
    await once(tokens, 'refused');  // a retry after the request went out (they are a second or more apart)
    tokens.mode = 'ok';
    const chat = await pending;
    assert.equal(chat.choices[0].message.content, replyText('Vertex Gemini', 'patience'));
    assert.equal(vertex.requests.at(-1).bearer, 'ya29.mock-1');
  });
});

describe('vertex: config errors', () => {
  function configWith(gcp) {
    return writeConfig(gatewayConfig({
      providers: [{ name: 'vertex', type: 'vertex', gcp: { project: PROJECT, location: LOCATION, ...gcp } }],
      models: [{ name: 'gemini', provider: 'vertex' }],
    }));
  }

  it('a credentials file of an unknown type names the config file, the field, the credentials file and the type', () => {
    const file = join(makeTempDir('tahua-vertex-'), 'creds.json');
    writeFileSync(file, JSON.stringify({ type: 'impersonated_service_account', source_credentials: { refresh_token: 'r-secret' } }));
    const configFile = configWith({ credentials_file: file });
    const r = checkConfig(configFile);
    assert.equal(r.status, 1, r.stderr);
    assert.ok(r.stderr.includes(configFile), r.stderr);
    assert.match(r.stderr, /:\d+:\d+: providers\[0\]\.gcp\.credentials_file: /);
    assert.ok(r.stderr.includes(`${file}: type "impersonated_service_account" is not supported (service_account, authorized_user, external_account)`), r.stderr);
    assert.ok(!r.stderr.includes('r-secret'));
  });

  it('a service account whose key does not read fails the load without quoting the key', () => {
    const account = makeServiceAccount({ tokenUri: 'http://127.0.0.1:9/token' });
    const broken = { ...account.json, private_key: account.privateKey.slice(0, 400) + '\n-----END PRIVATE KEY-----\n' };
    writeFileSync(account.file, JSON.stringify(broken));
    const r = checkConfig(configWith({ credentials_file: account.file }));
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /providers\[0\]\.gcp\.credentials_file: .*service-account\.json: service_account's private_key: the private key cannot be read/);
    for (const piece of keyPieces(account.privateKey).slice(0, 2)) assert.ok(!r.stderr.includes(piece), 'the key is quoted');
  });

  it('credentials_file and token_file together, an api key, a missing location: each refused by name', () => {
    let r = checkConfig(configWith({ credentials_file: '/x.json', token_file: '/t' }));
    assert.match(r.stderr, /providers\[0\]\.gcp\.token_file: set credentials_file or token_file, not both/);
    r = checkConfig(writeConfig(gatewayConfig({
      providers: [{ name: 'vertex', type: 'vertex', api_key: 'k', gcp: { project: PROJECT, location: LOCATION, token_file: '/t' } }],
      models: [{ name: 'gemini', provider: 'vertex' }],
    })));
    assert.match(r.stderr, /providers\[0\]\.api_key: vertex uses Google credentials/);
    r = checkConfig(writeConfig(gatewayConfig({
      providers: [{ name: 'vertex', type: 'vertex', gcp: { project: PROJECT, token_file: '/t' } }],
      models: [{ name: 'gemini', provider: 'vertex' }],
    })));
    assert.match(r.stderr, /providers\[0\]\.gcp\.location: required/);
  });
});
