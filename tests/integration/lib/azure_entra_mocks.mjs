// Microsoft Entra ID and Azure OpenAI as an `azure-openai` provider with Entra ID sees
// them, mocked for tests in their wire formats:
//   - an app's certificate (an RSA key and a self-signed X.509 certificate made with the
//     `openssl` CLI) in one PEM file;
//   - the v2.0 token endpoint, POST /{tenant}/oauth2/v2.0/token, client_credentials
//     with a client secret (compared), or a client assertion: a certificate's (its
//     RS256 signature VERIFIED with the certificate's public key; x5t#S256, aud, iss,
//     sub, jti, nbf, iat, exp checked) or a workload identity's federated token
//     (compared with the one the test expects). Refusals in Entra's shape
//     ({"error","error_description":"AADSTS...\r\nTrace ID: ...","error_codes"});
//   - a managed identity endpoint: the instance metadata service's route (Metadata:
//     true) and App Service's IDENTITY_ENDPOINT (X-IDENTITY-HEADER), answering with
//     expires_in / expires_on as strings, as they do;
//   - Azure OpenAI (a resource with disableLocalAuth): chat completions on a deployment,
//     plain and streamed, only with `Authorization: Bearer <a token issued and not
//     expired>`; an `api-key` is refused. requireEntra() puts the same check in front
//     of the generic mock upstream (mock_upstream.mjs), for its files, batches and
//     realtime WebSocket at Azure's paths.
// Each issuer announces events: 'token' ({ token, n, via }) and 'refused' ({ status, reason }).
import http from 'node:http';
import { EventEmitter } from 'node:events';
import { execFileSync } from 'node:child_process';
import { X509Certificate, createHash, verify as verifySignature } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { makeTempDir } from './util.mjs';
import { listen, readBody, sendJson, closer, b64urlJson } from './mock_http.mjs';
import { USAGE, replyPieces } from './vendor_mocks.mjs';

// Entra's and Azure's answers say their charset.
const sendEntraJson = (res, status, obj) => sendJson(res, status, obj, 'application/json; charset=utf-8');

export const COGNITIVE_SCOPE = 'https://cognitiveservices.azure.com/.default';
export const COGNITIVE_RESOURCE = 'https://cognitiveservices.azure.com';
export const ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';
export const TENANT = '72f988bf-86f1-41af-91ab-2d7cd011db47';
export const CLIENT_ID = '0d1b3c5e-7f90-4a2b-8c4d-6e8f0a1b2c3d';





/** An app's certificate credential: `{ file, keyPem, certPem, x5tS256, publicKey }` (file: key + certificate). */
export function makeAppCertificate({ keyFirst = true } = {}) {
  const dir = makeTempDir('tahua-entra-');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'key.pem', '-out', 'cert.pem',
    '-days', '2', '-subj', '/CN=tahua-entra-test'], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  const keyPem = readFileSync(join(dir, 'key.pem'), 'utf8');
  const certPem = readFileSync(join(dir, 'cert.pem'), 'utf8');
  const file = join(dir, 'app.pem');
  writeFileSync(file, keyFirst ? keyPem + certPem : certPem + keyPem);
  const cert = new X509Certificate(certPem);
  const x5tS256 = createHash('sha256').update(cert.raw).digest('base64url');
  return { dir, file, keyPem, certPem, x5tS256, publicKey: cert.publicKey };
}


/**
 * The Entra ID token endpoint for `tenant`. Set after start what it accepts: `secret`
 * (a client secret), `certificate` (makeAppCertificate's), `federatedToken` (the
 * workload identity token it expects). `mode`: 'ok', 'refuse' (401 invalid_client,
 * AADSTS7000215) or 'fail' (HTTP 500). `authority` is the authority host URL, `url` the
 * token endpoint's. `expiresAsString` answers expires_in as text ("3599").
 */
