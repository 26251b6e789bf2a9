// Self-test of the vendor-format mock upstreams (lib/vendor_mocks.mjs), with plain fetch:
// no gateway involved. Checks each mock's wire format, the scripted behaviour, failNext,
// SigV4 verification (against AWS's published test vectors and a signer written here) and
// the event-stream / SSE framing.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, createHmac } from 'node:crypto';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI, { AzureOpenAI } from 'openai';
import {
  BEDROCK_CREDENTIALS,
  STOP_REASONS,
  TOOL_ARGS,
  TOOL_ARGS_JSON,
  USAGE,
  VENDOR_NAMES,
  crc32,
  decodeEventStream,
  encodeEventStreamMessage,
  parseSse,
  readSse,
  replyText,
  startAnthropicMock,
  startBedrockMock,
  startGeminiMock,
  startOpenAIChatMock,
  verifySigV4,
} from './lib/vendor_mocks.mjs';

const WEATHER_TOOL_DESC = 'Current weather in a city';
const LONG_TEXT = 'Please tell me about the weather in Paris today, in detail.'; // > 40 chars

function postJson(url, body, headers = {}) {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
}

/** Asserts that every SSE event was written as `event: X\ndata: ...\n\n` / `data: ...SEP`. */
function assertSseFraming(text, { sep = '\n\n', named = false } = {}) {
  assert.ok(text.endsWith(sep), `stream ends with ${JSON.stringify(sep)}`);
  const blocks = text.slice(0, -sep.length).split(sep);
  for (const block of blocks) {
    if (named) assert.match(block, /^event: [a-z_]+\ndata: \{.*\}$/s, `named event block: ${JSON.stringify(block)}`);
    else assert.match(block, /^data: .+$/s, `data block: ${JSON.stringify(block)}`);
    assert.ok(!block.slice(block.indexOf('data: ') + 6).includes('\n'), 'one data line per event');
  }
  return blocks.length;
}

// --- an independent SigV4 signer (from the AWS spec, not the mock's verifier) -------------

function rfc3986(s) {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

function amzDateOf(date) {
  return date.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');
}

/** Returns the headers to add (x-amz-date, authorization, maybe x-amz-security-token). */
function signV4({ method, url, headers = {}, body = '', credentials, amzDate = amzDateOf(new Date()), signToken = true }) {
  const u = new URL(url);
  const extra = { 'x-amz-date': amzDate };
  if (credentials.sessionToken && signToken) extra['x-amz-security-token'] = credentials.sessionToken;
  const toSign = { host: u.host, ...Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v])), ...extra };
  const names = Object.keys(toSign).sort();
  const canonicalHeaders = names.map((n) => `${n}:${String(toSign[n]).trim()}\n`).join('');
  const signedHeaders = names.join(';');
  // Non-S3 services: the (already encoded) path is encoded once more, segment by segment.
  const path = u.pathname.split('/').map(rfc3986).join('/') || '/';
  const query = [...u.searchParams]
    .map(([k, v]) => `${rfc3986(k)}=${rfc3986(v)}`)
    .sort()
    .join('&');
  const payloadHash = createHash('sha256').update(body).digest('hex');
  const canonical = [method, path, query, canonicalHeaders, signedHeaders, payloadHash].join('\n');
  const date = amzDate.slice(0, 8);
  const scope = `${date}/${credentials.region}/${credentials.service}/aws4_request`;
  const stringToSign = ['AWS4-HMAC-SHA256', amzDate, scope, createHash('sha256').update(canonical).digest('hex')].join('\n');
  let key = `AWS4${credentials.secretAccessKey}`;
  for (const part of [date, credentials.region, credentials.service, 'aws4_request']) key = createHmac('sha256', key).update(part).digest();
  const signature = createHmac('sha256', key).update(stringToSign).digest('hex');
  const out = { ...extra, authorization: `AWS4-HMAC-SHA256 Credential=${credentials.accessKeyId}/${scope}, SignedHeaders=${signedHeaders}, Signature=${signature}` };
  if (credentials.sessionToken && !signToken) out['x-amz-security-token'] = credentials.sessionToken;
  return out;
}

// AWS's SigV4 test suite (get-vanilla, get-vanilla-query-order-key-case, post-vanilla).
const AWS_EXAMPLE = {
  accessKeyId: 'AKIDEXAMPLE',
  secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
  region: 'us-east-1',
  service: 'service',
};
const AWS_VECTORS = [
  ['GET', '/', '5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31'],
  ['GET', '/?Param2=value2&Param1=value1', 'b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500'],
  ['POST', '/', '5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b'],
];
const AWS_VECTOR_TIME = Date.UTC(2015, 7, 30, 12, 36, 0);

