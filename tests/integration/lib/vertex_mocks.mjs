// Google Cloud as a `vertex` provider sees it, mocked for tests:
//   - a service account (an RSA key pair made here) and its credentials file;
//   - an OAuth2 token endpoint that VERIFIES each jwt-bearer assertion (the RS256
//     signature with the account's public key; iss, scope, aud, iat, exp) and issues
//     short-lived tokens, announcing each as an event ('token', 'refused');
//   - the GCE metadata server's token route (Metadata-Flavor: Google);
//   - Vertex AI's endpoints for both publishers, in their exact wire formats: Google's
//     generateContent, streamGenerateContent?alt=sse and predict (embeddings); Anthropic's
//     rawPredict and streamRawPredict (the model in the path, anthropic_version
//     vertex-2023-10-16 in the body, no model there). Every call must carry a bearer
//     token the token endpoint or metadata server issued and that has not expired.
// The answers follow lib/vendor_mocks.mjs's script (replyPieces, TOOL_ARGS, USAGE).
import http from 'node:http';
import { EventEmitter } from 'node:events';
import { generateKeyPairSync, verify as verifySignature } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { makeTempDir } from './util.mjs';
import { listen, readBody, sendJson, b64urlJson } from './mock_http.mjs';
import { TOOL_ARGS, TOOL_ARGS_PIECES, USAGE, replyPieces, geminiError, anthropicError } from './vendor_mocks.mjs';

export const CLOUD_PLATFORM_SCOPE = 'https://www.googleapis.com/auth/cloud-platform';
export const VERTEX_ANTHROPIC_VERSION = 'vertex-2023-10-16';

/** The embedding values the predict mock answers for input i (exact in float32). */
export function embeddingValues(i, dimensions = 4) {
  return Array.from({ length: dimensions }, (_, k) => (i + 1) * 0.5 - k * 0.25);
}




/** A service account: its key pair and a credentials file naming `tokenUri`. */
export function makeServiceAccount({ projectId = 'my-project', tokenUri, email = 'tahua-test@my-project.iam.gserviceaccount.com' }) {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
    publicKeyEncoding: { type: 'spki', format: 'pem' },
  });
  const file = join(makeTempDir('tahua-vertex-'), 'service-account.json');
  const json = {
    type: 'service_account',
    project_id: projectId,
    private_key_id: 'key-0001',
    private_key: privateKey,
    client_email: email,
    client_id: '100000000000000000001',
    token_uri: tokenUri,
  };
  writeFileSync(file, JSON.stringify(json, null, 2));
  return { file, email, privateKey, publicKey, json };
}


/**
 * The OAuth2 token endpoint (POST /token). `account` is set after start (its
 * credentials file names this endpoint). `mode`: 'ok', or 'fail' (HTTP 500 to everyone).
 * Events: 'token' ({ token, n }) for each token issued, 'refused' ({ status, reason })
 * for each refusal. `verified` counts assertions that passed every check.
 */
