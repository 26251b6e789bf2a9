// The `azure-openai` provider with Microsoft Entra ID end to end, driven by the official
// `openai` SDK against a mock Azure OpenAI resource that accepts only
// `Authorization: Bearer <a token the mock Entra issued>` (an api-key is refused, as by
// a resource with disableLocalAuth): a client secret, a certificate (the client
// assertion's RS256 signature verified with the certificate's public key, its
// x5t#S256, aud, iss/sub, jti and exp checked), workload identity federation (a token
// file that changes between refreshes) and a managed identity (the instance metadata
// service and App Service's endpoint). Then the token's life: a refresh, a refusal that
// keeps the old token until it expires (then the deployment fails over), the bounded
// wait for a first token that does not come, and the config errors. Beyond the request
// path, the batch poller's calls and the realtime WebSocket handshake carry the token
// too (the generic mock upstream behind the same bearer check). Every wait is on an
// event (a mock's, or a gateway log line), never a sleep.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import WebSocket from 'ws';
import { REPO_ROOT, checkConfig, gatewayConfig, startTahua, writeConfig } from './lib/tahua.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { closedPort, eventually, makeTempDir } from './lib/util.mjs';
import { USAGE, replyText } from './lib/vendor_mocks.mjs';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import {
  CLIENT_ID,
  TENANT,
  makeAppCertificate,
  requireEntra,
  startAzureOpenAIMock,
  startEntraServer,
  startManagedIdentityServer,
} from './lib/azure_entra_mocks.mjs';

const API_VERSION = '2024-10-21';
const TIMEOUTS = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };
const SECRET = 'Qx8~entra-client-secret-value-0123456789';
const AZURE_VARS = ['AZURE_CLIENT_SECRET', 'AZURE_CLIENT_CERTIFICATE_PATH', 'AZURE_FEDERATED_TOKEN_FILE', 'AZURE_CLIENT_ID',
  'AZURE_TENANT_ID', 'AZURE_AUTHORITY_HOST', 'AZURE_POD_IDENTITY_AUTHORITY_HOST', 'IDENTITY_ENDPOINT', 'IDENTITY_HEADER'];

// The environment a test gateway starts in: no Azure credentials of the machine's.
function cleanEnv(extra = {}) {
  return { ...Object.fromEntries(AZURE_VARS.map((v) => [v, undefined])), ...extra };
}

function azureProvider(name, resource, azure, extra = {}) {
  return { name, type: 'azure-openai', base_url: resource.baseUrl(), api_version: API_VERSION, azure, timeouts: TIMEOUTS, ...extra };
}

/** Resolves with the gateway's log lines of `msg` once there are `count` of them matching `pred`. */
function logLines(gw, msg, { count = 1, pred = () => true, timeout = 15_000 } = {}) {
  return gw.stderr.waitUntil(() => {
    const lines = gw.stderr.json().filter((l) => l.msg === msg && pred(l));
    return lines.length >= count && lines;
  }, timeout, `${count} "${msg}" log line(s)`);
}

/** Lines from the middle of a PEM key: pieces no log or answer may contain. */
function keyPieces(pem) {
  const body = pem.split('\n').filter((l) => l && !l.startsWith('-----'));
  return [body[1], body[Math.floor(body.length / 2)], 'PRIVATE KEY'];
}

const ask = (openai, model, content = 'hi') => openai.chat.completions.create({ model, messages: [{ role: 'user', content }] });

