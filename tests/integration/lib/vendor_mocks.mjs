// Mock LLM upstreams speaking each vendor's own wire format, for tests where the gateway
// translates between APIs: Anthropic Messages, Gemini generateContent, Bedrock Converse
// (with real SigV4 verification and binary event-stream framing) and OpenAI chat
// completions (plus Azure OpenAI's deployment routes).
//
// Every mock answers the same script:
//   - the request defines tools and the conversation's last message is not a tool result
//     -> ONE call of the first tool named in the request, arguments TOOL_ARGS, with the
//        vendor's tool-use stop reason (STOP_REASONS[vendor].tool);
//   - otherwise -> the text replyText(VENDOR_NAMES[vendor], <last user text>), streamed in
//     >= 3 text deltas (replyPieces).
//   Usage is always USAGE (input 11, output 7, cached/cache-read 3 where the vendor has a
//   field, total 18).
//
// Every mock records each request in `requests` (see `RequestRecord` below) and can be told
// to fail the next request(s) with `failNext({status, body, headers})`.
import http from 'node:http';
import { createHash, createHmac, randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';

// ---------------------------------------------------------------------------------------
// The script's constants

/** The arguments of the scripted tool call. */
export const TOOL_ARGS = Object.freeze({ location: 'Paris', unit: 'celsius' });
/** TOOL_ARGS as the exact JSON text the mocks send (and concatenated stream pieces give). */
export const TOOL_ARGS_JSON = JSON.stringify(TOOL_ARGS); // {"location":"Paris","unit":"celsius"}
/** The pieces TOOL_ARGS_JSON is streamed in (split at odd positions, inside tokens). */
export const TOOL_ARGS_PIECES = Object.freeze(['{"loc', 'ation":"Pa', 'ris","unit', '":"cel', 'sius"}']);

/** The scripted function tool in the Responses API's shape (type, name, parameters at the top). */
export const RESPONSES_WEATHER_TOOL = Object.freeze({
  type: 'function',
  name: 'get_weather',
  description: 'Current weather in a city',
  parameters: {
    type: 'object',
    properties: { location: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
    required: ['location', 'unit'],
    additionalProperties: false,
  },
  strict: true,
});

/** Token usage every mock reports. `total` = input + output (cached is part of input). */
export const USAGE = Object.freeze({ input: 11, output: 7, cached: 3, total: 18 });

/** The vendor name used in the reply text. */
export const VENDOR_NAMES = Object.freeze({
  anthropic: 'Anthropic',
  gemini: 'Gemini',
  bedrock: 'Bedrock',
  openai: 'OpenAI',
  azure: 'Azure OpenAI', // startOpenAIChatMock's /openai/deployments/... routes
});

/** Stop/finish reasons each vendor uses for the two scripted outcomes. */
export const STOP_REASONS = Object.freeze({
  anthropic: Object.freeze({ text: 'end_turn', tool: 'tool_use' }),
  gemini: Object.freeze({ text: 'STOP', tool: 'STOP' }), // Gemini has no tool-specific reason
  bedrock: Object.freeze({ text: 'end_turn', tool: 'tool_use' }),
  openai: Object.freeze({ text: 'stop', tool: 'tool_calls' }),
  azure: Object.freeze({ text: 'stop', tool: 'tool_calls' }),
});

/** How many characters (Unicode code points) of the user's text the reply repeats. */
export const USER_TEXT_LIMIT = 40;

/** The scripted reply text, e.g. replyText('Gemini', 'Hi') = 'Hello from Gemini! You said: Hi'. */
export function replyText(vendorName, userText) {
  return replyPieces(vendorName, userText).join('');
}

/** The text deltas the reply is streamed in (always >= 3). */
export function replyPieces(vendorName, userText) {
  const said = Array.from(userText ?? '').slice(0, USER_TEXT_LIMIT);
  const pieces = ['Hello', ` from ${vendorName}!`, ' You said: '];
  for (let i = 0; i < said.length; i += 16) pieces.push(said.slice(i, i + 16).join(''));
  return pieces;
}

// ---------------------------------------------------------------------------------------
// CRC32 (IEEE 802.3, reflected, as AWS event streams use), table-based

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n += 1) {
    let c = n;
    for (let k = 0; k < 8; k += 1) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** CRC32 of `bytes` (Buffer/Uint8Array) as an unsigned 32-bit number. */
export function crc32(bytes, start = 0, end = bytes.length) {
  let crc = 0xffffffff;
  for (let i = start; i < end; i += 1) crc = CRC_TABLE[(crc ^ bytes[i]) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

// ---------------------------------------------------------------------------------------
// AWS event stream (application/vnd.amazon.eventstream) encoding and decoding

/**
 * One binary event-stream message: prelude (total length, headers length, prelude CRC),
 * headers, payload, message CRC. `headers` is an object or [name, value] list of string
 * headers (type 7).
 */
export function encodeEventStreamMessage(headers, payload) {
  const entries = Array.isArray(headers) ? headers : Object.entries(headers);
  const headerBufs = entries.map(([name, value]) => {
    const n = Buffer.from(name, 'utf8');
    const v = Buffer.from(String(value), 'utf8');
    const b = Buffer.alloc(1 + n.length + 1 + 2 + v.length);
    b.writeUInt8(n.length, 0);
    n.copy(b, 1);
    b.writeUInt8(7, 1 + n.length); // string
    b.writeUInt16BE(v.length, 2 + n.length);
    v.copy(b, 4 + n.length);
    return b;
  });
  const headerBytes = Buffer.concat(headerBufs);
  const body = Buffer.isBuffer(payload) ? payload : Buffer.from(typeof payload === 'string' ? payload : JSON.stringify(payload));
  const total = 12 + headerBytes.length + body.length + 4;
  const msg = Buffer.alloc(total);
  msg.writeUInt32BE(total, 0);
  msg.writeUInt32BE(headerBytes.length, 4);
  msg.writeUInt32BE(crc32(msg, 0, 8), 8);
  headerBytes.copy(msg, 12);
  body.copy(msg, 12 + headerBytes.length);
  msg.writeUInt32BE(crc32(msg, 0, total - 4), total - 4);
  return msg;
}

/** An event frame as Bedrock sends it: `:event-type`, `:content-type`, `:message-type`. */
export function eventStreamEvent(eventType, payload) {
  return encodeEventStreamMessage(
    [
      [':event-type', eventType],
      [':content-type', 'application/json'],
      [':message-type', 'event'],
    ],
    payload,
  );
}

function decodeHeaders(buf) {
  const headers = {};
  let i = 0;
  while (i < buf.length) {
    const nameLen = buf.readUInt8(i);
    const name = buf.toString('utf8', i + 1, i + 1 + nameLen);
    i += 1 + nameLen;
    const type = buf.readUInt8(i);
    i += 1;
    let value;
    switch (type) {
      case 0: value = true; break;
      case 1: value = false; break;
      case 2: value = buf.readInt8(i); i += 1; break;
      case 3: value = buf.readInt16BE(i); i += 2; break;
      case 4: value = buf.readInt32BE(i); i += 4; break;
      case 5: value = buf.readBigInt64BE(i); i += 8; break;
      case 6: case 7: {
        const len = buf.readUInt16BE(i);
        const raw = buf.subarray(i + 2, i + 2 + len);
        value = type === 7 ? raw.toString('utf8') : Buffer.from(raw);
        i += 2 + len;
        break;
      }
      case 8: value = new Date(Number(buf.readBigInt64BE(i))); i += 8; break;
      case 9: value = buf.subarray(i, i + 16).toString('hex'); i += 16; break;
      default: throw new Error(`event stream: unknown header value type ${type} for ${name}`);
    }
    headers[name] = value;
  }
  return headers;
}

/**
 * Decodes a whole event-stream body into `[{ headers, payload (Buffer), json, length }]`,
 * checking every prelude and message CRC. Throws on a CRC mismatch, a bad length or a
 * truncated trailing message (unless `allowPartial`, which then returns `rest`).
 */
export function decodeEventStream(buffer, { allowPartial = false } = {}) {
  const buf = Buffer.from(buffer);
  const messages = [];
  let off = 0;
  while (off < buf.length) {
    if (buf.length - off < 16) break;
    const total = buf.readUInt32BE(off);
    const headersLen = buf.readUInt32BE(off + 4);
    const preludeCrc = buf.readUInt32BE(off + 8);
    const gotPrelude = crc32(buf, off, off + 8);
    if (preludeCrc !== gotPrelude) {
      throw new Error(`event stream: prelude CRC mismatch at byte ${off} (sent ${preludeCrc}, computed ${gotPrelude})`);
    }
    if (total < 16 || headersLen > total - 16) throw new Error(`event stream: bad lengths at byte ${off} (total ${total}, headers ${headersLen})`);
    if (buf.length - off < total) break;
    const msgCrc = buf.readUInt32BE(off + total - 4);
    const gotMsg = crc32(buf, off, off + total - 4);
    if (msgCrc !== gotMsg) throw new Error(`event stream: message CRC mismatch at byte ${off} (sent ${msgCrc}, computed ${gotMsg})`);
    const headers = decodeHeaders(buf.subarray(off + 12, off + 12 + headersLen));
    const payload = Buffer.from(buf.subarray(off + 12 + headersLen, off + total - 4));
    let json;
    try {
      json = payload.length ? JSON.parse(payload.toString('utf8')) : undefined;
    } catch {
      json = undefined;
    }
    messages.push({ headers, payload, json, length: total });
    off += total;
  }
  const rest = buf.subarray(off);
  if (rest.length && !allowPartial) throw new Error(`event stream: ${rest.length} trailing bytes of an incomplete message`);
  if (allowPartial) messages.rest = rest;
  return messages;
}

// ---------------------------------------------------------------------------------------
// SSE parsing for tests

/**
 * Parses a complete SSE text (per the HTML spec: \n, \r\n or \r line ends; `event`, `data`,
 * `id` fields; comments) into `[{ event (null if none), data, json, id }]`. Throws if the
 * text ends inside an event (fields after the last blank line), i.e. the stream is not
 * well-formed.
 */
export function parseSse(text) {
  const events = [];
  let cur = null;
  const lines = text.split(/\r\n|\n|\r/);
  const endsClean = lines.at(-1) === '';
  if (endsClean) lines.pop();
  for (let n = 0; n < lines.length; n += 1) {
    const line = lines[n];
    if (line === '') {
      if (cur && cur.data !== null) {
        let json;
        try {
          json = JSON.parse(cur.data);
        } catch {
          json = undefined;
        }
        events.push({ event: cur.event, data: cur.data, json, id: cur.id });
      }
      cur = null;
      continue;
    }
    if (line.startsWith(':')) continue;
    cur ??= { event: null, data: null, id: null };
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? '' : line.slice(i + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') cur.data = cur.data === null ? value : `${cur.data}\n${value}`;
    else if (field === 'event') cur.event = value;
    else if (field === 'id') cur.id = value;
  }
  if (cur || !endsClean) throw new Error(`SSE stream ends inside an event: ${JSON.stringify(text.slice(-120))}`);
  return events;
}

/** Reads a fetch Response (or takes a string) and parses it with parseSse. */
export async function readSse(responseOrText) {
  const text = typeof responseOrText === 'string' ? responseOrText : await responseOrText.text();
  return parseSse(text);
}

// ---------------------------------------------------------------------------------------
// AWS Signature Version 4 verification

const UNRESERVED = /[A-Za-z0-9\-_.~]/;

/** RFC 3986 encoding as SigV4 requires: every byte but A-Z a-z 0-9 - _ . ~ as %XX. */
export function awsUriEncode(str) {
  let out = '';
  for (const ch of str) {
    if (UNRESERVED.test(ch)) out += ch;
    else for (const byte of Buffer.from(ch, 'utf8')) out += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

function safeDecode(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** Canonical URI of a raw (as received) path for non-S3 services: each segment encoded again. */
export function canonicalUri(rawPath) {
  if (!rawPath || rawPath === '/') return '/';
  return rawPath.split('/').map(awsUriEncode).join('/');
}

/** Canonical query string of a raw query (without '?'). */
export function canonicalQuery(rawQuery) {
  if (!rawQuery) return '';
  return rawQuery
    .split('&')
    .filter((p) => p !== '')
    .map((p) => {
      const i = p.indexOf('=');
      const k = i < 0 ? p : p.slice(0, i);
      const v = i < 0 ? '' : p.slice(i + 1);
      return [awsUriEncode(safeDecode(k)), awsUriEncode(safeDecode(v))];
    })
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
}

function headerPairs(headers) {
  if (Array.isArray(headers)) {
    if (headers.length && Array.isArray(headers[0])) return headers;
    const pairs = []; // node's flat rawHeaders
    for (let i = 0; i < headers.length; i += 2) pairs.push([headers[i], headers[i + 1]]);
    return pairs;
  }
  return Object.entries(headers).flatMap(([k, v]) => (Array.isArray(v) ? v.map((x) => [k, x]) : [[k, v]]));
}

function hmac(key, data) {
  return createHmac('sha256', key).update(data, 'utf8').digest();
}

function sha256Hex(data) {
  return createHash('sha256').update(data).digest('hex');
}

function parseAmzDate(s) {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(s ?? '');
  return m ? Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]) : NaN;
}

/**
 * Verifies the SigV4 `Authorization` header of a request as AWS would.
 *   request: { method, url (raw path + query, as received), headers (node rawHeaders, [[k,v]]
 *              or an object), body (Buffer/string) }
 *   credentials: { accessKeyId, secretAccessKey, sessionToken?, region, service }
 *   now: ms since epoch for the clock-skew check (default Date.now()); maxSkewMs 5 min.
 * Returns { verified, reason, error ({status, errorType, message} when not verified),
 *   canonicalRequest, stringToSign, expectedSignature, signature, signedHeaders, accessKeyId,
 *   scope, securityTokenSigned }.
 */
export function verifySigV4(request, credentials, { now = Date.now(), maxSkewMs = 5 * 60_000 } = {}) {
  const out = { verified: false, reason: null, error: null };
  const fail = (reason, status, errorType, message) => {
    out.reason = reason;
    out.error = { status, errorType, message };
    return out;
  };
  const pairs = headerPairs(request.headers ?? {});
  const byName = new Map();
  for (const [k, v] of pairs) {
    const name = k.toLowerCase();
    if (!byName.has(name)) byName.set(name, []);
    byName.get(name).push(String(v));
  }
  const one = (name) => byName.get(name)?.join(',');
  const auth = one('authorization');
  if (!auth) return fail('no Authorization header', 403, 'MissingAuthenticationTokenException', 'Missing Authentication Token');
  const m = /^AWS4-HMAC-SHA256\s+(.*)$/s.exec(auth);
  if (!m) return fail('not an AWS4-HMAC-SHA256 Authorization', 403, 'IncompleteSignatureException', `Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters. Authorization=${auth}`);
  const params = {};
  for (const part of m[1].split(',')) {
    const i = part.indexOf('=');
    if (i > 0) params[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  if (!params.Credential || !params.SignedHeaders || !params.Signature) {
    return fail('incomplete Authorization', 403, 'IncompleteSignatureException', `Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters. Authorization=${auth}`);
  }
  const cred = params.Credential.split('/');
  const [accessKeyId, scopeDate, region, service, terminator] = cred;
  out.accessKeyId = accessKeyId;
  out.signature = params.Signature;
  out.signedHeaders = params.SignedHeaders;
  out.scope = cred.slice(1).join('/');
  if (cred.length !== 5 || terminator !== 'aws4_request') {
    return fail('malformed Credential', 403, 'IncompleteSignatureException', `Credential should be scoped correctly: ${params.Credential}`);
  }
  if (accessKeyId !== credentials.accessKeyId) {
    return fail('unknown access key id', 403, 'UnrecognizedClientException', 'The security token included in the request is invalid.');
  }
  if (region !== credentials.region) {
    return fail(`scope region ${region} != ${credentials.region}`, 403, 'InvalidSignatureException', `Credential should be scoped to a valid region. `);
  }
  if (service !== credentials.service) {
    return fail(`scope service ${service} != ${credentials.service}`, 403, 'InvalidSignatureException', `Credential should be scoped to correct service: '${credentials.service}'. `);
  }
  const amzDate = one('x-amz-date');
  const when = parseAmzDate(amzDate);
  if (Number.isNaN(when)) {
    return fail('missing or malformed X-Amz-Date', 403, 'IncompleteSignatureException', `Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header. Authorization=${auth}`);
  }
  if (scopeDate !== amzDate.slice(0, 8)) {
    return fail('scope date differs from X-Amz-Date', 403, 'InvalidSignatureException', `Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '${scopeDate}' != '${amzDate.slice(0, 8)}', from '${amzDate}'.`);
  }
  if (Math.abs(now - when) > maxSkewMs) {
    return fail('signature expired (clock skew)', 403, 'InvalidSignatureException', `Signature expired: ${amzDate} is now earlier than the allowed window.`);
  }
  const signed = params.SignedHeaders.split(';');
  const sorted = [...signed].sort();
  if (signed.some((h) => h !== h.toLowerCase()) || signed.join(';') !== sorted.join(';')) {
    return fail('SignedHeaders not lower-case and sorted', 403, 'InvalidSignatureException', 'The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.');
  }
  if (!signed.includes('host')) {
    return fail('host is not signed', 403, 'InvalidSignatureException', `'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.`);
  }
  for (const h of signed) {
    if (!byName.has(h)) return fail(`signed header ${h} is missing`, 403, 'InvalidSignatureException', 'The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.');
  }
  if (credentials.sessionToken !== undefined && credentials.sessionToken !== null) {
    const token = one('x-amz-security-token');
    if (token !== credentials.sessionToken) {
      return fail('missing or wrong X-Amz-Security-Token', 403, 'UnrecognizedClientException', 'The security token included in the request is invalid.');
    }
  }
  out.securityTokenSigned = signed.includes('x-amz-security-token');

  const url = request.url ?? '/';
  const q = url.indexOf('?');
  const rawPath = q < 0 ? url : url.slice(0, q);
  const rawQuery = q < 0 ? '' : url.slice(q + 1);
  const body = request.body === undefined ? Buffer.alloc(0) : Buffer.from(request.body);
  const payloadHash = sha256Hex(body);
  const declaredHash = one('x-amz-content-sha256');
  if (declaredHash !== undefined && declaredHash !== payloadHash) {
    return fail('X-Amz-Content-Sha256 does not match the body', 400, 'XAmzContentSHA256Mismatch', 'The provided \'x-amz-content-sha256\' header does not match what was computed.');
  }
  const canonicalHeaders = signed
    .map((h) => `${h}:${byName.get(h).map((v) => v.trim().replace(/\s+/g, ' ')).join(',')}\n`)
    .join('');
  out.canonicalRequest = [
    request.method.toUpperCase(),
    canonicalUri(rawPath),
    canonicalQuery(rawQuery),
    canonicalHeaders,
    params.SignedHeaders,
    payloadHash,
  ].join('\n');
  out.stringToSign = ['AWS4-HMAC-SHA256', amzDate, out.scope, sha256Hex(out.canonicalRequest)].join('\n');
  const kDate = hmac(`AWS4${credentials.secretAccessKey}`, scopeDate);
  const kRegion = hmac(kDate, region);
  const kService = hmac(kRegion, service);
  const kSigning = hmac(kService, 'aws4_request');
  out.expectedSignature = createHmac('sha256', kSigning).update(out.stringToSign, 'utf8').digest('hex');
  if (out.expectedSignature !== params.Signature) {
    return fail(
      'signature mismatch',
      403,
      'InvalidSignatureException',
      'The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.\n\n' +
        `The Canonical String for this request should have been\n'${out.canonicalRequest}'\n\n` +
        `The String-to-Sign should have been\n'${out.stringToSign}'\n`,
    );
  }
  out.verified = true;
  return out;
}

// ---------------------------------------------------------------------------------------
// The shared server harness

/**
 * A request as recorded in `mock.requests`:
 *   { method, url (raw, with query), path (raw, percent-encoded, no query), query (object of
 *     decoded params, last value wins), headers (node's lower-case object), rawHeaders,
 *     body (parsed JSON or undefined), rawBody (Buffer), vendor, model (from the path or
 *     body), stream (bool), reply ({kind: 'tool'|'text'|'error', ...}), plus
 *     deployment (Azure) and sigv4 (Bedrock: verifySigV4's result, `verified` bool) }
 */
class VendorMock {
  constructor(vendor, handler, { basePath = '', fragmentSse = false } = {}) {
    this.vendor = vendor;
    this.handler = handler;
    this.basePath = basePath;
    this.fragmentSse = fragmentSse;
    this.requests = [];
    this.failures = [];
    this.counter = 0;
    this.sockets = new Set();
    this.server = http.createServer();
    this.server.keepAliveTimeout = 60_000;
    this.server.on('connection', (socket) => {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
    });
    this.server.on('request', (req, res) => this.onRequest(req, res));
    this.closed = false;
  }

  get port() {
    return this.server.address().port;
  }

  /** `http://127.0.0.1:PORT`. */
  origin() {
    return `http://127.0.0.1:${this.port}`;
  }

  /** The base URL a client/provider config uses for this vendor. */
  baseUrl() {
    return `${this.origin()}${this.basePath}`;
  }

  /** The next request (queued: one entry per call) gets this error answer. */
  failNext({ status = 500, body, headers } = {}) {
    this.failures.push({ status, body, headers });
  }

  async close() {
    if (this.closed) return;
    this.closed = true;
    this.server.closeAllConnections?.();
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server.close(() => resolve()));
  }

  nextId(prefix) {
    this.counter += 1;
    return `${prefix}${randomBytes(6).toString('hex')}${this.counter}`;
  }

  onRequest(req, res) {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const rawBody = Buffer.concat(chunks);
      let body;
      let bodyError = null;
      if (rawBody.length) {
        try {
          body = JSON.parse(rawBody.toString('utf8'));
        } catch (err) {
          bodyError = err.message;
        }
      }
      const q = req.url.indexOf('?');
      const path = q < 0 ? req.url : req.url.slice(0, q);
      const query = Object.fromEntries(new URLSearchParams(q < 0 ? '' : req.url.slice(q + 1)));
      const record = {
        method: req.method,
        url: req.url,
        path,
        query,
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        body,
        bodyError,
        rawBody,
        vendor: this.vendor,
        model: undefined,
        stream: false,
        reply: undefined,
      };
      this.requests.push(record);
      Promise.resolve()
        .then(() => this.handler(this, record, req, res))
        .catch((err) => {
          if (!res.headersSent) {
            res.writeHead(500, { 'content-type': 'text/plain' });
            res.end(`mock error: ${err.stack}`);
          } else res.destroy(err);
        });
    });
  }

  /** The queued failure for this request, if any (consumed). */
  takeFailure() {
    return this.failures.shift();
  }

  sendJson(res, status, obj, headers = {}) {
    const payload = Buffer.from(typeof obj === 'string' ? obj : JSON.stringify(obj));
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': payload.length, ...headers });
    res.end(payload);
  }

  /** Writes SSE event strings one by one (each split in two writes with `fragmentSse`). */
  async sendSse(res, events, headers = {}) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...headers });
    res.flushHeaders();
    res.socket?.setNoDelay(true);
    for (const ev of events) {
      if (res.destroyed) return;
      if (this.fragmentSse && ev.length > 3) {
        const cut = ev.length % 2 === 0 ? ev.length / 2 + 1 : Math.floor(ev.length / 2);
        res.write(ev.slice(0, cut));
        await delay(1);
        res.write(ev.slice(cut));
      } else res.write(ev);
      await delay(1);
    }
    res.end();
  }
}

async function startVendorMock(vendor, handler, { t, ...options }) {
  const mock = new VendorMock(vendor, handler, options);
  await new Promise((resolve) => mock.server.listen(0, '127.0.0.1', resolve));
  if (t) t.after(() => mock.close());
  return mock;
}

/** Applies a queued failNext(): true if it answered. `defaultBody(status)` is the vendor's error body. */
function answerFailure(mock, record, res, defaultBody, defaultHeaders = () => ({})) {
  const failure = mock.takeFailure();
  if (!failure) return false;
  const { status } = failure;
  const body = failure.body ?? defaultBody(status);
  record.reply = { kind: 'error', status, body };
  mock.sendJson(res, status, body, { ...defaultHeaders(status), ...(failure.headers ?? {}) });
  return true;
}

function textOf(content, textType) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return null;
  const texts = content
    .filter((b) => b && typeof b === 'object' && typeof b.text === 'string' && (textType === undefined || b.type === textType))
    .map((b) => b.text);
  return texts.length ? texts.join(' ') : null;
}

/** The text of the last message of `role` that has text (messages with only tool results are skipped). */
function lastUserText(messages, { role = 'user', content = (m) => m.content, textType } = {}) {
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i -= 1) {
    const m = messages[i];
    if (!m || m.role !== role) continue;
    const text = textOf(content(m), textType);
    if (text !== null) return text;
  }
  return '';
}