export async function startTokenServer({ t, lifetimeS = 3600 } = {}) {
  const ts = new EventEmitter();
  ts.account = null;
  ts.mode = 'ok';
  ts.lifetimeS = lifetimeS;
  ts.issued = new Map(); // token -> expiry (ms)
  ts.refusals = [];
  ts.verified = 0;
  ts.assertions = [];
  let n = 0;
  const refuse = (res, status, reason) => {
    ts.refusals.push(reason);
    sendJson(res, status, { error: status === 500 ? 'internal_failure' : 'invalid_grant', error_description: reason });
    ts.emit('refused', { status, reason });
  };
  const server = http.createServer(async (req, res) => {
    const body = (await readBody(req)).toString('utf8');
    if (req.method !== 'POST' || req.url !== '/token') return refuse(res, 404, `no route ${req.method} ${req.url}`);
    if (ts.mode === 'fail') return refuse(res, 500, 'the token service is failing (mock)');
    if (!/^application\/x-www-form-urlencoded/.test(req.headers['content-type'] ?? '')) return refuse(res, 400, 'not a form');
    const form = new URLSearchParams(body);
    if (form.get('grant_type') !== 'urn:ietf:params:oauth:grant-type:jwt-bearer') return refuse(res, 400, `grant_type ${form.get('grant_type')}`);
    const assertion = form.get('assertion') ?? '';
    ts.assertions.push(assertion);
    const parts = assertion.split('.');
    if (parts.length !== 3) return refuse(res, 400, 'assertion is not a JWT');
    let header;
    let claims;
    try {
      header = b64urlJson(parts[0]);
      claims = b64urlJson(parts[1]);
    } catch {
      return refuse(res, 400, 'assertion parts are not base64url JSON');
    }
    if (header.alg !== 'RS256' || header.typ !== 'JWT') return refuse(res, 400, `header ${JSON.stringify(header)}`);
    if (header.kid !== ts.account.json.private_key_id) return refuse(res, 400, `kid ${header.kid}`);
    const signed = verifySignature('RSA-SHA256', Buffer.from(`${parts[0]}.${parts[1]}`), ts.account.publicKey, Buffer.from(parts[2], 'base64url'));
    if (!signed) return refuse(res, 400, 'Invalid JWT Signature.');
    const now = Math.floor(Date.now() / 1000);
    if (claims.iss !== ts.account.email) return refuse(res, 400, `iss ${claims.iss}`);
    if (claims.scope !== CLOUD_PLATFORM_SCOPE) return refuse(res, 400, `scope ${claims.scope}`);
    if (claims.aud !== ts.url) return refuse(res, 400, `aud ${claims.aud} (expected ${ts.url})`);
    if (!Number.isInteger(claims.iat) || Math.abs(claims.iat - now) > 60) return refuse(res, 400, `iat ${claims.iat} (now ${now})`);
    if (!Number.isInteger(claims.exp) || claims.exp <= now || claims.exp - claims.iat > 3600) return refuse(res, 400, `exp ${claims.exp} (iat ${claims.iat})`);
    ts.verified += 1;
    n += 1;
    const token = `ya29.mock-${n}`;
    ts.issued.set(token, Date.now() + ts.lifetimeS * 1000);
    sendJson(res, 200, { access_token: token, expires_in: ts.lifetimeS, token_type: 'Bearer' });
    ts.emit('token', { token, n });
  });
  await listen(server);
  ts.url = `http://127.0.0.1:${server.address().port}/token`;
  ts.isValid = (token) => (ts.issued.get(token) ?? 0) > Date.now();
  ts.close = () => new Promise((resolve) => {
    server.closeAllConnections?.();
    server.close(() => resolve());
  });
  if (t) t.after(() => ts.close());
  return ts;
}

/** The metadata server's token route; `host` is what GCE_METADATA_HOST names. Events: 'token'. */
export async function startMetadataServer({ t, lifetimeS = 3600 } = {}) {
  const md = new EventEmitter();
  md.issued = new Map();
  md.requests = [];
  let n = 0;
  const server = http.createServer(async (req, res) => {
    await readBody(req);
    md.requests.push({ method: req.method, url: req.url, flavor: req.headers['metadata-flavor'] });
    if (req.headers['metadata-flavor'] !== 'Google') {
      res.writeHead(403, { 'content-type': 'text/html' });
      return res.end('<p>Your client does not have permission to get URL from this server. Missing Metadata-Flavor:Google header.</p>');
    }
    if (req.method !== 'GET' || req.url.split('?')[0] !== '/computeMetadata/v1/instance/service-accounts/default/token') {
      res.writeHead(404, { 'content-type': 'text/html' });
      return res.end('not found');
    }
    n += 1;
    const token = `ya29.metadata-${n}`;
    md.issued.set(token, Date.now() + lifetimeS * 1000);
    res.setHeader('metadata-flavor', 'Google');
    sendJson(res, 200, { access_token: token, expires_in: lifetimeS, token_type: 'Bearer' });
    md.emit('token', { token, n });
  });
  await listen(server);
  md.host = `127.0.0.1:${server.address().port}`;
  md.isValid = (token) => (md.issued.get(token) ?? 0) > Date.now();
  md.close = () => new Promise((resolve) => {
    server.closeAllConnections?.();
    server.close(() => resolve());
  });
  if (t) t.after(() => md.close());
  return md;
}

function sse(data, event) {
  return `${event ? `event: ${event}\n` : ''}data: ${JSON.stringify(data)}\n\n`;
}

async function sendSse(res, events) {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.flushHeaders();
  for (const ev of events) {
    if (res.destroyed) return;
    res.write(ev);
    await delay(1);
  }
  res.end();
}

function lastText(items, partsOf) {
  for (let i = items.length - 1; i >= 0; i -= 1) {
    const texts = (partsOf(items[i]) ?? []).filter((p) => typeof p?.text === 'string').map((p) => p.text);
    if (texts.length) return texts.join(' ');
  }
  return '';
}