describe('framing helpers', () => {
  it('crc32 gives the standard check value and the event-stream codec round-trips', () => {
    assert.equal(crc32(Buffer.from('123456789')), 0xcbf43926);
    assert.equal(crc32(Buffer.alloc(0)), 0);
    const frame = encodeEventStreamMessage({ ':event-type': 'x', ':message-type': 'event' }, { a: 1 });
    const [msg] = decodeEventStream(frame);
    assert.deepEqual(msg.headers, { ':event-type': 'x', ':message-type': 'event' });
    assert.deepEqual(msg.json, { a: 1 });
    assert.equal(msg.length, frame.length);
    assert.equal(frame.readUInt32BE(0), frame.length, 'prelude total length');
    const bad = Buffer.from(frame);
    bad[bad.length - 6] ^= 0x01; // a payload byte
    assert.throws(() => decodeEventStream(bad), /message CRC mismatch/);
    const badPrelude = Buffer.from(frame);
    badPrelude[5] ^= 0x01;
    assert.throws(() => decodeEventStream(badPrelude), /prelude CRC mismatch/);
    assert.throws(() => decodeEventStream(frame.subarray(0, frame.length - 1)), /incomplete/);
  });

  it('parseSse rejects a stream that ends inside an event', () => {
    assert.deepEqual(parseSse('event: a\ndata: {"x":1}\n\n').map((e) => [e.event, e.json]), [['a', { x: 1 }]]);
    assert.equal(parseSse('data: 1\r\n\r\ndata: 2\r\n\r\n').length, 2);
    assert.throws(() => parseSse('data: 1\n\ndata: 2\n'), /ends inside an event/);
    assert.throws(() => parseSse('data: 1\n\ndata: 2'), /ends inside an event/);
  });
});

describe('SigV4 verifier and test signer vs AWS test vectors', () => {
  for (const [method, url, signature] of AWS_VECTORS) {
    it(`${method} ${url}`, () => {
      const headers = { 'x-amz-date': '20150830T123600Z' };
      const signed = signV4({ method, url: `https://example.amazonaws.com${url}`, headers: {}, credentials: AWS_EXAMPLE, amzDate: '20150830T123600Z' });
      assert.ok(signed.authorization.endsWith(`Signature=${signature}`), `test signer: ${signed.authorization}`);
      const auth = `AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=${signature}`;
      const request = {
        method,
        url,
        headers: [['Host', 'example.amazonaws.com'], ['X-Amz-Date', headers['x-amz-date']], ['Authorization', auth]],
        body: '',
      };
      const r = verifySigV4(request, AWS_EXAMPLE, { now: AWS_VECTOR_TIME });
      assert.equal(r.verified, true, `${r.reason}\n${r.canonicalRequest}`);
      const wrong = verifySigV4({ ...request, method: method === 'GET' ? 'POST' : 'GET' }, AWS_EXAMPLE, { now: AWS_VECTOR_TIME });
      assert.equal(wrong.verified, false);
      assert.equal(wrong.reason, 'signature mismatch');
      const late = verifySigV4(request, AWS_EXAMPLE, { now: AWS_VECTOR_TIME + 10 * 60_000 });
      assert.equal(late.verified, false);
      assert.match(late.reason, /expired/);
    });
  }
});

