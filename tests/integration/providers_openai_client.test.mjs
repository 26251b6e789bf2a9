// The official `openai` SDK against tahua routing chat completions to vendor-format
// providers (anthropic, gemini, bedrock, azure-openai) and to an openai-type provider,
// each in front of its vendor mock (lib/vendor_mocks.mjs). The gateway translates the
// OpenAI request to the vendor's wire format and the vendor's answer (JSON, SSE, AWS
// event stream, errors) back to OpenAI's; the mocks record what they received.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { openaiClient, sharedFixture } from './lib/fixtures.mjs';
import { send, toResult } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { gatewayConfig, startTahua } from './lib/tahua.mjs';
import {
  BEDROCK_CREDENTIALS,
  TOOL_ARGS,
  TOOL_ARGS_JSON,
  USAGE,
  VENDOR_NAMES,
  anthropicError,
  geminiError,
  parseSse,
  replyText,
  startAnthropicMock,
  startBedrockMock,
  startGeminiMock,
  startOpenAIChatMock,
} from './lib/vendor_mocks.mjs';

const TIMEOUTS = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };
const PRICING = { input: 3, output: 15, cached_input: 0.3 }; // USD per million tokens

const ANTHROPIC_KEY = 'sk-ant-test-provider-key-7f3a';
const GEMINI_KEY = 'gm-test-provider-key-91bc';
const AZURE_KEY = 'az-test-provider-key-52de';
const OPENAI_KEY = 'sk-test-provider-key-0c4e';
const CLIENT_KEY = 'sk-client-key-not-forwarded'; // what openaiClient() sends
const AWS = Object.freeze({ ...BEDROCK_CREDENTIALS, sessionToken: 'FwoGZXIvYXdzEMockSessionToken/for+tests==' });
const BEDROCK_MODEL_ID = 'anthropic.claude-3-5-sonnet-20240620-v1:0';
const BEDROCK_MODEL_PATH = 'anthropic.claude-3-5-sonnet-20240620-v1%3A0';
const AZURE_DEPLOYMENT = 'gpt4o-mini-deploy';
const AZURE_API_VERSION = '2024-10-21';

const WEATHER_PARAMS = {
  type: 'object',
  properties: { location: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
  required: ['location'],
};
const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Current weather in a city', parameters: WEATHER_PARAMS } }];
const SYSTEM_PROMPT = 'You are a terse assistant.';
const TOOL_QUESTION = 'What is the weather in Paris?';
const TOOL_RESULT = '{"temperature":21,"unit":"celsius"}';
const TOOL_CALL_ID = 'call_weather_1';

// One gateway, one mock per vendor (two OpenAI-format mocks: Azure's and OpenAI's).
async function start() {
  const anthropic = await startAnthropicMock();
  const gemini = await startGeminiMock();
  const bedrock = await startBedrockMock({ credentials: AWS });
  const azure = await startOpenAIChatMock();
  const openai = await startOpenAIChatMock();
  const mocks = { anthropic, gemini, bedrock, azure, openai };
  const config = gatewayConfig({
    providers: [
      {
        name: 'anth',
        type: 'anthropic',
        base_url: anthropic.baseUrl(),
        api_key: ANTHROPIC_KEY,
        default_max_tokens: 512,
        anthropic_version: '2023-06-01',
        timeouts: TIMEOUTS,
      },
      { name: 'gem', type: 'gemini', base_url: gemini.baseUrl(), api_key: GEMINI_KEY, timeouts: TIMEOUTS },
      {
        name: 'bed',
        type: 'bedrock',
        base_url: bedrock.baseUrl(),
        aws: {
          region: AWS.region,
          access_key_id: AWS.accessKeyId,
          secret_access_key: AWS.secretAccessKey,
          session_token: AWS.sessionToken,
        },
        timeouts: TIMEOUTS,
      },
      {
        name: 'az',
        type: 'azure-openai',
        base_url: `${azure.azureEndpoint()}/openai`,
        api_version: AZURE_API_VERSION,
        api_key: AZURE_KEY,
        timeouts: TIMEOUTS,
      },
      { name: 'oai', type: 'openai', base_url: openai.baseUrl(), api_key: OPENAI_KEY, timeouts: TIMEOUTS },
    ],
    models: [
      { name: 'claude-x', provider: 'anth', upstream_model: 'claude-sonnet-4-5', pricing: PRICING },
      { name: 'claude-unpriced', provider: 'anth', upstream_model: 'claude-sonnet-4-5' },
      { name: 'gemini-x', provider: 'gem', upstream_model: 'gemini-2.0-flash', pricing: PRICING },
      { name: 'bedrock-x', provider: 'bed', upstream_model: BEDROCK_MODEL_ID, pricing: PRICING },
      { name: 'azure-x', provider: 'az', upstream_model: AZURE_DEPLOYMENT, pricing: PRICING },
      { name: 'gpt-x', provider: 'oai', upstream_model: 'gpt-4o-mini', pricing: PRICING },
    ],
  });
  let gw;
  try {
    gw = await startTahua({ config });
  } catch (err) {
    await Promise.all(Object.values(mocks).map((m) => m.close()));
    throw err;
  }
  const close = async () => {
    await gw.kill();
    await Promise.all(Object.values(mocks).map((m) => m.close()));
  };
  return { gw, mocks, close };
}

// ---- helpers ------------------------------------------------------------------------

let seq = 0;
/** A unique request id: sent as x-request-id, it is the access log line's request_id. */
function rid(tag) {
  seq += 1;
  return `prov-${tag}-${process.pid}-${seq}`;
}

function withId(id) {
  return { headers: { 'x-request-id': id } };
}

/** The access log line of the request with id `id`. */
async function logLine(gw, id) {
  const [line] = await gw.waitForAccessLog((l) => l.request_id === id);
  return line;
}

/** Runs `fn` and returns its result with the one request the mock received meanwhile. */
async function oneUpstreamCall(mock, fn) {
  const before = mock.requests.length;
  const result = await fn();
  assert.equal(mock.requests.length, before + 1, 'exactly one upstream request');
  return { result, rec: mock.requests.at(-1) };
}

/** Texts of a content value: a string, or text blocks ({text} / {type:'text', text}). */
function textOf(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) return content.map((b) => (typeof b?.text === 'string' ? b.text : '')).join('');
  return '';
}