// Google's generateContent / streamGenerateContent?alt=sse.
function answerGemini(v, rec, res, method) {
  const body = rec.body;
  if (!Array.isArray(body?.contents) || body.contents.length === 0) return sendJson(res, 400, geminiError(400, '* GenerateContentRequest.contents: contents is not specified'));
  const usage = (candidates) => ({ promptTokenCount: USAGE.input, candidatesTokenCount: candidates, totalTokenCount: USAGE.input + candidates });
  const chunk = (parts, finish, candidates) => ({
    candidates: [{ content: { role: 'model', parts }, ...(finish ? { finishReason: finish } : {}), index: 0 }],
    usageMetadata: usage(candidates),
    modelVersion: rec.model,
  });
  const decls = (body.tools ?? []).flatMap((x) => x?.functionDeclarations ?? []);
  const last = body.contents.at(-1);
  const toolResult = (last?.parts ?? []).some((p) => p?.functionResponse);
  let chunks;
  if (decls.length && !toolResult) {
    rec.reply = { kind: 'tool', toolName: decls[0].name };
    chunks = [chunk([{ functionCall: { name: decls[0].name, args: { ...TOOL_ARGS } } }], 'STOP', USAGE.output)];
  } else {
    const pieces = replyPieces('Vertex Gemini', lastText(body.contents, (c) => c.parts));
    rec.reply = { kind: 'text', text: pieces.join('') };
    chunks = method === 'generateContent'
      ? [chunk([{ text: pieces.join('') }], 'STOP', USAGE.output)]
      : pieces.map((text, i) => chunk([{ text }], i === pieces.length - 1 ? 'STOP' : undefined, i === pieces.length - 1 ? USAGE.output : i + 1));
  }
  if (method === 'generateContent') return sendJson(res, 200, chunks[0]);
  if (rec.query.get('alt') !== 'sse') return sendJson(res, 400, geminiError(400, 'this mock streams only with alt=sse'));
  return sendSse(res, chunks.map((c) => `data: ${JSON.stringify(c)}\r\n\r\n`));
}

// Google's predict for text embedding models.
function answerPredict(v, rec, res) {
  const instances = rec.body?.instances;
  if (!Array.isArray(instances) || instances.length === 0) return sendJson(res, 400, geminiError(400, 'instances is required'));
  const dims = rec.body.parameters?.outputDimensionality ?? 4;
  const predictions = instances.map((inst, i) => {
    if (typeof inst?.content !== 'string') throw new Error('instance without content');
    return { embeddings: { statistics: { truncated: false, token_count: inst.content.split(/\s+/).filter(Boolean).length }, values: embeddingValues(i, dims) } };
  });
  rec.reply = { kind: 'embeddings', count: predictions.length };
  return sendJson(res, 200, { predictions, metadata: { billableCharacterCount: 10 } });
}