// ---------------------------------------------------------------------------------------
// Anthropic Messages API

const ANTHROPIC_ERROR_TYPES = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};

/** Anthropic's error body. */
export function anthropicError(type, message) {
  return { type: 'error', error: { type, message } };
}

function anthropicDefaultError(status) {
  const type = ANTHROPIC_ERROR_TYPES[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
  return anthropicError(type, `mock ${type} (${status})`);
}

function anthropicUsage(outputTokens) {
  return {
    input_tokens: USAGE.input,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: USAGE.cached,
    output_tokens: outputTokens,
  };
}

function anthropicSse(type, obj) {
  return `event: ${type}\ndata: ${JSON.stringify({ type, ...obj })}\n\n`;
}

async function handleAnthropic(mock, rec, req, res) {
  const requestId = mock.nextId('req_');
  const hdrs = { 'request-id': requestId };
  if (answerFailure(mock, rec, res, anthropicDefaultError, () => hdrs)) return;
  const err = (status, type, message) => {
    rec.reply = { kind: 'error', status };
    mock.sendJson(res, status, anthropicError(type, message), hdrs);
  };
  if (rec.path === '/v1/messages/count_tokens') return answerAnthropicCountTokens(mock, rec, res, hdrs, err);
  if (rec.path !== '/v1/messages') return err(404, 'not_found_error', 'Not Found');
  if (rec.method !== 'POST') return err(405, 'invalid_request_error', `Method Not Allowed`);
  if (!rec.headers['x-api-key']) return err(401, 'authentication_error', 'x-api-key header is required');
  if (!rec.headers['anthropic-version']) return err(401, 'authentication_error', 'anthropic-version header is required');
  const body = rec.body;
  if (!body || typeof body !== 'object') return err(400, 'invalid_request_error', `There was an error parsing the body of your request: ${rec.bodyError ?? 'empty body'}`);
  rec.model = body.model;
  rec.stream = body.stream === true;
  if (typeof body.model !== 'string') return err(400, 'invalid_request_error', 'model: Field required');
  if (body.max_tokens === undefined) return err(400, 'invalid_request_error', 'max_tokens: Field required');
  if (!Number.isInteger(body.max_tokens) || body.max_tokens < 1) return err(400, 'invalid_request_error', 'max_tokens: Input should be a valid integer greater than or equal to 1');
  if (!Array.isArray(body.messages) || body.messages.length === 0) return err(400, 'invalid_request_error', 'messages: Field required');

  const tools = Array.isArray(body.tools) ? body.tools.filter((x) => x && typeof x.name === 'string') : [];
  const last = body.messages.at(-1);
  const lastIsToolResult = last?.role === 'user' && Array.isArray(last.content) && last.content.some((b) => b?.type === 'tool_result');
  const id = mock.nextId('msg_mock');
  const base = { id, type: 'message', role: 'assistant', model: body.model };

  if (tools.length && !lastIsToolResult) {
    const toolId = mock.nextId('toolu_mock');
    rec.reply = { kind: 'tool', toolName: tools[0].name, toolCallId: toolId, args: TOOL_ARGS };
    if (!rec.stream) {
      return mock.sendJson(res, 200, {
        ...base,
        content: [{ type: 'tool_use', id: toolId, name: tools[0].name, input: { ...TOOL_ARGS } }],
        stop_reason: 'tool_use',
        stop_sequence: null,
        usage: anthropicUsage(USAGE.output),
      }, hdrs);
    }
    return mock.sendSse(res, [
      anthropicSse('message_start', { message: { ...base, content: [], stop_reason: null, stop_sequence: null, usage: anthropicUsage(1) } }),
      anthropicSse('content_block_start', { index: 0, content_block: { type: 'tool_use', id: toolId, name: tools[0].name, input: {} } }),
      anthropicSse('ping', {}),
      anthropicSse('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: '' } }),
      ...TOOL_ARGS_PIECES.map((p) => anthropicSse('content_block_delta', { index: 0, delta: { type: 'input_json_delta', partial_json: p } })),
      anthropicSse('content_block_stop', { index: 0 }),
      anthropicSse('message_delta', { delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: USAGE.output } }),
      anthropicSse('message_stop', {}),
    ], hdrs);
  }

  const userText = lastUserText(body.messages, { textType: 'text' });
  const pieces = replyPieces(VENDOR_NAMES.anthropic, userText);
  rec.reply = { kind: 'text', text: pieces.join(''), pieces };
  if (!rec.stream) {
    return mock.sendJson(res, 200, {
      ...base,
      content: [{ type: 'text', text: pieces.join('') }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: anthropicUsage(USAGE.output),
    }, hdrs);
  }
  return mock.sendSse(res, [
    anthropicSse('message_start', { message: { ...base, content: [], stop_reason: null, stop_sequence: null, usage: anthropicUsage(1) } }),
    anthropicSse('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
    anthropicSse('ping', {}),
    ...pieces.map((text) => anthropicSse('content_block_delta', { index: 0, delta: { type: 'text_delta', text } })),
    anthropicSse('content_block_stop', { index: 0 }),
    anthropicSse('message_delta', { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: USAGE.output } }),
    anthropicSse('message_stop', {}),
  ], hdrs);
}

/** The input_tokens every count_tokens answer of the Anthropic mock reports. */
export const ANTHROPIC_COUNT_TOKENS = 42;

// POST /v1/messages/count_tokens: {"input_tokens": ANTHROPIC_COUNT_TOKENS} (recorded like
// every request; rec.reply = {kind: 'count_tokens', inputTokens}).
function answerAnthropicCountTokens(mock, rec, res, hdrs, err) {
  if (rec.method !== 'POST') return err(405, 'invalid_request_error', 'Method Not Allowed');
  if (!rec.headers['x-api-key']) return err(401, 'authentication_error', 'x-api-key header is required');
  if (!rec.headers['anthropic-version']) return err(401, 'authentication_error', 'anthropic-version header is required');
  const body = rec.body;
  if (!body || typeof body !== 'object') return err(400, 'invalid_request_error', `There was an error parsing the body of your request: ${rec.bodyError ?? 'empty body'}`);
  rec.model = body.model;
  if (typeof body.model !== 'string') return err(400, 'invalid_request_error', 'model: Field required');
  if (!Array.isArray(body.messages) || body.messages.length === 0) return err(400, 'invalid_request_error', 'messages: Field required');
  rec.reply = { kind: 'count_tokens', inputTokens: ANTHROPIC_COUNT_TOKENS };
  return mock.sendJson(res, 200, { input_tokens: ANTHROPIC_COUNT_TOKENS }, hdrs);
}

/** Anthropic Messages mock; baseUrl() is `http://127.0.0.1:PORT/v1`. */
export function startAnthropicMock({ t, fragmentSse = false } = {}) {
  return startVendorMock('anthropic', handleAnthropic, { t, basePath: '/v1', fragmentSse });
}

// ---------------------------------------------------------------------------------------
// Gemini API (generativelanguage v1beta)

const GEMINI_STATUS = {
  400: 'INVALID_ARGUMENT',
  401: 'UNAUTHENTICATED',
  403: 'PERMISSION_DENIED',
  404: 'NOT_FOUND',
  429: 'RESOURCE_EXHAUSTED',
  499: 'CANCELLED',
  500: 'INTERNAL',
  503: 'UNAVAILABLE',
  504: 'DEADLINE_EXCEEDED',
};

/** Google's error body. */
export function geminiError(code, message, status = GEMINI_STATUS[code] ?? (code >= 500 ? 'INTERNAL' : 'INVALID_ARGUMENT')) {
  return { error: { code, message, status } };
}

function geminiUsage(candidates, { final }) {
  const u = {
    promptTokenCount: USAGE.input,
    candidatesTokenCount: candidates,
    totalTokenCount: USAGE.input + candidates,
    cachedContentTokenCount: USAGE.cached,
    promptTokensDetails: [{ modality: 'TEXT', tokenCount: USAGE.input }],
  };
  if (final) u.candidatesTokensDetails = [{ modality: 'TEXT', tokenCount: candidates }];
  return u;
}

async function handleGemini(mock, rec, req, res) {
  if (answerFailure(mock, rec, res, (s) => geminiError(s, `mock error (${s})`))) return;
  const err = (status, message) => {
    rec.reply = { kind: 'error', status };
    mock.sendJson(res, status, geminiError(status, message));
  };
  const m = /^\/v1beta\/models\/([^/]+)$/.exec(rec.path);
  const tail = m ? safeDecode(m[1]) : null;
  const mm = tail ? /^(.+):(generateContent|streamGenerateContent)$/.exec(tail) : null;
  if (!mm) return err(404, `Requested entity was not found. (${rec.method} ${rec.path})`);
  if (rec.method !== 'POST') return err(405, 'Method not allowed');
  if (!rec.headers['x-goog-api-key']) {
    return err(403, 'Method doesn\'t allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.');
  }
  rec.model = mm[1];
  rec.stream = mm[2] === 'streamGenerateContent';
  const sse = rec.query.alt === 'sse';
  const body = rec.body;
  if (!body || typeof body !== 'object') return err(400, `Invalid JSON payload received. ${rec.bodyError ?? 'Empty body'}`);
  if (!Array.isArray(body.contents) || body.contents.length === 0) return err(400, '* GenerateContentRequest.contents: contents is not specified\n');

  const decls = (Array.isArray(body.tools) ? body.tools : []).flatMap((x) => x?.functionDeclarations ?? x?.function_declarations ?? []);
  const last = body.contents.at(-1);
  const lastIsToolResult = Array.isArray(last?.parts) && last.parts.some((p) => p?.functionResponse || p?.function_response);
  const responseId = mock.nextId('mockresp');
  const modelVersion = rec.model;
  const chunk = (parts, { finish, candidates, final }) => {
    const cand = { content: { parts, role: 'model' } };
    if (finish) cand.finishReason = finish;
    cand.index = 0;
    return { candidates: [cand], usageMetadata: geminiUsage(candidates, { final }), modelVersion, responseId };
  };

  let chunks;
  if (decls.length && !lastIsToolResult && typeof decls[0]?.name === 'string') {
    const fc = { functionCall: { name: decls[0].name, args: { ...TOOL_ARGS } } };
    rec.reply = { kind: 'tool', toolName: decls[0].name, args: TOOL_ARGS };
    chunks = [chunk([fc], { finish: 'STOP', candidates: USAGE.output, final: true })];
  } else {
    const userText = lastUserText(body.contents, { content: (c) => c.parts });
    const pieces = replyPieces(VENDOR_NAMES.gemini, userText);
    rec.reply = { kind: 'text', text: pieces.join(''), pieces };
    if (!rec.stream) {
      chunks = [chunk([{ text: pieces.join('') }], { finish: 'STOP', candidates: USAGE.output, final: true })];
    } else {
      // Usage in every chunk, cumulative (as Gemini does): a client must keep the last one.
      chunks = pieces.map((text, i) => {
        const finalChunk = i === pieces.length - 1;
        const cands = finalChunk ? USAGE.output : Math.min(USAGE.output - 1, i + 1);
        return chunk([{ text }], { finish: finalChunk ? 'STOP' : undefined, candidates: cands, final: finalChunk });
      });
    }
  }
  if (!rec.stream) return mock.sendJson(res, 200, chunks[0]);
  if (sse) return mock.sendSse(res, chunks.map((c) => `data: ${JSON.stringify(c)}\r\n\r\n`));
  // streamGenerateContent without alt=sse: one JSON array, written element by element.
  res.writeHead(200, { 'content-type': 'application/json; charset=UTF-8' });
  for (let i = 0; i < chunks.length; i += 1) {
    res.write(`${i === 0 ? '[' : ',\r\n'}${JSON.stringify(chunks[i])}`);
    await delay(1);
  }
  res.end(']');
}

/** Gemini mock; baseUrl() is `http://127.0.0.1:PORT/v1beta`. */
export function startGeminiMock({ t, fragmentSse = false } = {}) {
  return startVendorMock('gemini', handleGemini, { t, basePath: '/v1beta', fragmentSse });
}

// ---------------------------------------------------------------------------------------
// Amazon Bedrock Converse / ConverseStream

const BEDROCK_ERROR_TYPES = {
  400: 'ValidationException',
  403: 'AccessDeniedException',
  404: 'ResourceNotFoundException',
  408: 'ModelTimeoutException',
  424: 'ModelErrorException',
  429: 'ThrottlingException',
  500: 'InternalServerException',
  503: 'ServiceUnavailableException',
};

/** The default Bedrock test credentials. */
export const BEDROCK_CREDENTIALS = Object.freeze({
  accessKeyId: 'AKIDMOCKBEDROCK00001',
  secretAccessKey: 'mockSecretKey/for+tests/0123456789abcdefgh',
  region: 'us-east-1',
  service: 'bedrock',
});

// The byte counts the stream is cut into, cycled (odd sizes, so frames straddle writes).
const BEDROCK_WRITE_SIZES = [1, 3, 7, 5, 13, 29, 2, 61, 11, 97, 17, 131, 9];

function bedrockErrorHeaders(type) {
  return { 'x-amzn-errortype': `${type}:http://internal.amazon.com/coral/com.amazon.bedrock/` };
}

function padding(n) {
  return 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'.slice(0, 1 + (n * 7) % 40);
}

async function handleBedrock(mock, rec, req, res) {
  const requestId = mock.nextId('mock-req-');
  const base = { 'x-amzn-requestid': requestId };
  // The signature is verified (and recorded) for every request, even one scripted to fail.
  rec.sigv4 = verifySigV4({ method: rec.method, url: rec.url, headers: rec.rawHeaders, body: rec.rawBody }, mock.credentials);
  const m = /^\/model\/([^/]+)\/(converse|converse-stream)$/.exec(rec.path);
  if (m) {
    rec.model = safeDecode(m[1]);
    rec.stream = m[2] === 'converse-stream';
  }
  if (answerFailure(
    mock, rec, res,
    (s) => ({ message: `mock ${BEDROCK_ERROR_TYPES[s] ?? 'InternalServerException'} (${s})` }),
    (s) => ({ ...base, ...bedrockErrorHeaders(BEDROCK_ERROR_TYPES[s] ?? 'InternalServerException') }),
  )) return;
  const err = (status, type, message) => {
    rec.reply = { kind: 'error', status };
    mock.sendJson(res, status, { message }, { ...base, ...bedrockErrorHeaders(type) });
  };
  if (!rec.sigv4.verified) {
    const e = rec.sigv4.error;
    return err(e.status, e.errorType, e.message);
  }
  if (!m) return err(404, 'UnknownOperationException', 'Unknown operation');
  if (rec.method !== 'POST') return err(405, 'UnknownOperationException', 'Method not allowed');
  const body = rec.body;
  if (!body || typeof body !== 'object') return err(400, 'SerializationException', `Could not parse the request body: ${rec.bodyError ?? 'empty body'}`);
  if (!Array.isArray(body.messages) || body.messages.length === 0) {
    return err(400, 'ValidationException', "1 validation error detected: Value null at 'messages' failed to satisfy constraint: Member must not be null");
  }

  const tools = (body.toolConfig?.tools ?? []).map((x) => x?.toolSpec).filter((s) => s && typeof s.name === 'string');
  const last = body.messages.at(-1);
  const lastIsToolResult = Array.isArray(last?.content) && last.content.some((c) => c?.toolResult);
  const usage = { inputTokens: USAGE.input, outputTokens: USAGE.output, totalTokens: USAGE.total, cacheReadInputTokens: USAGE.cached, cacheWriteInputTokens: 0 };
  const metrics = { latencyMs: 42 };

  let events;
  if (tools.length && !lastIsToolResult) {
    const toolUseId = mock.nextId('tooluse_mock');
    rec.reply = { kind: 'tool', toolName: tools[0].name, toolCallId: toolUseId, args: TOOL_ARGS };
    if (!rec.stream) {
      return mock.sendJson(res, 200, {
        output: { message: { role: 'assistant', content: [{ toolUse: { toolUseId, name: tools[0].name, input: { ...TOOL_ARGS } } }] } },
        stopReason: 'tool_use',
        usage,
        metrics,
      }, base);
    }
    events = [
      ['messageStart', { role: 'assistant' }],
      ['contentBlockStart', { contentBlockIndex: 0, start: { toolUse: { toolUseId, name: tools[0].name } } }],
      ...TOOL_ARGS_PIECES.map((input) => ['contentBlockDelta', { contentBlockIndex: 0, delta: { toolUse: { input } } }]),
      ['contentBlockStop', { contentBlockIndex: 0 }],
      ['messageStop', { stopReason: 'tool_use' }],
      ['metadata', { usage, metrics }],
    ];
  } else {
    const userText = lastUserText(body.messages);
    const pieces = replyPieces(VENDOR_NAMES.bedrock, userText);
    rec.reply = { kind: 'text', text: pieces.join(''), pieces };
    if (!rec.stream) {
      return mock.sendJson(res, 200, {
        output: { message: { role: 'assistant', content: [{ text: pieces.join('') }] } },
        stopReason: 'end_turn',
        usage,
        metrics,
      }, base);
    }
    events = [
      ['messageStart', { role: 'assistant' }],
      ...pieces.map((text) => ['contentBlockDelta', { contentBlockIndex: 0, delta: { text } }]),
      ['contentBlockStop', { contentBlockIndex: 0 }],
      ['messageStop', { stopReason: 'end_turn' }],
      ['metadata', { usage, metrics }],
    ];
  }
  // Bedrock pads each payload with a "p" field of varying length; clients must ignore it.
  const stream = Buffer.concat(events.map(([type, payload], i) => eventStreamEvent(type, { ...payload, p: padding(i) })));
  rec.streamBytes = stream.length;
  res.writeHead(200, { 'content-type': 'application/vnd.amazon.eventstream', ...base });
  res.flushHeaders();
  res.socket?.setNoDelay(true);
  let off = 0;
  for (let n = 0; off < stream.length; n += 1) {
    if (res.destroyed) return;
    const size = BEDROCK_WRITE_SIZES[n % BEDROCK_WRITE_SIZES.length];
    res.write(stream.subarray(off, off + size));
    off += size;
    await delay(1);
  }
  res.end();
}

/**
 * Bedrock runtime mock (Converse and ConverseStream) verifying SigV4 against `credentials`
 * (default BEDROCK_CREDENTIALS); baseUrl() is `http://127.0.0.1:PORT`.
 */
export async function startBedrockMock({ t, credentials = BEDROCK_CREDENTIALS } = {}) {
  const mock = await startVendorMock('bedrock', handleBedrock, { t });
  mock.credentials = { service: 'bedrock', ...credentials };
  return mock;
}

// ---------------------------------------------------------------------------------------
// OpenAI chat completions (and Azure OpenAI)

const CREATED = 1_700_000_000;

/** OpenAI's error body. */
export function openaiErrorBody(message, type = 'invalid_request_error', code = null, param = null) {
  return { error: { message, type, param, code } };
}

function openaiDefaultError(status) {
  if (status === 429) return openaiErrorBody('Rate limit reached for mock requests.', 'requests', 'rate_limit_exceeded');
  if (status === 401) return openaiErrorBody('Incorrect API key provided.', 'invalid_request_error', 'invalid_api_key');
  if (status >= 500) return openaiErrorBody('The server had an error while processing your request.', 'server_error', null);
  return openaiErrorBody(`mock error (${status})`, 'invalid_request_error', null);
}

function azureError(status, message) {
  return { error: { code: String(status), message } };
}

function openaiUsage() {
  return {
    prompt_tokens: USAGE.input,
    completion_tokens: USAGE.output,
    total_tokens: USAGE.total,
    prompt_tokens_details: { cached_tokens: USAGE.cached, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
  };
}

async function handleOpenAI(mock, rec, req, res) {
  const azureMatch = /^\/openai\/deployments\/([^/]+)\/chat\/completions$/.exec(rec.path);
  const azure = Boolean(azureMatch);
  const requestId = mock.nextId('req_mock');
  const hdrs = azure ? { 'apim-request-id': requestId, 'x-request-id': requestId } : { 'x-request-id': requestId };
  if (azureMatch) rec.deployment = safeDecode(azureMatch[1]);
  rec.vendor = azure ? 'azure' : 'openai';
  if (answerFailure(mock, rec, res, (s) => (azure ? azureError(s, `mock error (${s})`) : openaiDefaultError(s)), () => hdrs)) return;
  const err = (status, body) => {
    rec.reply = { kind: 'error', status };
    mock.sendJson(res, status, body, hdrs);
  };
  if (azure) {
    if (!rec.headers['api-key']) {
      return err(401, azureError(401, 'Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.'));
    }
    if (!rec.query['api-version']) return err(404, azureError(404, 'Resource not found'));
    rec.apiVersion = rec.query['api-version'];
  } else {
    if (rec.path === '/v1/responses' && !mock.chatOnly) return handleOpenAIResponses(mock, rec, res, hdrs, err);
    if (rec.path !== '/v1/chat/completions') return err(404, openaiErrorBody(`Invalid URL (${rec.method} ${rec.path})`, 'invalid_request_error', null));
    if (!/^Bearer \S+/.test(rec.headers.authorization ?? '')) {
      return err(401, openaiErrorBody("You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", 'invalid_request_error', null));
    }
  }
  if (rec.method !== 'POST') return err(405, openaiErrorBody(`Method ${rec.method} not allowed`));
  const body = rec.body;
  if (!body || typeof body !== 'object') return err(400, openaiErrorBody(`We could not parse the JSON body of your request. (${rec.bodyError ?? 'empty body'})`));
  rec.model = azure ? rec.deployment : body.model;
  rec.stream = body.stream === true;
  if (!azure && typeof body.model !== 'string') return err(400, openaiErrorBody('you must provide a model parameter', 'invalid_request_error', null));
  if (!Array.isArray(body.messages) || body.messages.length === 0) {
    return err(400, openaiErrorBody("Missing required parameter: 'messages'.", 'invalid_request_error', 'missing_required_parameter', 'messages'));
  }

  const vendorKey = azure ? 'azure' : 'openai';
  const model = body.model ?? rec.deployment;
  const id = mock.nextId('chatcmpl-mock');
  const tools = (Array.isArray(body.tools) ? body.tools : []).filter((x) => x?.type === 'function' && typeof x.function?.name === 'string');
  const lastIsToolResult = ['tool', 'function'].includes(body.messages.at(-1)?.role);
  const withUsage = body.stream_options?.include_usage === true;
  const azureExtras = azure ? { prompt_filter_results: [{ prompt_index: 0, content_filter_results: {} }] } : {};
  const choiceExtras = azure ? { content_filter_results: {} } : {};
  const chunk = (delta, finish) => {
    const c = {
      id,
      object: 'chat.completion.chunk',
      created: CREATED,
      model,
      system_fingerprint: 'fp_mock',
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish, ...(finish || !azure ? {} : choiceExtras) }],
    };
    if (withUsage) c.usage = null;
    return c;
  };

  let message;
  let finish;
  let deltas;
  if (tools.length && !lastIsToolResult) {
    const callId = mock.nextId('call_mock');
    const name = tools[0].function.name;
    rec.reply = { kind: 'tool', toolName: name, toolCallId: callId, args: TOOL_ARGS };
    finish = 'tool_calls';
    message = {
      role: 'assistant',
      content: null,
      tool_calls: [{ id: callId, type: 'function', function: { name, arguments: TOOL_ARGS_JSON } }],
      refusal: null,
      annotations: [],
    };
    deltas = [
      { role: 'assistant', content: null, tool_calls: [{ index: 0, id: callId, type: 'function', function: { name, arguments: '' } }], refusal: null },
      ...TOOL_ARGS_PIECES.map((p) => ({ tool_calls: [{ index: 0, function: { arguments: p } }] })),
    ];
  } else {
    const userText = lastUserText(body.messages, { textType: 'text' });
    const pieces = replyPieces(VENDOR_NAMES[vendorKey], userText);
    rec.reply = { kind: 'text', text: pieces.join(''), pieces };
    finish = 'stop';
    message = { role: 'assistant', content: pieces.join(''), refusal: null, annotations: [] };
    deltas = [{ role: 'assistant', content: '', refusal: null }, ...pieces.map((content) => ({ content }))];
  }

  if (!rec.stream) {
    return mock.sendJson(res, 200, {
      id,
      object: 'chat.completion',
      created: CREATED,
      model,
      system_fingerprint: 'fp_mock',
      ...azureExtras,
      choices: [{ index: 0, message, logprobs: null, finish_reason: finish, ...choiceExtras }],
      usage: openaiUsage(),
    }, hdrs);
  }
  const events = [];
  // Azure opens a stream with a chunk that has no choices, only the prompt filter results.
  if (azure && mock.azureFilterChunk) {
    events.push({ id: '', object: '', created: 0, model: '', choices: [], ...azureExtras });
  }
  for (const d of deltas) events.push(chunk(d, null));
  events.push(chunk({}, finish));
  if (withUsage) {
    events.push({ id, object: 'chat.completion.chunk', created: CREATED, model, system_fingerprint: 'fp_mock', choices: [], usage: openaiUsage() });
  }
  return mock.sendSse(res, [...events.map((e) => `data: ${JSON.stringify(e)}\n\n`), 'data: [DONE]\n\n'], hdrs);
}

// OpenAI Responses API (`POST /v1/responses`), same script: a function_call item when the
// request has function tools and the last input item is not a function_call_output, else a
// message with one output_text part. Stream: response.created, response.in_progress,
// response.output_item.added, (content_part.added, output_text.delta..., output_text.done,
// content_part.done | function_call_arguments.delta..., function_call_arguments.done),
// response.output_item.done, response.completed; each `event: T\ndata: {"type": T,
// "sequence_number": n, ...}\n\n`, no [DONE].

function responsesUserText(input) {
  if (typeof input === 'string') return input;
  if (!Array.isArray(input)) return '';
  for (let i = input.length - 1; i >= 0; i -= 1) {
    const item = input[i];
    if (!item || (item.type !== undefined && item.type !== 'message') || item.role !== 'user') continue;
    if (typeof item.content === 'string') return item.content;
    const text = textOf(item.content, 'input_text');
    if (text !== null) return text;
  }
  return '';
}

function responsesUsage() {
  return {
    input_tokens: USAGE.input,
    input_tokens_details: { cached_tokens: USAGE.cached },
    output_tokens: USAGE.output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: USAGE.total,
  };
}

async function handleOpenAIResponses(mock, rec, res, hdrs, err) {
  if (!/^Bearer \S+/.test(rec.headers.authorization ?? '')) {
    return err(401, openaiErrorBody("You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", 'invalid_request_error', null));
  }
  if (rec.method !== 'POST') return err(405, openaiErrorBody(`Method ${rec.method} not allowed`));
  const body = rec.body;
  if (!body || typeof body !== 'object') return err(400, openaiErrorBody(`We could not parse the JSON body of your request. (${rec.bodyError ?? 'empty body'})`));
  rec.api = 'responses';
  rec.model = body.model;
  rec.stream = body.stream === true;
  if (typeof body.model !== 'string') return err(400, openaiErrorBody("Missing required parameter: 'model'.", 'invalid_request_error', 'missing_required_parameter', 'model'));
  if (typeof body.input !== 'string' && !Array.isArray(body.input)) {
    return err(400, openaiErrorBody("Missing required parameter: 'input'.", 'invalid_request_error', 'missing_required_parameter', 'input'));
  }
  const tools = (Array.isArray(body.tools) ? body.tools : []).filter((x) => x?.type === 'function' && typeof x.name === 'string');
  const lastIsToolResult = Array.isArray(body.input) && body.input.at(-1)?.type === 'function_call_output';
  const id = mock.nextId('resp_mock');
  const response = (status, output, usage) => ({
    id,
    object: 'response',
    created_at: CREATED,
    status,
    background: false,
    error: null,
    incomplete_details: null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    model: body.model,
    output,
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    reasoning: { effort: null, summary: null },
    store: body.store ?? true,
    temperature: body.temperature ?? 1,
    text: { format: { type: 'text' } },
    tool_choice: body.tool_choice ?? 'auto',
    tools: body.tools ?? [],
    top_p: body.top_p ?? 1,
    truncation: 'disabled',
    usage,
    user: body.user ?? null,
    metadata: body.metadata ?? {},
  });

  let item;
  let middle; // [type, fields] events between output_item.added and output_item.done
  if (tools.length && !lastIsToolResult) {
    const callId = mock.nextId('call_mock');
    const itemId = mock.nextId('fc_mock');
    const name = tools[0].name;
    rec.reply = { kind: 'tool', toolName: name, toolCallId: callId, itemId, args: TOOL_ARGS };
    item = { id: itemId, type: 'function_call', status: 'completed', arguments: TOOL_ARGS_JSON, call_id: callId, name };
    middle = [
      ...TOOL_ARGS_PIECES.map((delta) => ['response.function_call_arguments.delta', { item_id: itemId, output_index: 0, delta }]),
      ['response.function_call_arguments.done', { item_id: itemId, output_index: 0, name, arguments: TOOL_ARGS_JSON }],
    ];
  } else {
    const pieces = replyPieces(VENDOR_NAMES.openai, responsesUserText(body.input));
    const text = pieces.join('');
    const itemId = mock.nextId('msg_mock');
    rec.reply = { kind: 'text', text, pieces, itemId };
    const part = (t) => ({ type: 'output_text', annotations: [], logprobs: [], text: t });
    item = { id: itemId, type: 'message', status: 'completed', role: 'assistant', content: [part(text)] };
    const at = { item_id: itemId, output_index: 0, content_index: 0 };
    middle = [
      ['response.content_part.added', { ...at, part: part('') }],
      ...pieces.map((delta) => ['response.output_text.delta', { ...at, delta, logprobs: [] }]),
      ['response.output_text.done', { ...at, text, logprobs: [] }],
      ['response.content_part.done', { ...at, part: part(text) }],
    ];
  }
  if (!rec.stream) return mock.sendJson(res, 200, response('completed', [item], responsesUsage()), hdrs);

  const started = item.type === 'message'
    ? { ...item, status: 'in_progress', content: [] }
    : { ...item, status: 'in_progress', arguments: '' };
  const events = [
    ['response.created', { response: response('in_progress', [], null) }],
    ['response.in_progress', { response: response('in_progress', [], null) }],
    ['response.output_item.added', { output_index: 0, item: started }],
    ...middle,
    ['response.output_item.done', { output_index: 0, item }],
    ['response.completed', { response: response('completed', [item], responsesUsage()) }],
  ];
  return mock.sendSse(res, events.map(([type, fields], n) => `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: n, ...fields })}\n\n`), hdrs);
}

/**
 * OpenAI chat-completions mock: `POST /v1/chat/completions` and `POST /v1/responses`
 * (Authorization: Bearer required;
 * baseUrl() is `http://127.0.0.1:PORT/v1`) and Azure's `POST /openai/deployments/<dep>/
 * chat/completions?api-version=...` (header api-key required; azureEndpoint() is the origin).
 * `azureFilterChunk` (default true): Azure streams start with a choices-less
 * prompt_filter_results chunk, as the real service's do.
 * `chatOnly`: a server that serves chat completions but not the Responses API (Ollama,
 * llama.cpp, ...): `/v1/responses` is a 404 like any unknown path.
 */
export async function startOpenAIChatMock({ t, fragmentSse = false, azureFilterChunk = true, chatOnly = false } = {}) {
  const mock = await startVendorMock('openai', handleOpenAI, { t, basePath: '/v1', fragmentSse });
  mock.azureFilterChunk = azureFilterChunk;
  mock.chatOnly = chatOnly;
  mock.azureEndpoint = () => mock.origin();
  return mock;
}