export async function startEntraServer({ t, tenant = TENANT, clientId = CLIENT_ID, lifetimeS = 3600, expiresAsString = false } = {}) {
  const es = new EventEmitter();
  Object.assign(es, { tenant, clientId, lifetimeS, expiresAsString, mode: 'ok', secret: null, certificate: null, federatedToken: null });
  es.issued = new Map(); // token -> expiry (ms)
  es.refusals = [];
  es.verified = []; // { via, claims?, header? } of each accepted request
  es.jtis = new Set();
  es.forms = [];
  let n = 0;
  const refuse = (res, status, error, code, description) => {
    const reason = `AADSTS${code}: ${description}`;
    es.refusals.push(reason);
    sendEntraJson(res, status, {
      error,
      error_description: `${reason}\r\nTrace ID: 0f6a1c2e-0000-4000-8000-000000000000\r\nCorrelation ID: 5e1d2c3b-0000-4000-8000-000000000000\r\nTimestamp: 2025-01-01 00:00:00Z`,
      error_codes: [code],
      timestamp: '2025-01-01 00:00:00Z',
      trace_id: '0f6a1c2e-0000-4000-8000-000000000000',
      correlation_id: '5e1d2c3b-0000-4000-8000-000000000000',
    });
    es.emit('refused', { status, reason });
  };
  const checkCertificateAssertion = (assertion) => {
    const parts = assertion.split('.');
    if (parts.length !== 3) return 'the client assertion is not a JWT';
    let header;
    let claims;
    try {
      header = b64urlJson(parts[0]);
      claims = b64urlJson(parts[1]);
    } catch {
      return 'the client assertion\'s parts are not base64url JSON';
    }
    if (header.alg !== 'RS256') return `alg ${header.alg}`;
    if (header['x5t#S256'] !== es.certificate.x5tS256) return `x5t#S256 ${header['x5t#S256']} (expected ${es.certificate.x5tS256})`;
    const signed = verifySignature('RSA-SHA256', Buffer.from(`${parts[0]}.${parts[1]}`), es.certificate.publicKey, Buffer.from(parts[2], 'base64url'));
    if (!signed) return 'Client assertion contains an invalid signature.';
    const now = Math.floor(Date.now() / 1000);
    if (claims.aud !== es.url) return `aud ${claims.aud} (expected ${es.url})`;
    if (claims.iss !== es.clientId || claims.sub !== es.clientId) return `iss ${claims.iss} sub ${claims.sub}`;
    if (typeof claims.jti !== 'string' || claims.jti.length < 16 || es.jtis.has(claims.jti)) return `jti ${claims.jti} (missing, short or replayed)`;
    for (const c of ['nbf', 'iat', 'exp']) if (!Number.isInteger(claims[c])) return `${c} is not an integer`;
    if (Math.abs(claims.iat - now) > 60 || claims.nbf > now + 60) return `iat ${claims.iat} nbf ${claims.nbf} (now ${now})`;
    if (claims.exp <= now || claims.exp - claims.iat > 600) return `exp ${claims.exp} (iat ${claims.iat}): more than ten minutes, or past`;
    es.jtis.add(claims.jti);
    return { header, claims };
  };
  const server = http.createServer(async (req, res) => {
    const body = (await readBody(req)).toString('utf8');
    if (req.method !== 'POST' || req.url !== `/${es.tenant}/oauth2/v2.0/token`) {
      return refuse(res, 400, 'invalid_request', 90002, `Tenant or route not found: ${req.method} ${req.url}`);
    }
    if (es.mode === 'fail') return refuse(res, 500, 'temporarily_unavailable', 90033, 'A transient error has occurred (mock).');
    if (!/^application\/x-www-form-urlencoded/.test(req.headers['content-type'] ?? '')) return refuse(res, 400, 'invalid_request', 900144, 'not a form');
    const form = new URLSearchParams(body);
    es.forms.push(form);
    if (form.get('grant_type') !== 'client_credentials') return refuse(res, 400, 'unsupported_grant_type', 70003, `grant_type ${form.get('grant_type')}`);
    if (form.get('client_id') !== es.clientId) return refuse(res, 400, 'unauthorized_client', 700016, `Application with identifier '${form.get('client_id')}' was not found in the directory.`);
    if (form.get('scope') !== COGNITIVE_SCOPE) return refuse(res, 400, 'invalid_scope', 70011, `The provided value for scope ${form.get('scope')} is not valid.`);
    if (es.mode === 'refuse') return refuse(res, 401, 'invalid_client', 7000215, 'Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID.');
    let via;
    let detail = {};
    if (form.has('client_secret')) {
      if (form.has('client_assertion')) return refuse(res, 400, 'invalid_request', 50027, 'both a secret and an assertion');
      if (!es.secret || form.get('client_secret') !== es.secret) return refuse(res, 401, 'invalid_client', 7000215, 'Invalid client secret provided.');
      via = 'secret';
    } else if (form.has('client_assertion')) {
      if (form.get('client_assertion_type') !== ASSERTION_TYPE) return refuse(res, 400, 'invalid_request', 50027, `client_assertion_type ${form.get('client_assertion_type')}`);
      const assertion = form.get('client_assertion');
      if (es.federatedToken !== null) {
        if (assertion !== es.federatedToken) return refuse(res, 400, 'invalid_client', 70021, 'No matching federated identity record found for presented assertion.');
        via = 'federated';
        detail = { assertion };
      } else if (es.certificate) {
        const checked = checkCertificateAssertion(assertion);
        if (typeof checked === 'string') return refuse(res, 401, 'invalid_client', 700027, checked);
        via = 'certificate';
        detail = checked;
      } else {
        return refuse(res, 401, 'invalid_client', 700027, 'no certificate registered (mock)');
      }
    } else {
      return refuse(res, 401, 'invalid_client', 7000218, 'The request body must contain the following parameter: \'client_assertion\' or \'client_secret\'.');
    }
    n += 1;
    const token = `eyJ0eXAiOiJKV1Qi.entra-${via}-${n}`;
    es.issued.set(token, Date.now() + es.lifetimeS * 1000);
    es.verified.push({ via, ...detail });
    const expires = es.expiresAsString ? String(es.lifetimeS) : es.lifetimeS;
    sendEntraJson(res, 200, { token_type: 'Bearer', expires_in: expires, ext_expires_in: expires, access_token: token });
    es.emit('token', { token, n, via });
  });
  await listen(server);
  es.authority = `http://127.0.0.1:${server.address().port}`;
  es.url = `${es.authority}/${es.tenant}/oauth2/v2.0/token`;
  es.isValid = (token) => (es.issued.get(token) ?? 0) > Date.now();
  es.close = closer(server);
  if (t) t.after(() => es.close());
  return es;
}