// Anthropic's rawPredict / streamRawPredict on Vertex.
function answerAnthropic(v, rec, res, method) {
  const body = rec.body;
  const err = (status, type, message) => sendJson(res, status, anthropicError(type, message));
  if (!body || typeof body !== 'object') return err(400, 'invalid_request_error', 'body is not JSON');
  if ('model' in body) return err(400, 'invalid_request_error', 'model: Extra inputs are not permitted');
  if (body.anthropic_version !== VERTEX_ANTHROPIC_VERSION) return err(400, 'invalid_request_error', `anthropic_version: ${body.anthropic_version}`);
  if (!Number.isInteger(body.max_tokens)) return err(400, 'invalid_request_error', 'max_tokens: Field required');
  if (!Array.isArray(body.messages) || body.messages.length === 0) return err(400, 'invalid_request_error', 'messages: Field required');
  const stream = method === 'streamRawPredict';
  if (stream !== (body.stream === true)) return err(400, 'invalid_request_error', `${method} with stream ${body.stream}`);
  const base = { id: `msg_vrtx_${v.requests.length}`, type: 'message', role: 'assistant', model: rec.model };
  const usage = (output) => ({ input_tokens: USAGE.input, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: output });
  const tools = (body.tools ?? []).filter((x) => typeof x?.name === 'string');
  const last = body.messages.at(-1);
  const toolResult = Array.isArray(last?.content) && last.content.some((b) => b?.type === 'tool_result');
  if (tools.length && !toolResult) {
    rec.reply = { kind: 'tool', toolName: tools[0].name };
    const id = `toolu_vrtx_${v.requests.length}`;
    if (!stream) return sendJson(res, 200, { ...base, content: [{ type: 'tool_use', id, name: tools[0].name, input: { ...TOOL_ARGS } }], stop_reason: 'tool_use', stop_sequence: null, usage: usage(USAGE.output) });
    return sendSse(res, [
      sse({ type: 'message_start', message: { ...base, content: [], stop_reason: null, stop_sequence: null, usage: usage(1) } }, 'message_start'),
      sse({ type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id, name: tools[0].name, input: {} } }, 'content_block_start'),
      ...TOOL_ARGS_PIECES.map((p) => sse({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: p } }, 'content_block_delta')),
      sse({ type: 'content_block_stop', index: 0 }, 'content_block_stop'),
      sse({ type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: USAGE.output } }, 'message_delta'),
      sse({ type: 'message_stop' }, 'message_stop'),
    ]);
  }
  const text = lastText(body.messages, (m) => (typeof m.content === 'string' ? [{ text: m.content }] : m.content));
  const pieces = replyPieces('Vertex Claude', text);
  rec.reply = { kind: 'text', text: pieces.join('') };
  if (!stream) return sendJson(res, 200, { ...base, content: [{ type: 'text', text: pieces.join('') }], stop_reason: 'end_turn', stop_sequence: null, usage: usage(USAGE.output) });
  return sendSse(res, [
    sse({ type: 'message_start', message: { ...base, content: [], stop_reason: null, stop_sequence: null, usage: usage(1) } }, 'message_start'),
    sse({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }, 'content_block_start'),
    sse({ type: 'ping' }, 'ping'),
    ...pieces.map((p) => sse({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: p } }, 'content_block_delta')),
    sse({ type: 'content_block_stop', index: 0 }, 'content_block_stop'),
    sse({ type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: USAGE.output } }, 'message_delta'),
    sse({ type: 'message_stop' }, 'message_stop'),
  ]);
}

const ROUTE = /^\/v1\/projects\/([^/]+)\/locations\/([^/]+)\/publishers\/([^/]+)\/models\/([^/:]+):([A-Za-z]+)$/;

/**
 * Vertex AI for `project` in `location`. `isValid(token)` says whether a bearer token is
 * good. Records each call in `requests` ({ method, path, query, publisher, model,
 * method, bearer, body, reply }). baseUrl() is `http://127.0.0.1:PORT/v1`.
 */
export async function startVertexMock({ t, project, location, isValid }) {
  const v = { requests: [] };
  const server = http.createServer(async (req, res) => {
    const raw = (await readBody(req)).toString('utf8');
    const [path, qs = ''] = req.url.split('?');
    const rec = { method: req.method, path, query: new URLSearchParams(qs), headers: req.headers, bearer: null, body: undefined };
    v.requests.push(rec);
    const auth = req.headers.authorization ?? '';
    rec.bearer = auth.startsWith('Bearer ') ? auth.slice(7) : null;
    if (!rec.bearer || !isValid(rec.bearer)) {
      return sendJson(res, 401, geminiError(401, 'Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.', 'UNAUTHENTICATED'));
    }
    const m = ROUTE.exec(path);
    if (!m || req.method !== 'POST') return sendJson(res, 404, geminiError(404, `The requested URL ${path} was not found.`, 'NOT_FOUND'));
    const [, p, l, publisher, model, method] = m;
    Object.assign(rec, { publisher, model, call: method });
    if (p !== project || l !== location) return sendJson(res, 403, geminiError(403, `Permission denied on resource project ${p} location ${l}.`, 'PERMISSION_DENIED'));
    try {
      rec.body = raw ? JSON.parse(raw) : undefined;
    } catch {
      return sendJson(res, 400, geminiError(400, 'Invalid JSON payload received.'));
    }
    if (publisher === 'google' && (method === 'generateContent' || method === 'streamGenerateContent')) return answerGemini(v, rec, res, method);
    if (publisher === 'google' && method === 'predict') return answerPredict(v, rec, res);
    if (publisher === 'anthropic' && (method === 'rawPredict' || method === 'streamRawPredict')) return answerAnthropic(v, rec, res, method);
    return sendJson(res, 400, geminiError(400, `${publisher} does not serve ${method} in this mock`));
  });
  await listen(server);
  v.baseUrl = () => `http://127.0.0.1:${server.address().port}/v1`;
  v.close = () => new Promise((resolve) => {
    server.closeAllConnections?.();
    server.close(() => resolve());
  });
  if (t) t.after(() => v.close());
  return v;
}