describe('Anthropic mock', () => {
  const headers = { 'x-api-key': 'sk-ant-test', 'anthropic-version': '2023-06-01' };
  const tools = [
    { name: 'get_weather', description: WEATHER_TOOL_DESC, input_schema: { type: 'object', properties: { location: { type: 'string' } } } },
    { name: 'other_tool', input_schema: { type: 'object' } },
  ];

  it('requires x-api-key, anthropic-version and max_tokens', async (t) => {
    const mock = await startAnthropicMock({ t });
    const body = { model: 'claude-test', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] };
    for (const h of [{ 'anthropic-version': '2023-06-01' }, { 'x-api-key': 'k' }]) {
      const res = await postJson(`${mock.baseUrl()}/messages`, body, h);
      assert.equal(res.status, 401);
      const json = await res.json();
      assert.equal(json.type, 'error');
      assert.equal(json.error.type, 'authentication_error');
      assert.equal(typeof json.error.message, 'string');
    }
    const { max_tokens: _omit, ...noMax } = body;
    const res = await postJson(`${mock.baseUrl()}/messages`, noMax, headers);
    assert.equal(res.status, 400);
    assert.deepEqual((await res.json()).error.type, 'invalid_request_error');
    assert.equal(mock.requests.length, 3);
  });

  it('non-streaming text, truncated user text, usage and request log', async (t) => {
    const mock = await startAnthropicMock({ t });
    assert.match(mock.baseUrl(), /^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    const res = await postJson(`${mock.baseUrl()}/messages`, {
      model: 'claude-test',
      max_tokens: 64,
      system: 'Be brief',
      messages: [
        { role: 'user', content: 'first' },
        { role: 'assistant', content: 'ok' },
        { role: 'user', content: [{ type: 'text', text: LONG_TEXT }] },
      ],
    }, headers);
    assert.equal(res.status, 200);
    assert.ok(res.headers.get('request-id'));
    const msg = await res.json();
    assert.match(msg.id, /^msg_/);
    assert.equal(msg.type, 'message');
    assert.equal(msg.role, 'assistant');
    assert.equal(msg.model, 'claude-test');
    assert.deepEqual(msg.content, [{ type: 'text', text: `Hello from Anthropic! You said: ${LONG_TEXT.slice(0, 40)}` }]);
    assert.equal(msg.stop_reason, 'end_turn');
    assert.equal(msg.stop_sequence, null);
    assert.deepEqual(msg.usage, { input_tokens: 11, cache_creation_input_tokens: 0, cache_read_input_tokens: 3, output_tokens: 7 });
    const rec = mock.requests[0];
    assert.equal(rec.method, 'POST');
    assert.equal(rec.path, '/v1/messages');
    assert.equal(rec.headers['x-api-key'], 'sk-ant-test');
    assert.equal(rec.body.system, 'Be brief');
    assert.equal(rec.reply.kind, 'text');
  });

  it('non-streaming tool call, then text after the tool result', async (t) => {
    const mock = await startAnthropicMock({ t });
    const messages = [{ role: 'user', content: 'Weather in Paris?' }];
    const res = await postJson(`${mock.baseUrl()}/messages`, { model: 'claude-test', max_tokens: 64, tools, messages }, headers);
    const msg = await res.json();
    assert.equal(msg.stop_reason, STOP_REASONS.anthropic.tool);
    assert.equal(msg.content.length, 1);
    const [block] = msg.content;
    assert.equal(block.type, 'tool_use');
    assert.match(block.id, /^toolu_/);
    assert.equal(block.name, 'get_weather');
    assert.deepEqual(block.input, TOOL_ARGS);
    const followUp = [
      ...messages,
      { role: 'assistant', content: [block] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: block.id, content: '21C' }] },
    ];
    const res2 = await postJson(`${mock.baseUrl()}/messages`, { model: 'claude-test', max_tokens: 64, tools, messages: followUp }, headers);
    const msg2 = await res2.json();
    assert.equal(msg2.stop_reason, 'end_turn');
    assert.equal(msg2.content[0].text, replyText(VENDOR_NAMES.anthropic, 'Weather in Paris?'));
  });

  it('streaming text: event sequence, >= 3 text deltas, usage', async (t) => {
    const mock = await startAnthropicMock({ t, fragmentSse: true });
    const res = await postJson(`${mock.baseUrl()}/messages`, { model: 'claude-test', max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'Hi there' }] }, headers);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const text = await res.text();
    assertSseFraming(text, { named: true });
    const events = parseSse(text);
    for (const e of events) assert.equal(e.json.type, e.event, 'data.type matches the event name');
    const names = events.map((e) => e.event);
    assert.deepEqual(names.slice(0, 3), ['message_start', 'content_block_start', 'ping']);
    assert.deepEqual(names.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
    const deltas = events.filter((e) => e.event === 'content_block_delta');
    assert.ok(deltas.length >= 3);
    assert.ok(deltas.every((e) => e.json.delta.type === 'text_delta' && e.json.index === 0));
    assert.equal(deltas.map((e) => e.json.delta.text).join(''), 'Hello from Anthropic! You said: Hi there');
    const start = events[0].json.message;
    assert.match(start.id, /^msg_/);
    assert.deepEqual(start.content, []);
    assert.equal(start.stop_reason, null);
    assert.equal(start.usage.input_tokens, USAGE.input);
    assert.equal(start.usage.cache_read_input_tokens, USAGE.cached);
    const md = events.at(-2).json;
    assert.deepEqual(md.delta, { stop_reason: 'end_turn', stop_sequence: null });
    assert.deepEqual(md.usage, { output_tokens: USAGE.output });
    assert.equal(mock.requests[0].stream, true);
  });

  it('streaming tool call: input_json_delta pieces concatenate to the arguments', async (t) => {
    const mock = await startAnthropicMock({ t });
    const res = await postJson(`${mock.baseUrl()}/messages`, { model: 'claude-test', max_tokens: 64, stream: true, tools, messages: [{ role: 'user', content: 'Weather?' }] }, headers);
    const events = await readSse(res);
    const start = events.find((e) => e.event === 'content_block_start').json;
    assert.deepEqual(start.content_block, { type: 'tool_use', id: start.content_block.id, name: 'get_weather', input: {} });
    const parts = events.filter((e) => e.event === 'content_block_delta').map((e) => e.json.delta);
    assert.ok(parts.length >= 3);
    assert.ok(parts.every((d) => d.type === 'input_json_delta'));
    assert.equal(parts.map((d) => d.partial_json).join(''), TOOL_ARGS_JSON);
    assert.deepEqual(JSON.parse(parts.map((d) => d.partial_json).join('')), TOOL_ARGS);
    assert.equal(events.find((e) => e.event === 'message_delta').json.delta.stop_reason, 'tool_use');
    assert.equal(events.at(-1).event, 'message_stop');
  });

  it('failNext answers once with the given (or default) error', async (t) => {
    const mock = await startAnthropicMock({ t });
    mock.failNext({ status: 529 });
    mock.failNext({ status: 429, body: { type: 'error', error: { type: 'rate_limit_error', message: 'slow down' } }, headers: { 'retry-after': '2' } });
    const body = { model: 'claude-test', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] };
    const r1 = await postJson(`${mock.baseUrl()}/messages`, body, headers);
    assert.equal(r1.status, 529);
    assert.equal((await r1.json()).error.type, 'overloaded_error');
    const r2 = await postJson(`${mock.baseUrl()}/messages`, body, headers);
    assert.equal(r2.status, 429);
    assert.equal(r2.headers.get('retry-after'), '2');
    assert.equal((await r2.json()).error.message, 'slow down');
    const r3 = await postJson(`${mock.baseUrl()}/messages`, body, headers);
    assert.equal(r3.status, 200);
    await r3.json();
    assert.deepEqual(mock.requests.map((r) => r.reply.kind), ['error', 'error', 'text']);
  });
});