/**
 * A managed identity endpoint: the instance metadata service's
 * GET /metadata/identity/oauth2/token (Metadata: true, api-version 2018-02-01) at
 * `authority` (what AZURE_POD_IDENTITY_AUTHORITY_HOST names), and App Service's
 * GET /msi/token (X-IDENTITY-HEADER: `identityHeader`, api-version 2019-08-01) at
 * `identityEndpoint`. Records each request ({ route, query, headers }).
 */
export async function startManagedIdentityServer({ t, lifetimeS = 3600, identityHeader = 'mi-header-s3cr3t-0123456789' } = {}) {
  const md = new EventEmitter();
  Object.assign(md, { lifetimeS, identityHeader });
  md.issued = new Map();
  md.requests = [];
  let n = 0;
  const server = http.createServer(async (req, res) => {
    await readBody(req);
    const [path, qs = ''] = req.url.split('?');
    const query = new URLSearchParams(qs);
    const rec = { route: path, query, headers: req.headers };
    md.requests.push(rec);
    const refuse = (status, error, description) => {
      sendEntraJson(res, status, { error, error_description: description });
      md.emit('refused', { status, reason: description });
    };
    let route;
    if (path === '/metadata/identity/oauth2/token') {
      if (req.headers.metadata !== 'true') return refuse(400, 'invalid_request', 'Required metadata header not specified');
      if (query.get('api-version') !== '2018-02-01') return refuse(400, 'invalid_request', `api-version ${query.get('api-version')}`);
      route = 'imds';
    } else if (path === '/msi/token') {
      if (req.headers['x-identity-header'] !== md.identityHeader) return refuse(401, 'unauthorized', 'X-IDENTITY-HEADER is missing or wrong');
      if (query.get('api-version') !== '2019-08-01') return refuse(400, 'invalid_request', `api-version ${query.get('api-version')}`);
      route = 'app-service';
    } else {
      return refuse(404, 'not_found', `no route ${path}`);
    }
    if (req.method !== 'GET') return refuse(405, 'invalid_request', 'GET only');
    if (query.get('resource') !== COGNITIVE_RESOURCE) return refuse(400, 'invalid_resource', `resource ${query.get('resource')}`);
    n += 1;
    const token = `eyJ0eXAiOiJKV1Qi.mi-${route}-${n}`;
    const expiresOn = Math.floor(Date.now() / 1000) + md.lifetimeS;
    md.issued.set(token, expiresOn * 1000);
    const answer = { access_token: token, expires_on: String(expiresOn), resource: COGNITIVE_RESOURCE, token_type: 'Bearer' };
    if (query.get('client_id')) answer.client_id = query.get('client_id');
    if (route === 'imds') Object.assign(answer, { expires_in: String(md.lifetimeS), ext_expires_in: String(md.lifetimeS), not_before: String(expiresOn - md.lifetimeS) });
    sendEntraJson(res, 200, answer);
    md.emit('token', { token, n, via: route });
  });
  await listen(server);
  md.authority = `http://127.0.0.1:${server.address().port}`;
  md.identityEndpoint = `${md.authority}/msi/token`;
  md.isValid = (token) => (md.issued.get(token) ?? 0) > Date.now();
  md.close = closer(server);
  if (t) t.after(() => md.close());
  return md;
}

