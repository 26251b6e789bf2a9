// HTTP client helpers (fetch), an SSE event reader, and the OpenAI error assertion.
import assert from 'node:assert/strict';
import { STACK_TRACE_PATTERN, withTimeout } from './util.mjs';

const REQUEST_TIMEOUT_MS = 10_000;

function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** `{ status, headers (plain, lower-case), text, json }` from a fetch Response. */
export async function toResult(response) {
  const text = await response.text();
  return { status: response.status, headers: Object.fromEntries(response.headers), text, json: parseJson(text) };
}

/** The same shape from a raw parsed response (lib/raw.mjs). */
export function rawToResult(raw) {
  const text = raw.body.toString('utf8');
  return { status: raw.status, headers: raw.headers, text, json: parseJson(text) };
}

/** Sends a request and returns the whole Response (body unread). */
export function send(baseUrl, path, { method = 'GET', json, body, headers = {}, signal } = {}) {
  const init = { method, headers: { ...headers }, signal: signal ?? AbortSignal.timeout(REQUEST_TIMEOUT_MS) };
  if (json !== undefined) {
    init.body = JSON.stringify(json);
    init.headers['content-type'] ??= 'application/json';
  } else if (body !== undefined) {
    init.body = body;
    init.headers['content-type'] ??= 'application/json';
  }
  return fetch(`${baseUrl}${path}`, init);
}

/** Sends a request and reads the whole body: `{ status, headers, text, json }`. */
export async function request(baseUrl, path, options) {
  return toResult(await send(baseUrl, path, options));
}

/** POST with a JSON body (object) or raw string `body`. */
export function post(baseUrl, path, jsonOrString, options = {}) {
  const key = typeof jsonOrString === 'string' ? 'body' : 'json';
  return request(baseUrl, path, { ...options, method: 'POST', [key]: jsonOrString });
}

/** A chat request body. */
export function chatBody(model, { stream = false, content = 'Say hello', ...extra } = {}) {
  return { model, messages: [{ role: 'user', content }], ...(stream ? { stream: true } : {}), ...extra };
}

/**
 * Async iterator of SSE events `{ event, data }` over a fetch Response body.
 * A trailing partial event (no blank line after it) is not yielded.
 */
export async function* sseEvents(response) {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of response.body) {
    buffer += decoder.decode(chunk, { stream: true }).replace(/\r\n/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const ev = { event: null, data: null };
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
        if (field === 'data') ev.data = ev.data === null ? value : `${ev.data}\n${value}`;
        else if (field === 'event') ev.event = value;
      }
      if (ev.data !== null) yield ev;
    }
  }
}

/**
 * POSTs a streaming request, asserts a 200 SSE response and waits for its first event:
 * `{ res, events, first }` (events: the iterator, positioned after the first event).
 */
export async function openStream(baseUrl, body, { path = '/v1/chat/completions', signal, headers } = {}) {
  const res = await send(baseUrl, path, { method: 'POST', json: body, signal, headers });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
  const events = sseEvents(res);
  const first = await withTimeout(events.next(), 3000, 'the first SSE event through tahua');
  assert.equal(first.done, false, 'a first event');
  return { res, events, first: first.value };
}

/**
 * Asserts that SSE data strings end with one error event whose code is in `codes`
 * (optionally followed by [DONE]) and that no other event is an error. Returns the error.
 */
export function expectFinalErrorEvent(data, codes) {
  const withoutDone = data.at(-1) === '[DONE]' ? data.slice(0, -1) : data;
  assert.ok(withoutDone.length > 0, 'some events');
  const last = JSON.parse(withoutDone.at(-1));
  assert.ok(last.error, `last event is an error event, got ${withoutDone.at(-1)}`);
  assert.ok(codes.includes(last.error.code), `error.code ${last.error.code} in ${codes}`);
  assert.equal(typeof last.error.message, 'string');
  assert.ok(withoutDone.slice(0, -1).every((d) => d !== '[DONE]' && !JSON.parse(d).error), 'exactly one error event, no earlier [DONE]');
  return last.error;
}

/** Reads all remaining events of an `sseEvents` iterator into data strings. */
export async function collectData(events) {
  const out = [];
  for await (const ev of events) out.push(ev.data);
  return out;
}

/** Content text of chat.completion.chunk data strings (ignores [DONE] and errors). */
export function chatText(dataList) {
  return dataList
    .filter((d) => d !== '[DONE]')
    .map((d) => JSON.parse(d))
    .map((c) => c.choices?.[0]?.delta?.content ?? '')
    .join('');
}

/**
 * Asserts a gateway-made error: status, JSON content type, OpenAI error shape
 * `{error:{message,type,param,code}}`, the code, and no stack trace in the body.
 */
export function expectError(result, status, code) {
  const where = `${result.status} ${result.text}`;
  assert.equal(result.status, status, `status; body: ${where}`);
  assert.match(result.headers['content-type'] ?? '', /^application\/json/, `content-type; ${where}`);
  assert.ok(result.json && typeof result.json === 'object', `JSON body; ${where}`);
  const { error } = result.json;
  assert.ok(error && typeof error === 'object', `error object; ${where}`);
  assert.equal(typeof error.message, 'string', `error.message; ${where}`);
  assert.ok(error.message.length > 0, `error.message not empty; ${where}`);
  assert.equal(typeof error.type, 'string', `error.type; ${where}`);
  assert.ok('param' in error, `error.param present; ${where}`);
  if (Array.isArray(code)) assert.ok(code.includes(error.code), `error.code ${error.code} in ${code}; ${where}`);
  else assert.equal(error.code, code, `error.code; ${where}`);
  assert.doesNotMatch(result.text, STACK_TRACE_PATTERN, 'no stack trace in the body');
  return error;
}