describe('Gemini mock', () => {
  const headers = { 'x-goog-api-key': 'gm-test-key' };
  const tools = [{ functionDeclarations: [{ name: 'get_weather', description: WEATHER_TOOL_DESC, parameters: { type: 'OBJECT', properties: { location: { type: 'STRING' } } } }] }];

  it('requires x-goog-api-key and answers Google errors', async (t) => {
    const mock = await startGeminiMock({ t });
    assert.match(mock.baseUrl(), /^http:\/\/127\.0\.0\.1:\d+\/v1beta$/);
    const body = { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] };
    const res = await postJson(`${mock.baseUrl()}/models/gemini-test:generateContent`, body);
    assert.equal(res.status, 403);
    const json = await res.json();
    assert.equal(json.error.code, 403);
    assert.equal(json.error.status, 'PERMISSION_DENIED');
    mock.failNext({ status: 429 });
    const res2 = await postJson(`${mock.baseUrl()}/models/gemini-test:generateContent`, body, headers);
    assert.equal(res2.status, 429);
    assert.equal((await res2.json()).error.status, 'RESOURCE_EXHAUSTED');
    const res3 = await postJson(`${mock.baseUrl()}/models/gemini-test:generateContent`, { contents: [] }, headers);
    assert.equal(res3.status, 400);
    assert.equal((await res3.json()).error.status, 'INVALID_ARGUMENT');
  });

  it('generateContent: text, usage, modelVersion', async (t) => {
    const mock = await startGeminiMock({ t });
    const res = await postJson(`${mock.baseUrl()}/models/gemini-test:generateContent`, {
      systemInstruction: { parts: [{ text: 'Be brief' }] },
      contents: [{ role: 'user', parts: [{ text: LONG_TEXT }] }],
    }, headers);
    assert.equal(res.status, 200);
    const json = await res.json();
    const [cand] = json.candidates;
    assert.equal(cand.content.role, 'model');
    assert.deepEqual(cand.content.parts, [{ text: `Hello from Gemini! You said: ${LONG_TEXT.slice(0, 40)}` }]);
    assert.equal(cand.finishReason, 'STOP');
    assert.equal(json.usageMetadata.promptTokenCount, 11);
    assert.equal(json.usageMetadata.candidatesTokenCount, 7);
    assert.equal(json.usageMetadata.totalTokenCount, 18);
    assert.equal(json.usageMetadata.cachedContentTokenCount, 3);
    assert.equal(json.modelVersion, 'gemini-test');
    assert.equal(typeof json.responseId, 'string');
    const rec = mock.requests[0];
    assert.equal(rec.model, 'gemini-test');
    assert.equal(rec.path, '/v1beta/models/gemini-test:generateContent');
    assert.equal(rec.headers['x-goog-api-key'], 'gm-test-key');
  });

  it('generateContent: functionCall, then text after the functionResponse', async (t) => {
    const mock = await startGeminiMock({ t });
    const contents = [{ role: 'user', parts: [{ text: 'Weather in Paris?' }] }];
    const res = await postJson(`${mock.baseUrl()}/models/gemini-test:generateContent`, { contents, tools }, headers);
    const json = await res.json();
    assert.deepEqual(json.candidates[0].content.parts, [{ functionCall: { name: 'get_weather', args: TOOL_ARGS } }]);
    assert.equal(json.candidates[0].finishReason, STOP_REASONS.gemini.tool);
    const follow = [
      ...contents,
      { role: 'model', parts: [{ functionCall: { name: 'get_weather', args: TOOL_ARGS } }] },
      { role: 'user', parts: [{ functionResponse: { name: 'get_weather', response: { temp: 21 } } }] },
    ];
    const res2 = await postJson(`${mock.baseUrl()}/models/gemini-test:generateContent`, { contents: follow, tools }, headers);
    const json2 = await res2.json();
    assert.deepEqual(json2.candidates[0].content.parts, [{ text: replyText('Gemini', 'Weather in Paris?') }]);
  });

  it('streamGenerateContent?alt=sse: CRLF-framed data events, no terminator', async (t) => {
    const mock = await startGeminiMock({ t });
    const res = await postJson(`${mock.baseUrl()}/models/gemini-test:streamGenerateContent?alt=sse`, { contents: [{ role: 'user', parts: [{ text: 'Hi' }] }] }, headers);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const text = await res.text();
    const n = assertSseFraming(text, { sep: '\r\n\r\n' });
    assert.ok(!/[^\r]\n/.test(text), 'every line ends with CRLF');
    const events = parseSse(text);
    assert.equal(events.length, n);
    assert.ok(events.length >= 3);
    assert.ok(events.every((e) => e.event === null && e.json && !e.data.includes('[DONE]')));
    assert.equal(events.map((e) => e.json.candidates[0].content.parts[0].text).join(''), 'Hello from Gemini! You said: Hi');
    assert.ok(events.slice(0, -1).every((e) => e.json.candidates[0].finishReason === undefined));
    const last = events.at(-1).json;
    assert.equal(last.candidates[0].finishReason, 'STOP');
    assert.deepEqual(
      [last.usageMetadata.promptTokenCount, last.usageMetadata.candidatesTokenCount, last.usageMetadata.totalTokenCount],
      [11, 7, 18],
    );
    assert.equal(mock.requests[0].stream, true);
    assert.equal(mock.requests[0].query.alt, 'sse');
  });

  it('streamGenerateContent with tools streams one functionCall chunk; without alt=sse a JSON array', async (t) => {
    const mock = await startGeminiMock({ t });
    const body = { contents: [{ role: 'user', parts: [{ text: 'Weather?' }] }], tools };
    const events = await readSse(await postJson(`${mock.baseUrl()}/models/gemini-test:streamGenerateContent?alt=sse`, body, headers));
    assert.equal(events.length, 1);
    assert.deepEqual(events[0].json.candidates[0].content.parts[0].functionCall, { name: 'get_weather', args: TOOL_ARGS });
    const res = await postJson(`${mock.baseUrl()}/models/gemini-test:streamGenerateContent`, { contents: body.contents }, headers);
    const arr = await res.json();
    assert.ok(Array.isArray(arr) && arr.length >= 3);
    assert.equal(arr.map((c) => c.candidates[0].content.parts[0].text).join(''), replyText('Gemini', 'Weather?'));
  });
});