describe('azure-openai with Entra ID: each credential, chat and streams, no secret anywhere', () => {
  it('a client secret: chat and a stream with the bearer token, one token for two providers, never an api-key', async (t) => {
    const entra = await startEntraServer({ t });
    entra.secret = SECRET;
    const resource = await startAzureOpenAIMock({ t, isValid: entra.isValid });
    const app = { tenant_id: TENANT, client_id: CLIENT_ID, client_secret_env: 'TEST_ENTRA_SECRET', authority_host: entra.authority };
    const config = gatewayConfig({
      providers: [azureProvider('azure', resource, app), azureProvider('azure-copy', resource, app)],
      models: [
        { name: 'gpt-4o', provider: 'azure', upstream_model: 'gpt4o-deployment' },
        { name: 'gpt-4o-copy', provider: 'azure-copy', upstream_model: 'gpt4o-deployment' },
      ],
    });
    config.admin = adminSection();
    const { gw, admin } = await startWithAdmin(t, config, { env: cleanEnv({ TEST_ENTRA_SECRET: SECRET }) });
    const [ready] = await logLines(gw, 'cloud token ready');
    assert.equal(ready.credential, `Entra ID app ${CLIENT_ID} (tenant ${TENANT}, client secret)`);
    assert.equal(entra.verified.length, 1, 'one token for the credential both providers use');
    const form = entra.forms[0];
    assert.equal(form.get('grant_type'), 'client_credentials');
    assert.equal(form.get('scope'), 'https://cognitiveservices.azure.com/.default');
    assert.equal(form.get('client_secret'), SECRET);
    const [token] = [...entra.issued.keys()];

    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'sk-client', maxRetries: 0 });
    const chat = await ask(openai, 'gpt-4o', 'Hi Azure');
    assert.equal(chat.choices[0].message.content, replyText('Azure OpenAI', 'Hi Azure'));
    assert.equal(chat.usage.completion_tokens, USAGE.output);
    let rec = resource.requests.at(-1);
    assert.equal(rec.path, '/openai/deployments/gpt4o-deployment/chat/completions');
    assert.equal(rec.query.get('api-version'), API_VERSION);
    assert.equal(rec.bearer, token);
    assert.equal(rec.apiKey, null, 'no api-key header');
    assert.ok(!JSON.stringify(rec.headers).includes('sk-client'), 'the client\'s key is not forwarded');

    const stream = await openai.chat.completions.create({
      model: 'gpt-4o-copy', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'Stream it' }],
    });
    let text = '';
    let usage;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, replyText('Azure OpenAI', 'Stream it'));
    assert.equal(usage.completion_tokens, USAGE.output);
    rec = resource.requests.at(-1);
    assert.equal(rec.bearer, token, 'the second provider uses the same token');
    assert.equal(rec.body.stream, true);
    assert.ok(resource.requests.every((r) => r.apiKey === null));

    // The secret and the token reached no log line and no admin answer.
    const cfg = await admin('GET', '/admin/v1/config');
    assert.equal(cfg.status, 200);
    assert.deepEqual(cfg.json.providers.map((p) => [p.name, p.type, p.usable]), [['azure', 'azure-openai', true], ['azure-copy', 'azure-openai', true]]);
    for (const answer of [cfg.text, (await admin('GET', '/admin/v1/deployments')).text, gw.output()]) {
      assert.ok(!answer.includes(SECRET), 'the client secret leaked');
      assert.ok(!answer.includes(token), 'the access token leaked');
    }
  });

  it('a certificate: the client assertion verified (RS256, x5t#S256, aud, iss, sub, jti, exp); refreshed with a new assertion', async (t) => {
    const entra = await startEntraServer({ t, lifetimeS: 4, expiresAsString: true });
    entra.certificate = makeAppCertificate({ keyFirst: false });
    const resource = await startAzureOpenAIMock({ t, isValid: entra.isValid });
    const config = gatewayConfig({
      providers: [azureProvider('azure', resource, { tenant_id: TENANT, client_id: CLIENT_ID, certificate_file: entra.certificate.file, authority_host: `${entra.authority}/` })],
      models: [{ name: 'gpt-4o', provider: 'azure', upstream_model: 'gpt4o' }],
    });
    const gw = await startTahua({ t, config, env: cleanEnv() });
    const [ready] = await logLines(gw, 'cloud token ready');
    assert.equal(ready.credential, `Entra ID app ${CLIENT_ID} (tenant ${TENANT}, certificate app.pem)`);
    assert.ok(ready.expires_in_s <= 4, JSON.stringify(ready));
    const [first] = entra.verified;
    assert.equal(first.via, 'certificate');
    assert.equal(first.header['x5t#S256'], entra.certificate.x5tS256);
    assert.equal(first.claims.aud, entra.url);
    assert.equal(first.claims.iss, CLIENT_ID);
    assert.equal(first.claims.sub, CLIENT_ID);
    assert.ok(first.claims.exp - first.claims.iat <= 600);
    assert.deepEqual(entra.refusals, []);

    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
    await ask(openai, 'gpt-4o');
    assert.equal(resource.requests.at(-1).bearer, 'eyJ0eXAiOiJKV1Qi.entra-certificate-1');

    // Refreshed halfway through its 4 s life (expires_in given as text), off the request path.
    await logLines(gw, 'cloud token refreshed');
    assert.equal(entra.verified.length, 2);
    assert.notEqual(entra.verified[1].claims.jti, first.claims.jti, 'each assertion has its own jti');
    const chat = await ask(openai, 'gpt-4o', 'after refresh');
    assert.equal(chat.choices[0].message.content, replyText('Azure OpenAI', 'after refresh'));
    assert.equal(resource.requests.at(-1).bearer, 'eyJ0eXAiOiJKV1Qi.entra-certificate-2');
    for (const piece of keyPieces(entra.certificate.keyPem)) assert.ok(!gw.output().includes(piece), `"${piece}" leaked`);
  });

  it('workload identity from the environment (AKS): the token file is read again for each refresh', async (t) => {
    const entra = await startEntraServer({ t, lifetimeS: 4 });
    const resource = await startAzureOpenAIMock({ t, isValid: entra.isValid });
    const tokenFile = join(makeTempDir('tahua-entra-'), 'azure-identity-token');
    const projected = (n) => `eyJhbGciOiJSUzI1NiJ9.projected-service-account-token-${n}.c2lnbmF0dXJl`;
    writeFileSync(tokenFile, projected(1));
    entra.federatedToken = projected(1);
    const config = gatewayConfig({
      providers: [azureProvider('azure', resource, {})],
      models: [{ name: 'gpt-4o', provider: 'azure', upstream_model: 'gpt4o' }],
    });
    const gw = await startTahua({
      t, config,
      env: cleanEnv({ AZURE_FEDERATED_TOKEN_FILE: tokenFile, AZURE_CLIENT_ID: CLIENT_ID, AZURE_TENANT_ID: TENANT, AZURE_AUTHORITY_HOST: entra.authority }),
    });
    const [ready] = await logLines(gw, 'cloud token ready');
    assert.equal(ready.credential, `workload identity ${CLIENT_ID} (tenant ${TENANT}, ${tokenFile})`);
    assert.equal(entra.verified[0].assertion, projected(1));
    assert.equal(entra.forms[0].get('client_assertion_type'), 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer');

    // The kubelet rotates the file: the next refresh sends the new token.
    writeFileSync(tokenFile, `${projected(2)}\n`);
    entra.federatedToken = projected(2);
    await logLines(gw, 'cloud token refreshed');
    assert.equal(entra.verified[1].assertion, projected(2));
    assert.deepEqual(entra.refusals, []);
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const chat = await ask(openai, 'gpt-4o', 'from AKS');
    assert.equal(chat.choices[0].message.content, replyText('Azure OpenAI', 'from AKS'));
    assert.equal(resource.requests.at(-1).bearer, 'eyJ0eXAiOiJKV1Qi.entra-federated-2');
    assert.ok(!gw.output().includes(projected(2)), 'the federated token leaked');
  });

  it('a managed identity: the instance metadata service (a user-assigned identity), and App Service\'s IDENTITY_ENDPOINT', async (t) => {
    const md = await startManagedIdentityServer({ t });
    const resource = await startAzureOpenAIMock({ t, isValid: md.isValid });
    const userAssigned = '11111111-2222-4333-8444-555555555555';
    let config = gatewayConfig({
      providers: [azureProvider('azure', resource, { managed_identity: { client_id: userAssigned } })],
      models: [{ name: 'gpt-4o', provider: 'azure', upstream_model: 'gpt4o' }],
    });
    let gw = await startTahua({ t, config, env: cleanEnv({ AZURE_POD_IDENTITY_AUTHORITY_HOST: md.authority }) });
    let [ready] = await logLines(gw, 'cloud token ready');
    assert.equal(ready.credential, `managed identity ${userAssigned} (the instance metadata service ${md.authority}/metadata/identity/oauth2/token)`);
    assert.ok(ready.expires_in_s > 3500 && ready.expires_in_s <= 3600, JSON.stringify(ready));
    let [req] = md.requests;
    assert.equal(req.route, '/metadata/identity/oauth2/token');
    assert.equal(req.headers.metadata, 'true');
    assert.equal(req.query.get('resource'), 'https://cognitiveservices.azure.com');
    assert.equal(req.query.get('client_id'), userAssigned);
    const openai = () => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
    let chat = await ask(openai(), 'gpt-4o', 'from a VM');
    assert.equal(chat.choices[0].message.content, replyText('Azure OpenAI', 'from a VM'));
    assert.equal(resource.requests.at(-1).bearer, 'eyJ0eXAiOiJKV1Qi.mi-imds-1');
    await gw.stop();

    // App Service / Container Apps: IDENTITY_ENDPOINT and IDENTITY_HEADER, the system-assigned identity.
    config = gatewayConfig({
      providers: [azureProvider('azure', resource, { managed_identity: {} })],
      models: [{ name: 'gpt-4o', provider: 'azure', upstream_model: 'gpt4o' }],
    });
    gw = await startTahua({ t, config, env: cleanEnv({ IDENTITY_ENDPOINT: md.identityEndpoint, IDENTITY_HEADER: md.identityHeader }) });
    [ready] = await logLines(gw, 'cloud token ready');
    assert.equal(ready.credential, `managed identity (system-assigned) (IDENTITY_ENDPOINT ${md.identityEndpoint})`);
    req = md.requests.at(-1);
    assert.equal(req.route, '/msi/token');
    assert.equal(req.headers['x-identity-header'], md.identityHeader);
    assert.equal(req.query.get('client_id'), null);
    chat = await ask(openai(), 'gpt-4o', 'from App Service');
    assert.equal(chat.choices[0].message.content, replyText('Azure OpenAI', 'from App Service'));
    assert.equal(resource.requests.at(-1).bearer, 'eyJ0eXAiOiJKV1Qi.mi-app-service-2');
    assert.ok(!gw.output().includes(md.identityHeader), 'IDENTITY_HEADER leaked');
  });

  it('runs the Entra ID example of docs/providers.md', async (t) => {
    const entra = await startEntraServer({ t });
    entra.certificate = makeAppCertificate();
    const resource = await startAzureOpenAIMock({ t, isValid: entra.isValid });
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'providers.md'), 'utf8');
    const example = [...guide.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.startsWith('# Azure OpenAI with Entra ID example'));
    assert.ok(example, 'the guide has the Entra ID example');
    const config = example
      .replace('port: 8080', 'port: 0')
      .replace('https://my-resource.openai.azure.com/openai', resource.baseUrl())
      .replace('/var/run/secrets/azure/app.pem', entra.certificate.file)
      .replace('https://login.microsoftonline.com', entra.authority)
      .replaceAll('00000000-0000-0000-0000-000000000000', TENANT)
      .replaceAll('11111111-1111-1111-1111-111111111111', CLIENT_ID);
    const gw = await startTahua({ config, t, listenerCount: 1, env: cleanEnv() });
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const chat = await ask(openai, 'gpt-4o', 'docs');
    assert.equal(chat.choices[0].message.content, replyText('Azure OpenAI', 'docs'));
    assert.equal(resource.requests.at(-1).path, '/openai/deployments/my-gpt4o-deployment/chat/completions');
    assert.equal(entra.verified[0].via, 'certificate');
  });
});