function azureError(code, message) {
  return { error: { code, message } };
}

// Azure's refusal of a request without a valid bearer token (null: it may go on).
function entraRefusal(headers, isValid) {
  if (headers['api-key'] !== undefined) {
    return { status: 403, body: azureError('AuthenticationTypeDisabled', 'Key based authentication is disabled for this resource.') };
  }
  const auth = headers.authorization ?? '';
  if (!auth.startsWith('Bearer ') || !isValid(auth.slice(7))) {
    return { status: 401, body: azureError('401', 'Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), or have expired.') };
  }
  return null;
}

/**
 * The generic mock upstream (startMockUpstream: files, batches, the realtime WebSocket,
 * at /openai/... as an azure-openai provider calls them) as a resource with local
 * authentication disabled: every request and upgrade needs `Authorization: Bearer` with
 * a token `isValid` accepts; an api-key is refused. Refusals land in `upstream.refused`.
 */
export function requireEntra(upstream, isValid) {
  upstream.gate = (req) => entraRefusal(req.headers, isValid);
  return upstream;
}

/**
 * Azure OpenAI with local (key) authentication disabled: POST
 * /openai/deployments/{deployment}/chat/completions?api-version=..., answered only with
 * a valid bearer token (`isValid(token)`). Records each call in `requests` ({ path,
 * query, deployment, bearer, apiKey, body }). baseUrl() is `http://127.0.0.1:PORT/openai`.
 */
export async function startAzureOpenAIMock({ t, isValid }) {
  const az = { requests: [] };
  const server = http.createServer(async (req, res) => {
    const raw = (await readBody(req)).toString('utf8');
    const [path, qs = ''] = req.url.split('?');
    const auth = req.headers.authorization ?? '';
    const rec = { method: req.method, path, query: new URLSearchParams(qs), headers: req.headers, bearer: auth.startsWith('Bearer ') ? auth.slice(7) : null, apiKey: req.headers['api-key'] ?? null };
    az.requests.push(rec);
    const refusal = entraRefusal(req.headers, isValid);
    if (refusal) return sendEntraJson(res, refusal.status, refusal.body);
    const m = /^\/openai\/deployments\/([^/]+)\/chat\/completions$/.exec(path);
    if (!m || req.method !== 'POST') return sendEntraJson(res, 404, azureError('404', 'Resource not found'));
    if (!rec.query.get('api-version')) return sendEntraJson(res, 404, azureError('404', 'Resource not found'));
    rec.deployment = decodeURIComponent(m[1]);
    try {
      rec.body = JSON.parse(raw);
    } catch {
      return sendEntraJson(res, 400, azureError('BadRequest', 'invalid JSON'));
    }
    const last = (rec.body.messages ?? []).at(-1);
    const pieces = replyPieces('Azure OpenAI', typeof last?.content === 'string' ? last.content : '');
    const base = { id: `chatcmpl-az${az.requests.length}`, created: Math.floor(Date.now() / 1000), model: 'gpt-4o-2024-11-20', system_fingerprint: 'fp_az' };
    const usage = { prompt_tokens: USAGE.input, completion_tokens: USAGE.output, total_tokens: USAGE.input + USAGE.output };
    if (!rec.body.stream) {
      return sendEntraJson(res, 200, {
        ...base,
        object: 'chat.completion',
        choices: [{ index: 0, message: { role: 'assistant', content: pieces.join('') }, finish_reason: 'stop', logprobs: null, content_filter_results: {} }],
        usage,
        prompt_filter_results: [{ prompt_index: 0, content_filter_results: {} }],
      });
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    const chunk = (choices, extra = {}) => `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices, ...extra })}\n\n`;
    const events = [
      `data: ${JSON.stringify({ id: '', object: '', created: 0, model: '', choices: [], prompt_filter_results: [{ prompt_index: 0, content_filter_results: {} }] })}\n\n`,
      chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]),
      ...pieces.map((p) => chunk([{ index: 0, delta: { content: p }, finish_reason: null }])),
      chunk([{ index: 0, delta: {}, finish_reason: 'stop' }]),
    ];
    if (rec.body.stream_options?.include_usage) events.push(chunk([], { usage }));
    events.push('data: [DONE]\n\n');
    for (const ev of events) {
      if (res.destroyed) return;
      res.write(ev);
      await delay(1);
    }
    res.end();
  });
  await listen(server);
  az.baseUrl = () => `http://127.0.0.1:${server.address().port}/openai`;
  az.close = closer(server);
  if (t) t.after(() => az.close());
  return az;
}