describe('Bedrock mock', () => {
  const MODEL_ID = 'anthropic.claude-3-5-sonnet-20240620-v1:0';
  const tools = { tools: [{ toolSpec: { name: 'get_weather', description: WEATHER_TOOL_DESC, inputSchema: { json: { type: 'object' } } } }] };

  async function signedPost(mock, op, body, { credentials = BEDROCK_CREDENTIALS, tamper, modelId = MODEL_ID } = {}) {
    const url = `${mock.baseUrl()}/model/${encodeURIComponent(modelId)}/${op}`;
    const payload = JSON.stringify(body);
    const ct = { 'content-type': 'application/json' };
    const sig = signV4({ method: 'POST', url, headers: ct, body: payload, credentials });
    const sent = tamper ? tamper({ url, payload, headers: { ...ct, ...sig } }) : { url, payload, headers: { ...ct, ...sig } };
    return fetch(sent.url, { method: 'POST', headers: sent.headers, body: sent.payload, signal: AbortSignal.timeout(10_000) });
  }

  it('accepts a correctly signed Converse request (model id percent-encoded)', async (t) => {
    const mock = await startBedrockMock({ t });
    assert.match(mock.baseUrl(), /^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await signedPost(mock, 'converse', {
      system: [{ text: 'Be brief' }],
      messages: [{ role: 'user', content: [{ text: LONG_TEXT }] }],
      inferenceConfig: { maxTokens: 64 },
    });
    assert.equal(res.status, 200, await res.clone().text());
    const json = await res.json();
    assert.deepEqual(json.output, { message: { role: 'assistant', content: [{ text: `Hello from Bedrock! You said: ${LONG_TEXT.slice(0, 40)}` }] } });
    assert.equal(json.stopReason, 'end_turn');
    assert.deepEqual(json.usage, { inputTokens: 11, outputTokens: 7, totalTokens: 18, cacheReadInputTokens: 3, cacheWriteInputTokens: 0 });
    assert.equal(typeof json.metrics.latencyMs, 'number');
    const rec = mock.requests[0];
    assert.equal(rec.path, '/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse');
    assert.equal(rec.model, MODEL_ID);
    assert.equal(rec.sigv4.verified, true);
    assert.match(rec.sigv4.canonicalRequest, /^POST\n\/model\/anthropic\.claude-3-5-sonnet-20240620-v1%253A0\/converse\n\n/);
  });

  it('rejects tampered, unsigned, wrongly keyed and token-less requests with 403', async (t) => {
    const mock = await startBedrockMock({ t });
    const body = { messages: [{ role: 'user', content: [{ text: 'hi' }] }] };
    const cases = [
      ['body changed after signing', { tamper: (s) => ({ ...s, payload: s.payload.replace('hi', 'ho') }) }, /^The request signature we calculated does not match/],
      ['path changed after signing', { tamper: (s) => ({ ...s, url: s.url.replace('%3A0', '%3A1') }) }, /^The request signature we calculated does not match/],
      ['a signed header changed', { tamper: (s) => ({ ...s, headers: { ...s.headers, 'content-type': 'application/json; charset=utf-8' } }) }, /^The request signature we calculated does not match/],
      ['wrong secret', { credentials: { ...BEDROCK_CREDENTIALS, secretAccessKey: 'nope' } }, /^The request signature we calculated does not match/],
      ['unknown access key', { credentials: { ...BEDROCK_CREDENTIALS, accessKeyId: 'AKIDOTHER' } }, /security token included in the request is invalid/],
      ['no Authorization', { tamper: (s) => ({ ...s, headers: { 'content-type': 'application/json' } }) }, /Missing Authentication Token/],
    ];
    for (const [what, opts, message] of cases) {
      const res = await signedPost(mock, 'converse', body, opts);
      assert.equal(res.status, 403, what);
      assert.ok(res.headers.get('x-amzn-errortype'), `${what}: x-amzn-errortype`);
      const json = await res.json();
      assert.match(json.message, message, what);
      assert.equal(mock.requests.at(-1).sigv4.verified, false, what);
    }

    const withToken = await startBedrockMock({ t, credentials: { ...BEDROCK_CREDENTIALS, sessionToken: 'session-token-xyz' } });
    const creds = withToken.credentials;
    const ok = await signedPost(withToken, 'converse', body, { credentials: creds });
    assert.equal(ok.status, 200, await ok.clone().text());
    assert.equal(withToken.requests.at(-1).sigv4.securityTokenSigned, true);
    const noToken = await signedPost(withToken, 'converse', body, { credentials: { ...creds, sessionToken: undefined } });
    assert.equal(noToken.status, 403);
  });

  it('Converse tool call, then text after the toolResult', async (t) => {
    const mock = await startBedrockMock({ t });
    const messages = [{ role: 'user', content: [{ text: 'Weather in Paris?' }] }];
    const json = await (await signedPost(mock, 'converse', { messages, toolConfig: tools })).json();
    assert.equal(json.stopReason, 'tool_use');
    const [{ toolUse }] = json.output.message.content;
    assert.equal(toolUse.name, 'get_weather');
    assert.deepEqual(toolUse.input, TOOL_ARGS);
    assert.equal(typeof toolUse.toolUseId, 'string');
    const follow = [
      ...messages,
      { role: 'assistant', content: [{ toolUse }] },
      { role: 'user', content: [{ toolResult: { toolUseId: toolUse.toolUseId, content: [{ json: { temp: 21 } }] } }] },
    ];
    const json2 = await (await signedPost(mock, 'converse', { messages: follow, toolConfig: tools })).json();
    assert.equal(json2.stopReason, 'end_turn');
    assert.equal(json2.output.message.content[0].text, replyText('Bedrock', 'Weather in Paris?'));
  });

  async function readStream(res) {
    const chunks = [];
    for await (const c of res.body) chunks.push(Buffer.from(c));
    return { buf: Buffer.concat(chunks), reads: chunks.length };
  }

  it('ConverseStream text: valid event-stream frames, written in many pieces', async (t) => {
    const mock = await startBedrockMock({ t });
    const res = await signedPost(mock, 'converse-stream', { messages: [{ role: 'user', content: [{ text: 'Hi' }] }] });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'application/vnd.amazon.eventstream');
    const { buf, reads } = await readStream(res);
    t.diagnostic(`${buf.length} bytes in ${reads} reads`);
    assert.ok(reads > 1, `the body arrived in several reads (${reads})`);
    const frames = decodeEventStream(buf); // throws on any CRC or length error
    for (const f of frames) {
      assert.equal(f.headers[':message-type'], 'event');
      assert.equal(f.headers[':content-type'], 'application/json');
      assert.ok(f.json, 'payload is JSON');
    }
    const types = frames.map((f) => f.headers[':event-type']);
    assert.equal(types[0], 'messageStart');
    assert.deepEqual(types.slice(-3), ['contentBlockStop', 'messageStop', 'metadata']);
    assert.deepEqual(frames[0].json.role, 'assistant');
    const deltas = frames.filter((f) => f.headers[':event-type'] === 'contentBlockDelta');
    assert.ok(deltas.length >= 3);
    assert.equal(deltas.map((f) => f.json.delta.text).join(''), 'Hello from Bedrock! You said: Hi');
    assert.equal(frames.at(-2).json.stopReason, 'end_turn');
    const meta = frames.at(-1).json;
    assert.deepEqual([meta.usage.inputTokens, meta.usage.outputTokens, meta.usage.totalTokens], [11, 7, 18]);
    assert.equal(typeof meta.metrics.latencyMs, 'number');
    assert.equal(mock.requests[0].stream, true);
  });

  it('ConverseStream tool call: contentBlockStart(toolUse) and input pieces', async (t) => {
    const mock = await startBedrockMock({ t });
    const res = await signedPost(mock, 'converse-stream', { messages: [{ role: 'user', content: [{ text: 'Weather?' }] }], toolConfig: tools });
    const frames = decodeEventStream((await readStream(res)).buf);
    const types = frames.map((f) => f.headers[':event-type']);
    assert.deepEqual(types.slice(0, 2), ['messageStart', 'contentBlockStart']);
    const start = frames[1].json;
    assert.equal(start.contentBlockIndex, 0);
    assert.equal(start.start.toolUse.name, 'get_weather');
    assert.equal(typeof start.start.toolUse.toolUseId, 'string');
    const pieces = frames.filter((f) => f.headers[':event-type'] === 'contentBlockDelta').map((f) => f.json.delta.toolUse.input);
    assert.ok(pieces.length >= 3);
    assert.equal(pieces.join(''), TOOL_ARGS_JSON);
    assert.equal(frames.find((f) => f.headers[':event-type'] === 'messageStop').json.stopReason, 'tool_use');
  });

  it('failNext answers a Bedrock-style error (and still records the signature check)', async (t) => {
    const mock = await startBedrockMock({ t });
    mock.failNext({ status: 429 });
    const res = await signedPost(mock, 'converse', { messages: [{ role: 'user', content: [{ text: 'hi' }] }] });
    assert.equal(res.status, 429);
    assert.match(res.headers.get('x-amzn-errortype'), /^ThrottlingException/);
    assert.equal(typeof (await res.json()).message, 'string');
    assert.equal(mock.requests[0].sigv4.verified, true);
  });
});