describe('azure-openai with Entra ID: the token\'s life', () => {
  it('a refused refresh keeps the old token until it expires, then a 503 saying why and the fallback answers', async (t) => {
    const entra = await startEntraServer({ t, lifetimeS: 4 });
    entra.secret = SECRET;
    const resource = await startAzureOpenAIMock({ t, isValid: entra.isValid });
    const config = gatewayConfig({
      providers: [
        azureProvider('azure', resource, { tenant_id: TENANT, client_id: CLIENT_ID, client_secret_env: 'TEST_ENTRA_SECRET', authority_host: entra.authority }),
        { name: 'local', type: 'mock', timeouts: TIMEOUTS },
      ],
      models: [
        { name: 'gpt-4o', provider: 'azure', upstream_model: 'gpt4o' },
        { name: 'gpt-4o-with-backup', provider: 'azure', upstream_model: 'gpt4o', fallbacks: ['backup'] },
        { name: 'backup', provider: 'local' },
      ],
    });
    const gw = await startTahua({ t, config, env: cleanEnv({ TEST_ENTRA_SECRET: SECRET }) });
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
    await logLines(gw, 'cloud token ready');
    await ask(openai, 'gpt-4o');
    assert.equal(resource.requests.at(-1).bearer, 'eyJ0eXAiOiJKV1Qi.entra-secret-1');

    // Entra refuses the next refresh: the token stays in use while it is valid.
    entra.mode = 'refuse';
    const [failed] = await logLines(gw, 'cloud token fetch failed');
    assert.match(failed.error, /the Entra ID token endpoint http:\/\/127\.0\.0\.1:\d+\/[0-9a-f-]+\/oauth2\/v2\.0\/token answered HTTP 401: invalid_client: AADSTS7000215: Invalid client secret provided\./);
    assert.ok(!failed.error.includes('Trace ID'), 'only the description\'s first line');
    assert.ok(failed.keeps_token_for_s >= 0, JSON.stringify(failed));
    await ask(openai, 'gpt-4o');
    assert.equal(resource.requests.at(-1).bearer, 'eyJ0eXAiOiJKV1Qi.entra-secret-1', 'the old token, still valid');

    // Once it has expired: a 503 at once, saying why; a model with a fallback fails over.
    await logLines(gw, 'cloud token fetch failed', { pred: (l) => l.token === 'expired' });
    const sent = resource.requests.length;
    await assert.rejects(ask(openai, 'gpt-4o'), (err) => {
      assert.equal(err.status, 503);
      assert.match(err.message, /The azure-openai provider 'azure' has no access token: the token of Entra ID app .* expired and could not be refreshed: .*AADSTS7000215/);
      return true;
    });
    const res = await openai.chat.completions.create({ model: 'gpt-4o-with-backup', messages: [{ role: 'user', content: 'tick' }] }).withResponse();
    assert.equal(res.response.headers.get('x-tahua-model'), 'backup');
    assert.equal(resource.requests.length, sent, 'nothing went to Azure without a token');

    // Entra accepts again: the next retry brings a token.
    entra.mode = 'ok';
    await logLines(gw, 'cloud token refreshed');
    await ask(openai, 'gpt-4o');
    assert.equal(resource.requests.at(-1).bearer, [...entra.issued.keys()].at(-1));
    assert.ok(!gw.output().includes(SECRET), 'the client secret leaked');
  });

  it('no first token: requests wait token_wait, then 503 naming the reason (Entra\'s refusal, or an endpoint that is down)', async (t) => {
    const entra = await startEntraServer({ t });
    entra.secret = 'the-registered-secret';
    const resource = await startAzureOpenAIMock({ t, isValid: entra.isValid });
    const down = `http://127.0.0.1:${await closedPort()}`;
    const app = { tenant_id: TENANT, client_id: CLIENT_ID, client_secret_env: 'TEST_ENTRA_SECRET' };
    const config = gatewayConfig({
      providers: [
        azureProvider('azure', resource, { ...app, authority_host: entra.authority }, { token_wait: '1s' }),
        azureProvider('azure-down', resource, { ...app, authority_host: down }, { token_wait: '1s' }),
      ],
      models: [
        { name: 'gpt-4o', provider: 'azure', upstream_model: 'gpt4o' },
        { name: 'gpt-4o-down', provider: 'azure-down', upstream_model: 'gpt4o' },
      ],
    });
    const gw = await startTahua({ t, config, env: cleanEnv({ TEST_ENTRA_SECRET: SECRET }) });
    await once(entra, 'refused');
    await logLines(gw, 'cloud token fetch failed', { count: 2 });
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'x', maxRetries: 0 });
    let started = Date.now();
    await assert.rejects(ask(openai, 'gpt-4o'), (err) => {
      assert.equal(err.status, 503);
      assert.match(err.message, /provider 'azure' has no access token yet \(waited 1s for Entra ID app .*\): the Entra ID token endpoint .* answered HTTP 401: invalid_client: AADSTS7000215: Invalid client secret provided\./);
      assert.ok(!err.message.includes(SECRET));
      return true;
    });
    let waited = Date.now() - started;
    assert.ok(waited >= 900 && waited < 5000, `waited ${waited} ms`);
    started = Date.now();
    await assert.rejects(ask(openai, 'gpt-4o-down'), (err) => {
      assert.equal(err.status, 503);
      assert.match(err.message, /provider 'azure-down' has no access token yet \(waited 1s for .*\): the Entra ID token endpoint http:\/\/127\.0\.0\.1:\d+\/.* did not answer/);
      return true;
    });
    waited = Date.now() - started;
    assert.ok(waited >= 900 && waited < 5000, `waited ${waited} ms`);
    assert.equal(resource.requests.length, 0);
    assert.ok(!gw.output().includes(SECRET), 'the client secret leaked');
  });
});