function expectedCost({ prompt, cached, completion }) {
  return ((prompt - cached) * PRICING.input + cached * PRICING.cached_input + completion * PRICING.output) / 1e6;
}

function assertClose(actual, expected, what) {
  assert.equal(typeof actual, 'number', `${what} is a number (got ${JSON.stringify(actual)})`);
  assert.ok(Math.abs(actual - expected) <= 1e-9 + Math.abs(expected) * 1e-6, `${what}: ${actual} != ${expected}`);
}

/** The client key must never go upstream; the provider's credentials must. */
function assertNoClientKey(rec) {
  assert.ok(!JSON.stringify(rec.rawHeaders).includes(CLIENT_KEY), 'the client API key is not forwarded');
  assert.ok(!rec.url.includes(CLIENT_KEY));
}

// ---- the vendors --------------------------------------------------------------------
//
// `usage`: what the client must see. Anthropic's input_tokens and Bedrock's inputTokens
// count the uncached input only (cache reads/writes are reported apart), so OpenAI's
// prompt_tokens is input + cache reads + cache writes there (11 + 3 + 0); Gemini's
// promptTokenCount and OpenAI's prompt_tokens already include the cached tokens.

const VENDORS = [
  {
    key: 'anthropic',
    provider: 'anth',
    model: 'claude-x',
    upstream: 'claude-sonnet-4-5',
    name: VENDOR_NAMES.anthropic,
    usage: { prompt: USAGE.input + USAGE.cached, completion: USAGE.output, cached: USAGE.cached },
    secrets: [ANTHROPIC_KEY],
    rejectsN: true,
    checkRequest(rec, { stream }) {
      assert.equal(rec.method, 'POST');
      assert.equal(rec.path, '/v1/messages');
      assert.equal(rec.headers['x-api-key'], ANTHROPIC_KEY);
      assert.equal(rec.headers['anthropic-version'], '2023-06-01');
      assert.equal(rec.body.model, 'claude-sonnet-4-5');
      assert.equal(rec.body.max_tokens, 512, 'default_max_tokens when the client sent none');
      assert.equal(rec.body.stream === true, stream);
    },
    toolsSent(body) {
      assert.deepEqual(body.tools.map((x) => x.name), ['get_weather']);
      assert.deepEqual(body.tools[0].input_schema, WEATHER_PARAMS);
    },
    systemSent(body) {
      assert.equal(textOf(body.system), SYSTEM_PROMPT);
      assert.ok(body.messages.every((m) => m.role !== 'system'), 'no system role among messages');
    },
    toolTurnSent(body) {
      assert.deepEqual(body.messages.map((m) => m.role), ['user', 'assistant', 'user']);
      const use = body.messages[1].content.find((b) => b.type === 'tool_use');
      assert.ok(use, `assistant message has a tool_use block: ${JSON.stringify(body.messages[1])}`);
      assert.equal(use.id, TOOL_CALL_ID);
      assert.equal(use.name, 'get_weather');
      assert.deepEqual(use.input, TOOL_ARGS);
      const result = body.messages[2].content.find((b) => b.type === 'tool_result');
      assert.ok(result, `user message has a tool_result block: ${JSON.stringify(body.messages[2])}`);
      assert.equal(result.tool_use_id, TOOL_CALL_ID);
      assert.equal(textOf(result.content), TOOL_RESULT);
    },
    errorBody: (status, message) => anthropicError(status === 429 ? 'rate_limit_error' : 'api_error', message),
  },
  {
    key: 'gemini',
    provider: 'gem',
    model: 'gemini-x',
    upstream: 'gemini-2.0-flash',
    name: VENDOR_NAMES.gemini,
    usage: { prompt: USAGE.input, completion: USAGE.output, cached: USAGE.cached },
    secrets: [GEMINI_KEY],
    rejectsN: true,
    checkRequest(rec, { stream }) {
      assert.equal(rec.method, 'POST');
      assert.equal(rec.path, `/v1beta/models/gemini-2.0-flash:${stream ? 'streamGenerateContent' : 'generateContent'}`);
      assert.equal(rec.headers['x-goog-api-key'], GEMINI_KEY);
      assert.equal(rec.model, 'gemini-2.0-flash');
    },
    toolsSent(body) {
      const decls = body.tools.flatMap((x) => x.functionDeclarations ?? x.function_declarations ?? []);
      assert.deepEqual(decls.map((d) => d.name), ['get_weather']);
    },
    systemSent(body) {
      const si = body.systemInstruction ?? body.system_instruction;
      assert.ok(si, `systemInstruction sent: ${JSON.stringify(body)}`);
      assert.equal(textOf(si.parts), SYSTEM_PROMPT);
      assert.ok(body.contents.every((c) => c.role !== 'system'), 'no system role among contents');
    },
    toolTurnSent(body) {
      assert.equal(body.contents.length, 3);
      assert.deepEqual(body.contents.slice(0, 2).map((c) => c.role), ['user', 'model']);
      const call = body.contents[1].parts.find((p) => p.functionCall)?.functionCall;
      assert.ok(call, `model turn has a functionCall: ${JSON.stringify(body.contents[1])}`);
      assert.equal(call.name, 'get_weather');
      assert.deepEqual(call.args, TOOL_ARGS);
      const resp = body.contents[2].parts.find((p) => p.functionResponse)?.functionResponse;
      assert.ok(resp, `last turn has a functionResponse: ${JSON.stringify(body.contents[2])}`);
      assert.equal(resp.name, 'get_weather', 'functionResponse names the function (from the tool_call_id)');
      assert.ok(resp.response && typeof resp.response === 'object' && !Array.isArray(resp.response), 'response is an object');
      assert.match(JSON.stringify(resp.response), /21/);
    },
    errorBody: (status, message) => geminiError(status, message),
  },
  {
    key: 'bedrock',
    provider: 'bed',
    model: 'bedrock-x',
    upstream: BEDROCK_MODEL_ID,
    name: VENDOR_NAMES.bedrock,
    usage: { prompt: USAGE.input + USAGE.cached, completion: USAGE.output, cached: USAGE.cached },
    secrets: [AWS.secretAccessKey, AWS.sessionToken],
    rejectsN: true,
    checkRequest(rec, { stream }) {
      assert.equal(rec.method, 'POST');
      // The model id's colon is percent-encoded in the path, and the signature covers that.
      assert.equal(rec.path, `/model/${BEDROCK_MODEL_PATH}/${stream ? 'converse-stream' : 'converse'}`);
      assert.equal(rec.model, BEDROCK_MODEL_ID);
      assert.ok(rec.sigv4.verified, `SigV4 verified: ${rec.sigv4.reason}\n${rec.sigv4.error?.message ?? ''}`);
      assert.equal(rec.headers['x-amz-security-token'], AWS.sessionToken);
    },
    toolsSent(body) {
      const specs = body.toolConfig.tools.map((x) => x.toolSpec);
      assert.deepEqual(specs.map((s) => s.name), ['get_weather']);
      assert.deepEqual(specs[0].inputSchema.json, WEATHER_PARAMS);
    },
    systemSent(body) {
      assert.ok(Array.isArray(body.system), `system is a list of blocks: ${JSON.stringify(body.system)}`);
      assert.equal(textOf(body.system), SYSTEM_PROMPT);
      assert.ok(body.messages.every((m) => m.role !== 'system'), 'no system role among messages');
    },
    toolTurnSent(body) {
      assert.deepEqual(body.messages.map((m) => m.role), ['user', 'assistant', 'user']);
      const use = body.messages[1].content.find((b) => b.toolUse)?.toolUse;
      assert.ok(use, `assistant message has a toolUse block: ${JSON.stringify(body.messages[1])}`);
      assert.equal(use.toolUseId, TOOL_CALL_ID);
      assert.equal(use.name, 'get_weather');
      assert.deepEqual(use.input, TOOL_ARGS);
      const result = body.messages[2].content.find((b) => b.toolResult)?.toolResult;
      assert.ok(result, `user message has a toolResult block: ${JSON.stringify(body.messages[2])}`);
      assert.equal(result.toolUseId, TOOL_CALL_ID);
      assert.ok(Array.isArray(result.content) && result.content.length > 0, 'toolResult.content is a non-empty list');
      assert.match(JSON.stringify(result.content), /21/);
    },
    errorBody: (status, message) => ({ message }),
  },
  {
    key: 'azure',
    provider: 'az',
    model: 'azure-x',
    upstream: AZURE_DEPLOYMENT,
    name: VENDOR_NAMES.azure,
    usage: { prompt: USAGE.input, completion: USAGE.output, cached: USAGE.cached },
    secrets: [AZURE_KEY],
    rejectsN: false, // OpenAI's own format: n passes through
    checkRequest(rec, { stream }) {
      assert.equal(rec.method, 'POST');
      assert.equal(rec.path, `/openai/deployments/${AZURE_DEPLOYMENT}/chat/completions`);
      assert.equal(rec.deployment, AZURE_DEPLOYMENT);
      assert.equal(rec.query['api-version'], AZURE_API_VERSION);
      assert.equal(rec.headers['api-key'], AZURE_KEY);
      assert.equal(rec.body.stream === true, stream);
    },
    toolsSent(body) {
      assert.deepEqual(body.tools.map((x) => x.function.name), ['get_weather']);
    },
    systemSent(body) {
      assert.equal(body.messages[0].role, 'system');
      assert.equal(textOf(body.messages[0].content), SYSTEM_PROMPT);
    },
    toolTurnSent(body) {
      assert.deepEqual(body.messages.map((m) => m.role), ['user', 'assistant', 'tool']);
      assert.equal(body.messages[1].tool_calls[0].id, TOOL_CALL_ID);
      assert.equal(body.messages[2].tool_call_id, TOOL_CALL_ID);
      assert.equal(textOf(body.messages[2].content), TOOL_RESULT);
    },
    errorBody: (status, message) => ({ error: { code: String(status), message } }),
  },
];