describe('OpenAI chat / Azure mock', () => {
  const auth = { authorization: 'Bearer sk-test' };
  const tools = [
    { type: 'function', function: { name: 'get_weather', description: WEATHER_TOOL_DESC, parameters: { type: 'object' } } },
    { type: 'function', function: { name: 'other' } },
  ];

  it('requires a bearer key; non-streaming text with usage', async (t) => {
    const mock = await startOpenAIChatMock({ t });
    assert.match(mock.baseUrl(), /^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    const body = { model: 'gpt-test', messages: [{ role: 'system', content: 'Be brief' }, { role: 'user', content: LONG_TEXT }] };
    const r401 = await postJson(`${mock.baseUrl()}/chat/completions`, body);
    assert.equal(r401.status, 401);
    assert.equal((await r401.json()).error.type, 'invalid_request_error');
    const res = await postJson(`${mock.baseUrl()}/chat/completions`, body, auth);
    assert.equal(res.status, 200);
    const json = await res.json();
    assert.equal(json.object, 'chat.completion');
    assert.equal(json.model, 'gpt-test');
    assert.equal(json.choices[0].message.content, `Hello from OpenAI! You said: ${LONG_TEXT.slice(0, 40)}`);
    assert.equal(json.choices[0].finish_reason, 'stop');
    assert.deepEqual([json.usage.prompt_tokens, json.usage.completion_tokens, json.usage.total_tokens], [11, 7, 18]);
    assert.equal(json.usage.prompt_tokens_details.cached_tokens, 3);
  });

  it('non-streaming tool call, then text after the tool message', async (t) => {
    const mock = await startOpenAIChatMock({ t });
    const messages = [{ role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] }];
    const json = await (await postJson(`${mock.baseUrl()}/chat/completions`, { model: 'gpt-test', messages, tools }, auth)).json();
    const choice = json.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    const [call] = choice.message.tool_calls;
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'get_weather');
    assert.equal(call.function.arguments, TOOL_ARGS_JSON);
    const follow = [...messages, choice.message, { role: 'tool', tool_call_id: call.id, content: '21C' }];
    const json2 = await (await postJson(`${mock.baseUrl()}/chat/completions`, { model: 'gpt-test', messages: follow, tools }, auth)).json();
    assert.equal(json2.choices[0].message.content, replyText('OpenAI', 'Weather in Paris?'));
  });

  it('streaming tool call with include_usage: argument pieces, usage chunk, [DONE]', async (t) => {
    const mock = await startOpenAIChatMock({ t, fragmentSse: true });
    const res = await postJson(`${mock.baseUrl()}/chat/completions`, {
      model: 'gpt-test', stream: true, stream_options: { include_usage: true }, tools, messages: [{ role: 'user', content: 'Weather?' }],
    }, auth);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const text = await res.text();
    assertSseFraming(text);
    const events = parseSse(text);
    assert.equal(events.at(-1).data, '[DONE]');
    const chunks = events.slice(0, -1).map((e) => e.json);
    assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
    const usageChunk = chunks.at(-1);
    assert.deepEqual(usageChunk.choices, []);
    assert.equal(usageChunk.usage.total_tokens, 18);
    const body = chunks.slice(0, -1);
    assert.ok(body.every((c) => c.usage === null), 'usage: null on the other chunks');
    const calls = body.flatMap((c) => c.choices[0].delta.tool_calls ?? []);
    assert.equal(calls[0].id !== undefined && calls[0].function.name, 'get_weather');
    assert.ok(calls.length >= 4);
    assert.ok(calls.every((c) => c.index === 0));
    assert.equal(calls.map((c) => c.function.arguments).join(''), TOOL_ARGS_JSON);
    assert.equal(body.at(-1).choices[0].finish_reason, 'tool_calls');
  });

  it('streaming text without include_usage has no usage chunk', async (t) => {
    const mock = await startOpenAIChatMock({ t });
    const events = await readSse(await postJson(`${mock.baseUrl()}/chat/completions`, { model: 'gpt-test', stream: true, messages: [{ role: 'user', content: 'Hi' }] }, auth));
    assert.equal(events.at(-1).data, '[DONE]');
    const chunks = events.slice(0, -1).map((e) => e.json);
    assert.ok(chunks.every((c) => c.choices.length === 1 && !('usage' in c)));
    const pieces = chunks.map((c) => c.choices[0].delta.content).filter((x) => x);
    assert.ok(pieces.length >= 3);
    assert.equal(pieces.join(''), 'Hello from OpenAI! You said: Hi');
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
  });

  it('Azure deployment route: api-key and api-version required, filter chunk first', async (t) => {
    const mock = await startOpenAIChatMock({ t });
    const url = `${mock.azureEndpoint()}/openai/deployments/my-gpt4o/chat/completions`;
    const body = { messages: [{ role: 'user', content: 'Hi' }] };
    const noKey = await postJson(`${url}?api-version=2024-10-21`, body, auth);
    assert.equal(noKey.status, 401);
    assert.equal((await noKey.json()).error.code, '401');
    const noVersion = await postJson(url, body, { 'api-key': 'az-key' });
    assert.equal(noVersion.status, 404);
    await noVersion.json();
    const res = await postJson(`${url}?api-version=2024-10-21`, body, { 'api-key': 'az-key' });
    assert.equal(res.status, 200);
    const json = await res.json();
    assert.equal(json.choices[0].message.content, 'Hello from Azure OpenAI! You said: Hi');
    assert.ok(Array.isArray(json.prompt_filter_results));
    const rec = mock.requests.at(-1);
    assert.equal(rec.deployment, 'my-gpt4o');
    assert.equal(rec.vendor, 'azure');
    assert.equal(rec.query['api-version'], '2024-10-21');

    const stream = await readSse(await postJson(`${url}?api-version=2024-10-21`, { ...body, stream: true, stream_options: { include_usage: true } }, { 'api-key': 'az-key' }));
    assert.equal(stream.at(-1).data, '[DONE]');
    assert.deepEqual(stream[0].json.choices, []);
    assert.ok(stream[0].json.prompt_filter_results);
    assert.ok(stream.at(-2).json.usage);
    mock.failNext({ status: 429, headers: { 'retry-after': '1' } });
    const limited = await postJson(`${url}?api-version=2024-10-21`, body, { 'api-key': 'az-key' });
    assert.equal(limited.status, 429);
    assert.equal(limited.headers.get('retry-after'), '1');
    assert.equal((await limited.json()).error.code, '429');
  });
});