describe('azure-openai with Entra ID: the batch poller and the Realtime API', () => {
  const KEY = 'tk-entra-batches-0123456789';
  const sha256 = (b) => createHash('sha256').update(b).digest('hex');
  const chatLine = (id, model) => ({ custom_id: id, method: 'POST', url: '/v1/chat/completions', body: { model, messages: [{ role: 'user', content: `hi ${id}` }] } });
  /** The generic mock upstream as an Entra-only Azure resource: `provider` is its azure-openai entry. */
  async function entraResource(t, entra) {
    const upstream = requireEntra(await startMockUpstream({ t }), entra.isValid);
    const provider = (name, azure, extra = {}) => ({
      name, type: 'azure-openai', base_url: `${upstream.origin()}/openai`, api_version: '2025-04-01-preview', azure, timeouts: TIMEOUTS, ...extra,
    });
    return { upstream, provider };
  }
  const app = (entra) => ({ tenant_id: TENANT, client_id: CLIENT_ID, client_secret_env: 'TEST_ENTRA_SECRET', authority_host: entra.authority });

  it('the batch poller polls with the bearer token; without a usable token it skips its turns (said once), then meters the batch', async (t) => {
    const entra = await startEntraServer({ t, lifetimeS: 4 });
    entra.secret = SECRET;
    const { upstream, provider } = await entraResource(t, entra);
    const config = gatewayConfig({
      providers: [provider('azure', app(entra))],
      models: [{ name: 'fast', provider: 'azure', upstream_model: 'gpt-4o-mini-batch', pricing: { input: 0.15, output: 0.6, batch_input: 0.075, batch_output: 0.3 } }],
    });
    config.tenants = [{ name: 'team-a' }];
    config.keys = [{ name: 'a', tenant: 'team-a', sha256: sha256(KEY) }];
    config.files = { provider: 'azure', poll_interval: '100ms' };
    const gw = await startTahua({ t, config, env: cleanEnv({ TEST_ENTRA_SECRET: SECRET }) });
    await logLines(gw, 'cloud token ready');
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: KEY, maxRetries: 0 });
    const lines = [chatLine('1', 'fast'), chatLine('2', 'fast')].map((l) => JSON.stringify(l)).join('\n') + '\n';
    const file = await openai.files.create({ file: await toFile(Buffer.from(lines), 'batch.jsonl'), purpose: 'batch' });
    const batch = await openai.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' });
    const polls = () => upstream.requests.filter((r) => r.method === 'GET' && r.path.startsWith(`/openai/batches/${batch.id}?`));
    const firstToken = [...entra.issued.keys()][0];
    await eventually(() => polls().length >= 1, { timeout: 5000, what: 'a poll of the running batch' });
    assert.equal(polls()[0].path, `/openai/batches/${batch.id}?api-version=2025-04-01-preview`);

    // Entra refuses the refreshes until the token has expired: the poller calls nothing
    // without credentials, and says so once however many turns pass.
    entra.mode = 'refuse';
    await logLines(gw, 'cloud token fetch failed', { pred: (l) => l.token === 'expired' });
    const [skipped] = await logLines(gw, 'batch polls skipped until the provider has credentials');
    assert.equal(skipped.provider, 'azure');
    assert.match(skipped.why, /^The azure-openai provider 'azure' has no access token: the token of Entra ID app .* expired and could not be refreshed: .*AADSTS7000215/);
    upstream.completeBatch(batch.id, { prompt: 100, completion: 20 });
    const sentWithoutToken = upstream.requests.length;

    // Entra accepts again: the next turn polls with the new token, reads the output file
    // with it, and meters the batch.
    entra.mode = 'ok';
    await logLines(gw, 'cloud token refreshed');
    const metered = await gw.waitForAccessLog((l) => l.request_id === `batch-${batch.id}`, { timeout: 15_000 });
    assert.equal(metered[0].model, 'fast');
    assert.equal(metered[0].prompt_tokens, 200);
    assert.equal(metered[0].completion_tokens, 40);
    assert.equal(metered[0].api, 'openai-batch');
    assert.equal(gw.stderr.json().filter((l) => l.msg === 'batch polls skipped until the provider has credentials').length, 1, 'said once for the whole outage');
    await logLines(gw, 'batch polls resume');
    assert.ok(upstream.requests.length > sentWithoutToken);
    const newToken = [...entra.issued.keys()].at(-1);
    assert.notEqual(newToken, firstToken);
    const output = upstream.requests.find((r) => r.method === 'GET' && /^\/openai\/files\/[^/]+\/content\?api-version=/.test(r.path));
    assert.ok(output, 'the output file was read');
    assert.equal(output.headers.authorization, `Bearer ${newToken}`);
    assert.equal(polls().at(-1).headers.authorization, `Bearer ${newToken}`);
    // Every call the resource saw (the client's uploads and the poller's) had a valid
    // bearer token and no api-key: nothing was refused.
    assert.deepEqual(upstream.refused.map((r) => `${r.status} ${r.path}`), []);
    for (const r of upstream.requests) {
      assert.match(r.headers.authorization ?? '', /^Bearer eyJ0eXAiOiJKV1Qi\.entra-secret-\d+$/, r.path);
      assert.equal(r.headers['api-key'], undefined, r.path);
    }
    for (const token of entra.issued.keys()) assert.ok(!gw.output().includes(token), 'a token leaked');
    assert.ok(!gw.output().includes(SECRET), 'the client secret leaked');
  });

  it('a realtime session opens the provider\'s WebSocket with the bearer token; without one the upgrade is refused with the 503 of the HTTP path', async (t) => {
    const entra = await startEntraServer({ t });
    entra.secret = SECRET;
    const { upstream, provider } = await entraResource(t, entra);
    const down = `http://127.0.0.1:${await closedPort()}`;
    const config = gatewayConfig({
      providers: [provider('azure', app(entra)), provider('azure-down', { ...app(entra), authority_host: down }, { token_wait: '1s' })],
      models: [
        { name: 'voice', provider: 'azure', upstream_model: 'gpt-realtime-eu' },
        { name: 'voice-down', provider: 'azure-down', upstream_model: 'gpt-realtime-eu' },
      ],
    });
    const gw = await startTahua({ t, config, env: cleanEnv({ TEST_ENTRA_SECRET: SECRET }) });
    await logLines(gw, 'cloud token ready');
    const [token] = [...entra.issued.keys()];
    const wsUrl = (model) => `${gw.url.replace('http', 'ws')}/v1/realtime?model=${model}`;

    const ws = new WebSocket(wsUrl('voice'));
    const first = new Promise((resolve) => ws.once('message', (m) => resolve(JSON.parse(m.toString()))));
    await once(ws, 'open');
    assert.equal((await first).type, 'session.created');
    const up = upstream.realtime.sessions.at(-1);
    assert.equal(up.url, '/openai/realtime?api-version=2025-04-01-preview&deployment=gpt-realtime-eu');
    assert.equal(up.headers.authorization, `Bearer ${token}`);
    assert.equal(up.headers['api-key'], undefined);
    ws.send(JSON.stringify({ type: 'response.create' }));
    const done = await new Promise((resolve) => ws.on('message', (m) => {
      const ev = JSON.parse(m.toString());
      if (ev.type === 'response.done') resolve(ev);
    }));
    assert.equal(done.response.usage.total_tokens, 150);
    ws.close();
    await once(ws, 'close');
    const [log] = await gw.waitForAccessLog((l) => l.path === '/v1/realtime');
    assert.equal(log.status, 101);
    assert.equal(log.prompt_tokens, 100);

    // No token (the authority is down): after token_wait, the HTTP path's 503 and reason.
    const sessions = upstream.realtime.sessions.length;
    const started = Date.now();
    const refused = new WebSocket(wsUrl('voice-down'));
    refused.on('error', () => {});
    const [req, res] = await once(refused, 'unexpected-response');
    const waited = Date.now() - started;
    assert.equal(res.statusCode, 503);
    const body = JSON.parse(Buffer.concat(await res.toArray()).toString('utf8'));
    assert.equal(body.error.code, 'provider_unavailable');
    assert.match(body.error.message, /^The azure-openai provider 'azure-down' has no access token yet \(waited 1s for Entra ID app .*\): the Entra ID token endpoint http:\/\/127\.0\.0\.1:\d+\/.* did not answer/);
    assert.ok(waited >= 900 && waited < 5000, `waited ${waited} ms`);
    req.destroy();
    assert.equal(upstream.realtime.sessions.length, sessions, 'no session opened without a token');
    assert.deepEqual(upstream.refused, [], 'nothing reached the resource without a valid token');
    assert.ok(!gw.output().includes(token), 'the token leaked');
    assert.ok(!gw.output().includes(SECRET), 'the client secret leaked');
  });
});