// ---- the tests ----------------------------------------------------------------------

describe('openai SDK -> tahua -> anthropic / gemini / bedrock / azure-openai / openai providers', () => {
  const fx = sharedFixture(start);
  const client = () => openaiClient(fx.current.gw);
  const mock = (v) => fx.current.mocks[v.key];

  for (const v of VENDORS) {
    describe(`${v.key} (model ${v.model} -> provider ${v.provider})`, () => {
      it('non-streaming text: scripted reply, finish_reason stop, vendor usage', async () => {
        const userText = `Hi ${v.key}, how are you?`;
        const id = rid(`${v.key}-text`);
        const { result: res, rec } = await oneUpstreamCall(mock(v), () =>
          client().chat.completions.create({ model: v.model, messages: [{ role: 'user', content: userText }] }, withId(id)),
        );
        assert.equal(res.object, 'chat.completion');
        assert.equal(res.choices.length, 1);
        assert.equal(res.choices[0].message.role, 'assistant');
        assert.equal(res.choices[0].message.content, replyText(v.name, userText));
        assert.equal(res.choices[0].finish_reason, 'stop');
        assert.equal(res.usage.prompt_tokens, v.usage.prompt);
        assert.equal(res.usage.completion_tokens, v.usage.completion);
        assert.equal(res.usage.total_tokens, v.usage.prompt + v.usage.completion);
        assert.equal(res.usage.prompt_tokens_details?.cached_tokens, v.usage.cached);

        v.checkRequest(rec, { stream: false });
        assertNoClientKey(rec);
        assert.equal(rec.reply.kind, 'text');
      });

      it('non-streaming tool call: name, TOOL_ARGS, finish_reason tool_calls', async () => {
        const { result: res, rec } = await oneUpstreamCall(mock(v), () =>
          client().chat.completions.create({ model: v.model, messages: [{ role: 'user', content: TOOL_QUESTION }], tools: TOOLS }),
        );
        assert.equal(rec.reply.kind, 'tool', 'the vendor answered with a tool call');
        v.toolsSent(rec.body);
        v.checkRequest(rec, { stream: false });
        const choice = res.choices[0];
        assert.equal(choice.finish_reason, 'tool_calls');
        assert.equal(choice.message.role, 'assistant');
        assert.equal(choice.message.tool_calls.length, 1);
        const [call] = choice.message.tool_calls;
        assert.equal(call.type, 'function');
        assert.equal(call.function.name, 'get_weather');
        assert.deepEqual(JSON.parse(call.function.arguments), TOOL_ARGS);
        assert.equal(typeof call.id, 'string');
        assert.ok(call.id.length > 0, 'the tool call has an id');
        if (rec.reply.toolCallId) assert.equal(call.id, rec.reply.toolCallId, "the vendor's tool call id is kept");
      });

      it('streaming text: deltas concatenate to the reply, last chunk stop, stream ends with [DONE]', async () => {
        const userText = `Stream to me, ${v.key}`;
        const id = rid(`${v.key}-stream`);
        const { result: chunks, rec } = await oneUpstreamCall(mock(v), async () => {
          const stream = await client().chat.completions.create(
            { model: v.model, messages: [{ role: 'user', content: userText }], stream: true },
            withId(id),
          );
          const out = [];
          for await (const chunk of stream) out.push(chunk);
          return out;
        });
        v.checkRequest(rec, { stream: true });
        const withChoices = chunks.filter((c) => c.choices?.length);
        const text = withChoices.map((c) => c.choices[0].delta?.content ?? '').join('');
        assert.equal(text, replyText(v.name, userText));
        assert.ok(withChoices.filter((c) => c.choices[0].delta?.content).length >= 3, 'the text arrives in several deltas');
        const finishes = withChoices.filter((c) => c.choices[0].finish_reason);
        assert.deepEqual(finishes.map((c) => c.choices[0].finish_reason), ['stop'], 'one finish_reason, stop');
        assert.equal(chunks.at(-1).choices[0]?.finish_reason, 'stop', 'the last chunk carries finish_reason stop');
        assert.ok(chunks.every((c) => c.usage == null), 'no usage without stream_options.include_usage');
        for (const c of withChoices) assert.equal(c.object, 'chat.completion.chunk');

        // The usage still reaches the access log.
        const line = await logLine(fx.current.gw, id);
        assert.equal(line.status, 200);
        assert.equal(line.stream, true);
        assert.equal(line.model, v.model);
        assert.equal(line.provider, v.provider);
        assert.equal(line.prompt_tokens, v.usage.prompt);
        assert.equal(line.completion_tokens, v.usage.completion);
        assert.equal(line.cached_tokens, v.usage.cached);
      });

      it('streaming over the wire: well-formed SSE ending with data: [DONE]', async () => {
        const userText = 'Raw stream please';
        const res = await send(fx.current.gw.url, '/v1/chat/completions', {
          method: 'POST',
          json: { model: v.model, messages: [{ role: 'user', content: userText }], stream: true },
          headers: { authorization: `Bearer ${CLIENT_KEY}` },
        });
        const r = await toResult(res);
        assert.equal(r.status, 200, r.text);
        assert.match(r.headers['content-type'], /^text\/event-stream/);
        const events = parseSse(r.text); // throws unless every event is complete
        assert.equal(events.at(-1).data, '[DONE]', 'the stream ends with data: [DONE]');
        assert.equal(events.filter((e) => e.data === '[DONE]').length, 1);
        const payloads = events.slice(0, -1);
        assert.ok(payloads.every((e) => e.json && typeof e.json === 'object'), 'every other event is JSON');
        const text = payloads.map((e) => e.json.choices?.[0]?.delta?.content ?? '').join('');
        assert.equal(text, replyText(v.name, userText));
      });

      it('streaming with include_usage ends with a usage chunk carrying the vendor usage', async () => {
        const stream = await client().chat.completions.create({
          model: v.model,
          messages: [{ role: 'user', content: 'Count my tokens' }],
          stream: true,
          stream_options: { include_usage: true },
        });
        const chunks = [];
        for await (const chunk of stream) chunks.push(chunk);
        const last = chunks.at(-1);
        assert.deepEqual(last.choices, [], 'the usage chunk has no choices');
        assert.equal(last.usage.prompt_tokens, v.usage.prompt);
        assert.equal(last.usage.completion_tokens, v.usage.completion);
        assert.equal(last.usage.total_tokens, v.usage.prompt + v.usage.completion);
        assert.equal(chunks.at(-2).choices[0]?.finish_reason, 'stop', 'the stop chunk precedes the usage chunk');
      });

      it('streaming tool call via chat.completions.stream(): arguments reassembled', async () => {
        const { result: final, rec } = await oneUpstreamCall(mock(v), () =>
          client()
            .chat.completions.stream({ model: v.model, messages: [{ role: 'user', content: TOOL_QUESTION }], tools: TOOLS })
            .finalChatCompletion(),
        );
        v.checkRequest(rec, { stream: true });
        assert.equal(rec.reply.kind, 'tool');
        const choice = final.choices[0];
        assert.equal(choice.finish_reason, 'tool_calls');
        assert.equal(choice.message.tool_calls?.length, 1, JSON.stringify(choice.message));
        const [call] = choice.message.tool_calls;
        assert.equal(call.function.name, 'get_weather');
        assert.deepEqual(JSON.parse(call.function.arguments), TOOL_ARGS);
        assert.ok(call.id, 'the streamed tool call has an id');
      });

      it('multi-turn with an assistant tool call and a tool result: text back, vendor got its shape', async () => {
        const messages = [
          { role: 'user', content: TOOL_QUESTION },
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: TOOL_CALL_ID, type: 'function', function: { name: 'get_weather', arguments: TOOL_ARGS_JSON } }],
          },
          { role: 'tool', tool_call_id: TOOL_CALL_ID, content: TOOL_RESULT },
        ];
        const { result: res, rec } = await oneUpstreamCall(mock(v), () =>
          client().chat.completions.create({ model: v.model, messages, tools: TOOLS }),
        );
        v.checkRequest(rec, { stream: false });
        v.toolTurnSent(rec.body);
        assert.equal(rec.reply.kind, 'text', 'the vendor saw the tool result as the last message');
        assert.equal(res.choices[0].finish_reason, 'stop');
        assert.equal(res.choices[0].message.content, replyText(v.name, TOOL_QUESTION));
      });

      it('system prompt is mapped to the vendor field', async () => {
        const { result: res, rec } = await oneUpstreamCall(mock(v), () =>
          client().chat.completions.create({
            model: v.model,
            messages: [
              { role: 'system', content: SYSTEM_PROMPT },
              { role: 'user', content: 'Hello there' },
            ],
          }),
        );
        v.systemSent(rec.body);
        assert.equal(res.choices[0].message.content, replyText(v.name, 'Hello there'));
      });

      it('vendor 429 -> RateLimitError with an OpenAI-shaped error keeping the vendor message', async () => {
        const message = `Too many requests to ${v.key}, slow down (quota q-17)`;
        mock(v).failNext({ status: 429, body: v.errorBody(429, message) });
        const id = rid(`${v.key}-429`);
        await assert.rejects(
          client().chat.completions.create({ model: v.model, messages: [{ role: 'user', content: 'Hi' }] }, withId(id)),
          (err) => {
            assert.ok(err instanceof OpenAI.RateLimitError, `RateLimitError, got ${err.constructor.name}: ${err.message}`);
            assert.equal(err.status, 429);
            assert.equal(typeof err.error, 'object', 'a body with an error object');
            assert.equal(typeof err.error.message, 'string');
            assert.ok(err.error.message.includes(message), `vendor message kept: ${JSON.stringify(err.error)}`);
            assert.equal(typeof err.error.type, 'string', `OpenAI error type: ${JSON.stringify(err.error)}`);
            return true;
          },
        );
        assert.equal(mock(v).requests.at(-1).reply.kind, 'error', 'the vendor answered the error');
        const line = await logLine(fx.current.gw, id);
        assert.equal(line.status, 429);
        assert.equal(line.provider, v.provider);
      });

      it('vendor 500 quoting the provider credentials -> 500, credentials redacted for the client', async () => {
        const message = `Upstream rejected credential ${v.secrets.join(' / ')} during signing check`;
        // Once over the wire (raw bytes and headers), once through the SDK.
        mock(v).failNext({ status: 500, body: v.errorBody(500, message) });
        const r = await toResult(
          await send(fx.current.gw.url, '/v1/chat/completions', {
            method: 'POST',
            json: { model: v.model, messages: [{ role: 'user', content: 'Hi' }] },
            headers: { authorization: `Bearer ${CLIENT_KEY}` },
          }),
        );
        assert.equal(r.status, 500, r.text);
        for (const secret of v.secrets) {
          assert.ok(!r.text.includes(secret), `secret leaked in the body: ${r.text}`);
          assert.ok(!JSON.stringify(r.headers).includes(secret), 'secret leaked in a header');
        }
        assert.equal(typeof r.json?.error?.message, 'string', `OpenAI error shape: ${r.text}`);
        assert.equal(typeof r.json.error.type, 'string', `OpenAI error type: ${r.text}`);
        assert.match(r.json.error.message, /Upstream rejected credential/);
        assert.match(r.json.error.message, /during signing check/);

        mock(v).failNext({ status: 500, body: v.errorBody(500, message) });
        await assert.rejects(
          client().chat.completions.create({ model: v.model, messages: [{ role: 'user', content: 'Hi' }] }),
          (err) => {
            assert.ok(err instanceof OpenAI.InternalServerError, `InternalServerError, got ${err.constructor.name}`);
            assert.equal(err.status, 500);
            const seen = `${err.message} ${JSON.stringify(err.error)}`;
            for (const secret of v.secrets) assert.ok(!seen.includes(secret), `secret leaked: ${seen}`);
            return true;
          },
        );
        // Nor is it logged.
        for (const secret of v.secrets) assert.ok(!fx.current.gw.output().includes(secret), 'secret in the gateway output');
      });

      if (v.rejectsN) {
        it('n: 2 -> 400 naming the parameter, nothing sent upstream', async () => {
          const before = mock(v).requests.length;
          await assert.rejects(
            client().chat.completions.create({ model: v.model, messages: [{ role: 'user', content: 'Hi' }], n: 2 }),
            (err) => {
              assert.ok(err instanceof OpenAI.BadRequestError, `BadRequestError, got ${err.constructor.name}: ${err.message}`);
              assert.equal(err.status, 400);
              assert.match(err.error?.message ?? '', /\bn\b/, `the message names n: ${JSON.stringify(err.error)}`);
              return true;
            },
          );
          assert.equal(mock(v).requests.length, before, 'no upstream request');
        });
      }

      it('access log and metrics: usage, cost from the model pricing', async () => {
        const gw = fx.current.gw;
        const labels = { model: v.model, provider: v.provider };
        const m0 = await scrape(gw.url);
        const id = rid(`${v.key}-cost`);
        await client().chat.completions.create({ model: v.model, messages: [{ role: 'user', content: 'Price me' }] }, withId(id));
        const line = await logLine(gw, id);
        assert.equal(line.model, v.model);
        assert.equal(line.provider, v.provider);
        assert.equal(line.status, 200);
        assert.equal(line.stream, false);
        assert.equal(line.api, 'openai');
        assert.equal(line.prompt_tokens, v.usage.prompt);
        assert.equal(line.completion_tokens, v.usage.completion);
        assert.equal(line.cached_tokens, v.usage.cached);
        const cost = expectedCost(v.usage);
        assertClose(line.cost_usd, cost, 'access log cost_usd');

        const m1 = await scrape(gw.url);
        const delta = (name, extra = {}) => sum(m1, name, { ...labels, ...extra }) - sum(m0, name, { ...labels, ...extra });
        assert.equal(delta('tahua_tokens_total', { type: 'prompt' }), v.usage.prompt);
        assert.equal(delta('tahua_tokens_total', { type: 'completion' }), v.usage.completion);
        assert.equal(delta('tahua_tokens_total', { type: 'cached_prompt' }), v.usage.cached);
        assertClose(delta('tahua_cost_usd_total'), cost, 'tahua_cost_usd_total increase');
      });
    });
  }

  describe('an unpriced model', () => {
    it('logs its usage with cost_usd null', async () => {
      const id = rid('unpriced');
      await client().chat.completions.create({ model: 'claude-unpriced', messages: [{ role: 'user', content: 'Free?' }] }, withId(id));
      const line = await logLine(fx.current.gw, id);
      assert.equal(line.model, 'claude-unpriced');
      assert.equal(line.provider, 'anth');
      assert.equal(line.prompt_tokens, USAGE.input + USAGE.cached);
      assert.equal(line.completion_tokens, USAGE.output);
      assert.equal(line.cost_usd, null);
    });
  });

  // Boost.JSON reads 32 levels unless told otherwise; the router takes 128
  // (server.max_json_depth) and a model's tool input nests as deep as it likes. A
  // translator that kept the default refused the request (400 "not a JSON object") and the
  // answer (502): both are read as deep as the gateway reads anything now.
  describe('documents nested deeper than 32 levels through a translation', () => {
    const nestedArray = (levels) => (levels === 0 ? 'bottom' : [nestedArray(levels - 1)]);
    it('tool parameters 40 levels deep reach Anthropic, and a tool input 40 levels deep comes back', async () => {
      const parameters = { ...WEATHER_PARAMS, properties: { ...WEATHER_PARAMS.properties, trail: { type: 'array', default: nestedArray(40) } } };
      const input = { location: 'Paris', trail: nestedArray(40) };
      const anthropic = fx.current.mocks.anthropic;
      anthropic.failNext({
        status: 200,
        body: {
          id: 'msg_deep',
          type: 'message',
          role: 'assistant',
          model: 'claude-sonnet-4-5',
          content: [{ type: 'tool_use', id: 'toolu_deep', name: 'get_weather', input }],
          stop_reason: 'tool_use',
          stop_sequence: null,
          usage: { input_tokens: 5, output_tokens: 3 },
        },
      });
      const { result: res, rec } = await oneUpstreamCall(anthropic, () =>
        client().chat.completions.create({
          model: 'claude-x',
          messages: [{ role: 'user', content: TOOL_QUESTION }],
          tools: [{ type: 'function', function: { name: 'get_weather', parameters } }],
        }),
      );
      assert.deepEqual(rec.body.tools[0].input_schema, parameters, 'the 40-level schema reached the vendor whole');
      const [call] = res.choices[0].message.tool_calls;
      assert.equal(call.id, 'toolu_deep');
      assert.deepEqual(JSON.parse(call.function.arguments), input, 'the 40-level tool input reached the client whole');
    });
  });

  describe('openai-type provider (pass-through): stream usage, error redaction', () => {
    it('a stream without include_usage is sent upstream with it; the client sees no usage chunk; the log has the tokens', async () => {
      const oai = () => fx.current.mocks.openai;
      const userText = 'Stream without usage';
      const id = rid('oai-hidden-usage');
      const { result: chunks, rec } = await oneUpstreamCall(oai(), async () => {
        const stream = await client().chat.completions.create(
          { model: 'gpt-x', messages: [{ role: 'user', content: userText }], stream: true },
          withId(id),
        );
        const out = [];
        for await (const chunk of stream) out.push(chunk);
        return out;
      });
      assert.equal(rec.path, '/v1/chat/completions');
      assert.equal(rec.headers.authorization, `Bearer ${OPENAI_KEY}`);
      assert.equal(rec.body.model, 'gpt-4o-mini');
      assert.deepEqual(rec.body.stream_options, { include_usage: true }, 'include_usage requested upstream');
      assert.ok(chunks.length > 0);
      assert.ok(chunks.every((c) => c.choices.length > 0), 'no chunk with empty choices (the usage chunk is hidden)');
      assert.ok(chunks.every((c) => c.usage == null), 'no usage shown to the client');
      assert.equal(chunks.map((c) => c.choices[0].delta?.content ?? '').join(''), replyText(VENDOR_NAMES.openai, userText));
      assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');

      const line = await logLine(fx.current.gw, id);
      assert.equal(line.stream, true);
      assert.equal(line.provider, 'oai');
      assert.equal(line.prompt_tokens, USAGE.input);
      assert.equal(line.completion_tokens, USAGE.output);
      assert.equal(line.cached_tokens, USAGE.cached);
      assertClose(line.cost_usd, expectedCost({ prompt: USAGE.input, cached: USAGE.cached, completion: USAGE.output }), 'cost_usd');
    });

    it('a stream with include_usage keeps its usage chunk', async () => {
      const oai = fx.current.mocks.openai;
      const stream = await client().chat.completions.create({
        model: 'gpt-x',
        messages: [{ role: 'user', content: 'Stream with usage' }],
        stream: true,
        stream_options: { include_usage: true },
      });
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      assert.deepEqual(oai.requests.at(-1).body.stream_options, { include_usage: true });
      const usageChunks = chunks.filter((c) => c.choices.length === 0);
      assert.equal(usageChunks.length, 1, 'one usage chunk');
      assert.equal(chunks.at(-1), usageChunks[0], 'it is the last chunk');
      assert.equal(usageChunks[0].usage.prompt_tokens, USAGE.input);
      assert.equal(usageChunks[0].usage.completion_tokens, USAGE.output);
    });

    it('an upstream 500 quoting the API key: the key is redacted for the client', async () => {
      const oai = fx.current.mocks.openai;
      const message = `Incorrect API key provided: ${OPENAI_KEY} (rotated)`;
      oai.failNext({ status: 500, body: { error: { message, type: 'server_error', param: null, code: null } } });
      const r = await toResult(
        await send(fx.current.gw.url, '/v1/chat/completions', {
          method: 'POST',
          json: { model: 'gpt-x', messages: [{ role: 'user', content: 'Hi' }] },
          headers: { authorization: `Bearer ${CLIENT_KEY}` },
        }),
      );
      assert.equal(oai.requests.at(-1).reply.kind, 'error', 'the upstream answered the error');
      assert.equal(r.status, 500, r.text);
      assert.ok(!r.text.includes(OPENAI_KEY), `API key leaked in the body: ${r.text}`);
      assert.ok(!JSON.stringify(r.headers).includes(OPENAI_KEY), 'API key leaked in a header');
      assert.match(r.json?.error?.message ?? '', /Incorrect API key provided: .*\(rotated\)/, r.text);
    });

    it('a non-streaming request is passed through with its usage', async () => {
      const res = await client().chat.completions.create({ model: 'gpt-x', messages: [{ role: 'user', content: 'Plain' }] });
      assert.equal(res.choices[0].message.content, replyText(VENDOR_NAMES.openai, 'Plain'));
      assert.equal(res.usage.prompt_tokens, USAGE.input);
      assert.equal(res.usage.completion_tokens, USAGE.output);
      assert.equal(fx.current.mocks.openai.requests.at(-1).body.stream_options, undefined, 'no stream_options added');
    });
  });
});