describe('the vendors\' own SDKs parse the mocks', () => {
  it('@anthropic-ai/sdk: create() and stream() with a tool call, finalMessage()', async (t) => {
    const mock = await startAnthropicMock({ t, fragmentSse: true });
    // This SDK release sends its apiKey as `Authorization: Bearer`; the mock wants the
    // classic x-api-key header (what the gateway sends upstream), so set that one instead.
    const client = new Anthropic({
      baseURL: mock.origin(),
      apiKey: null,
      authToken: null,
      defaultHeaders: { 'x-api-key': 'sk-ant-test' },
      maxRetries: 0,
      timeout: 10_000,
    });
    const msg = await client.messages.create({ model: 'claude-test', max_tokens: 64, messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(msg.content[0].text, 'Hello from Anthropic! You said: Hi');
    assert.equal(mock.requests[0].headers['x-api-key'], 'sk-ant-test');
    assert.ok(mock.requests[0].headers['anthropic-version']);
    const stream = client.messages.stream({
      model: 'claude-test',
      max_tokens: 64,
      tools: [{ name: 'get_weather', input_schema: { type: 'object' } }],
      messages: [{ role: 'user', content: 'Weather?' }],
    });
    const final = await stream.finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    assert.equal(final.content[0].type, 'tool_use');
    assert.deepEqual(final.content[0].input, TOOL_ARGS);
    assert.equal(final.usage.output_tokens, USAGE.output);
    const textStream = client.messages.stream({ model: 'claude-test', max_tokens: 64, messages: [{ role: 'user', content: 'Yo' }] });
    assert.equal(await textStream.finalText(), 'Hello from Anthropic! You said: Yo');
  });

  it('openai: chat stream with tools (finalChatCompletion) and AzureOpenAI', async (t) => {
    const mock = await startOpenAIChatMock({ t, fragmentSse: true });
    const client = new OpenAI({ baseURL: mock.baseUrl(), apiKey: 'sk-test', maxRetries: 0, timeout: 10_000 });
    const stream = client.chat.completions.stream({
      model: 'gpt-test',
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }],
      messages: [{ role: 'user', content: 'Weather?' }],
      stream_options: { include_usage: true },
    });
    const done = await stream.finalChatCompletion();
    assert.equal(done.choices[0].finish_reason, 'tool_calls');
    assert.equal(done.choices[0].message.tool_calls[0].function.arguments, TOOL_ARGS_JSON);
    assert.equal(done.usage.completion_tokens, USAGE.output);

    const azure = new AzureOpenAI({ endpoint: mock.azureEndpoint(), apiKey: 'az-key', apiVersion: '2024-10-21', deployment: 'my-gpt4o', maxRetries: 0, timeout: 10_000 });
    const chunks = [];
    for await (const c of await azure.chat.completions.create({ model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'Hi' }] })) chunks.push(c);
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), 'Hello from Azure OpenAI! You said: Hi');
    const rec = mock.requests.at(-1);
    assert.equal(rec.path, '/openai/deployments/my-gpt4o/chat/completions');
    assert.equal(rec.headers['api-key'], 'az-key');
  });
});