describe('azure-openai with Entra ID: config errors', () => {
  function configWith(provider) {
    return writeConfig(gatewayConfig({
      providers: [{ name: 'azure', type: 'azure-openai', base_url: 'https://r.openai.azure.com/openai', api_version: API_VERSION, ...provider }],
      models: [{ name: 'gpt', provider: 'azure' }],
    }));
  }
  const app = { tenant_id: TENANT, client_id: CLIENT_ID };

  it('contradictions are refused naming the file, the line and the field', () => {
    const cases = [
      [{ api_key_env: 'AZURE_OPENAI_API_KEY', azure: { ...app, client_secret_env: 'S' } },
        /:\d+:\d+: providers\[0\]\.api_key_env: not with azure\.auth: entra/],
      [{ azure: { ...app, client_secret_env: 'S', certificate_file: '/c.pem' } },
        /providers\[0\]\.azure\.certificate_file: set one of client_secret_env, certificate_file, federated_token_file or managed_identity, not both client_secret_env and certificate_file/],
      [{ azure: { tenant_id: TENANT, managed_identity: {} } }, /providers\[0\]\.azure\.tenant_id: not used with managed_identity/],
      [{ azure: { client_id: CLIENT_ID, managed_identity: {} } }, /providers\[0\]\.azure\.client_id: not used with managed_identity \(a user-assigned identity is managed_identity\.client_id\)/],
      [{ azure: { client_id: CLIENT_ID, client_secret_env: 'S' } }, /providers\[0\]\.azure\.tenant_id: required with azure\.client_secret_env \(or AZURE_TENANT_ID in the environment\)/],
      [{ azure: { ...app, federated_token_file: '/t', authority_host: 'ftp://login' } }, /providers\[0\]\.azure\.authority_host: not an http\(s\) URL/],
      [{ azure: { ...app, tenant_id: 'a/b', client_secret_env: 'S' } }, /providers\[0\]\.azure\.tenant_id: not a valid tenant id/],
      [{ azure: { auth: 'api_key', ...app } }, /providers\[0\]\.azure\.tenant_id: only with auth: entra/],
      [{ azure: { ...app, client_secret: 'inline' } }, /providers\[0\]\.azure\.client_secret: unknown field/],
      [{ api_key_env: 'K', token_wait: '5s' }, /providers\[0\]\.token_wait: only with an azure section/],
    ];
    for (const [provider, expected] of cases) {
      const file = configWith(provider);
      const r = checkConfig(file);
      assert.equal(r.status, 1, `${JSON.stringify(provider)}: ${r.stderr}`);
      assert.ok(r.stderr.includes(file), r.stderr);
      assert.match(r.stderr, expected);
      assert.ok(!r.stderr.includes('inline'), 'an inline secret is not quoted');
    }
  });

  it('a certificate file without a certificate, or whose key is not the certificate\'s, fails the load without quoting the key', () => {
    const cert = makeAppCertificate();
    const other = makeAppCertificate();
    const keyOnly = join(cert.dir, 'key-only.pem');
    writeFileSync(keyOnly, cert.keyPem);
    let r = checkConfig(configWith({ azure: { ...app, certificate_file: keyOnly } }));
    assert.equal(r.status, 1, r.stderr);
    assert.ok(r.stderr.includes(`providers[0].azure.certificate_file: ${keyOnly}: no certificate`), r.stderr);
    const mismatched = join(cert.dir, 'mismatched.pem');
    writeFileSync(mismatched, cert.keyPem + other.certPem);
    r = checkConfig(configWith({ azure: { ...app, certificate_file: mismatched } }));
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /providers\[0\]\.azure\.certificate_file: .*mismatched\.pem: the private key is not the first certificate's key/);
    for (const piece of keyPieces(cert.keyPem)) assert.ok(!r.stderr.includes(piece), 'the key is quoted');
    // A good one, and api_key alone, load.
    assert.equal(checkConfig(configWith({ azure: { ...app, certificate_file: cert.file } })).status, 0);
    assert.equal(checkConfig(configWith({ api_key: 'k' })).status, 0);
  });
});
