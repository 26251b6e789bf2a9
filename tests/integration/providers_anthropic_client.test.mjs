// The official Anthropic SDK (@anthropic-ai/sdk) against tahua's /v1/messages and
// /v1/messages/count_tokens, in front of every kind of provider: an `anthropic` provider
// (pass-through), and `openai`, `gemini`, `bedrock` and the in-process `mock` provider
// (translated Messages -> chat -> vendor and back). The upstreams are the vendor-format mocks
// of lib/vendor_mocks.mjs, which record what the gateway sent them.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { sharedFixture } from './lib/fixtures.mjs';
import { gatewayConfig, startTahua } from './lib/tahua.mjs';
import {
  ANTHROPIC_COUNT_TOKENS,
  BEDROCK_CREDENTIALS,
  TOOL_ARGS,
  TOOL_ARGS_JSON,
  USAGE,
  VENDOR_NAMES,
  replyText,
  startAnthropicMock,
  startBedrockMock,
  startGeminiMock,
  startOpenAIChatMock,
} from './lib/vendor_mocks.mjs';

const TIMEOUTS = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };
const CLIENT_KEY = 'sk-client';
const ANTHROPIC_KEY = 'sk-ant-test';
const OPENAI_KEY = 'sk-test';
const GEMINI_KEY = 'gm';
const MAX_TOKENS = 64;

// Client-facing model name -> provider and upstream model name.
const MODELS = {
  anthropic: { name: 'claude-pass', provider: 'anth', upstream_model: 'claude-upstream-1' },
  openai: { name: 'gpt-via-messages', provider: 'oai', upstream_model: 'gpt-upstream-1' },
  gemini: { name: 'gemini-via-messages', provider: 'gem', upstream_model: 'gemini-upstream-1' },
  bedrock: { name: 'bedrock-via-messages', provider: 'bed', upstream_model: 'anthropic.claude-bedrock-v1' },
  mock: { name: 'local-mock', provider: 'local' },
};

const WEATHER_TOOL = {
  name: 'get_weather',
  description: 'Current weather in a city',
  input_schema: {
    type: 'object',
    properties: { location: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
    required: ['location'],
  },
};

async function startAll({ fragmentSse = false } = {}) {
  const mocks = [];
  try {
    const anthropic = await startAnthropicMock({ fragmentSse });
    mocks.push(anthropic);
    const openai = await startOpenAIChatMock({ fragmentSse });
    mocks.push(openai);
    const gemini = await startGeminiMock({ fragmentSse });
    mocks.push(gemini);
    const bedrock = await startBedrockMock();
    mocks.push(bedrock);
    const config = gatewayConfig({
      providers: [
        { name: 'anth', type: 'anthropic', base_url: anthropic.baseUrl(), api_key: ANTHROPIC_KEY, default_max_tokens: 512, timeouts: TIMEOUTS },
        { name: 'oai', type: 'openai', base_url: openai.baseUrl(), api_key: OPENAI_KEY, timeouts: TIMEOUTS },
        { name: 'gem', type: 'gemini', base_url: gemini.baseUrl(), api_key: GEMINI_KEY, timeouts: TIMEOUTS },
        {
          name: 'bed',
          type: 'bedrock',
          base_url: bedrock.baseUrl(),
          aws: {
            region: BEDROCK_CREDENTIALS.region,
            access_key_id: BEDROCK_CREDENTIALS.accessKeyId,
            secret_access_key: BEDROCK_CREDENTIALS.secretAccessKey,
          },
          timeouts: TIMEOUTS,
        },
        { name: 'local', type: 'mock', timeouts: TIMEOUTS },
      ],
      models: Object.values(MODELS),
    });
    const gw = await startTahua({ config });
    const client = new Anthropic({ baseURL: gw.url, apiKey: CLIENT_KEY, maxRetries: 0, timeout: 10_000 });
    const close = async () => {
      await gw.kill();
      await Promise.all(mocks.map((m) => m.close()));
    };
    return { gw, client, anthropic, openai, gemini, bedrock, close };
  } catch (err) {
    await Promise.all(mocks.map((m) => m.close()));
    throw err;
  }
}

/** Calls `fn` and returns [its result, the one request `mock` received meanwhile]. */
async function withUpstreamRequest(mock, fn) {
  const before = mock.requests.length;
  const result = await fn();
  assert.equal(mock.requests.length, before + 1, `exactly one request reached the ${mock.vendor} mock`);
  return [result, mock.requests.at(-1)];
}

/** The client's key appears in no header and not in the body the upstream received. */
function assertClientKeyNotForwarded(rec) {
  for (let i = 0; i < rec.rawHeaders.length; i += 2) {
    assert.ok(!String(rec.rawHeaders[i + 1]).includes(CLIENT_KEY), `client key forwarded in ${rec.rawHeaders[i]}`);
  }
  assert.ok(!rec.rawBody.toString('utf8').includes(CLIENT_KEY), 'client key forwarded in the body');
}

/** The access log line of a request that reached an upstream (by the x-request-id it carried). */
async function accessLineOf(gw, rec) {
  const id = rec.headers['x-request-id'];
  assert.equal(typeof id, 'string', 'the gateway sends x-request-id upstream');
  const [line] = await gw.waitForAccessLog((l) => l.request_id === id);
  return line;
}

function toolUses(message) {
  return message.content.filter((b) => b.type === 'tool_use');
}

/** Records the SDK's raw stream event types, the text deltas and the tool input JSON deltas. */
function watch(stream) {
  const seen = { types: [], text: [], json: [] };
  stream.on('streamEvent', (event) => seen.types.push(event.type));
  stream.on('text', (delta) => seen.text.push(delta));
  stream.on('inputJson', (partial) => seen.json.push(partial));
  return seen;
}

/** A well-formed Messages event sequence: message_start first, message_stop last, blocks closed. */
function assertEventSequence(types) {
  assert.equal(types[0], 'message_start', types.join(','));
  assert.equal(types.at(-1), 'message_stop', types.join(','));
  assert.equal(types.at(-2), 'message_delta', types.join(','));
  const starts = types.filter((x) => x === 'content_block_start').length;
  assert.ok(starts >= 1, 'at least one content block');
  assert.equal(types.filter((x) => x === 'content_block_stop').length, starts, 'every block is stopped');
  assert.ok(types.includes('content_block_delta'));
}

const userMessage = (text) => [{ role: 'user', content: text }];

describe('Anthropic SDK -> tahua -> anthropic provider (pass-through)', () => {
  const fx = sharedFixture(startAll);
  const model = MODELS.anthropic.name;

  it('non-streaming text: upstream model name and the gateway\'s x-api-key, never the client\'s key', async () => {
    const { client, anthropic } = fx.current;
    const prompt = 'Hi Claude, pass this through';
    const [res, rec] = await withUpstreamRequest(anthropic, () =>
      client.messages.create({ model, max_tokens: MAX_TOKENS, messages: userMessage(prompt) }));
    assert.equal(res.type, 'message');
    assert.equal(res.role, 'assistant');
    assert.deepEqual(res.content, [{ type: 'text', text: replyText(VENDOR_NAMES.anthropic, prompt) }]);
    assert.equal(res.stop_reason, 'end_turn');
    assert.equal(res.usage.input_tokens, USAGE.input);
    assert.equal(res.usage.cache_read_input_tokens, USAGE.cached);
    assert.equal(res.usage.output_tokens, USAGE.output);

    assert.equal(rec.method, 'POST');
    assert.equal(rec.path, '/v1/messages');
    assert.deepEqual(rec.body, { model: MODELS.anthropic.upstream_model, max_tokens: MAX_TOKENS, messages: userMessage(prompt) });
    assert.equal(rec.headers['x-api-key'], ANTHROPIC_KEY);
    assert.match(rec.headers['anthropic-version'] ?? '', /^\d{4}-\d{2}-\d{2}$/);
    assert.equal(rec.headers.authorization, undefined, 'the client\'s Authorization header is not forwarded');
    assertClientKeyNotForwarded(rec);
  });

  it('streaming tool use: finalMessage() has a tool_use block with TOOL_ARGS, built from input_json deltas', async () => {
    const { client, anthropic } = fx.current;
    let seen;
    const [final, rec] = await withUpstreamRequest(anthropic, () => {
      const stream = client.messages.stream({
        model,
        max_tokens: MAX_TOKENS,
        tools: [WEATHER_TOOL],
        messages: userMessage('What is the weather in Paris?'),
      });
      seen = watch(stream);
      return stream.finalMessage();
    });
    const [tool] = toolUses(final);
    assert.equal(toolUses(final).length, 1);
    assert.equal(tool.id, rec.reply.toolCallId);
    assert.equal(tool.name, WEATHER_TOOL.name);
    assert.deepEqual(tool.input, TOOL_ARGS);
    assert.equal(final.stop_reason, 'tool_use');
    assert.equal(final.usage.output_tokens, USAGE.output);
    assert.equal(seen.json.join(''), TOOL_ARGS_JSON, 'the input_json_delta pieces concatenate to the arguments');
    assertEventSequence(seen.types);

    assert.equal(rec.body.stream, true);
    assert.equal(rec.body.model, MODELS.anthropic.upstream_model);
    assert.deepEqual(rec.body.tools, [WEATHER_TOOL], 'tools are passed through in Anthropic shape');
    assert.equal(rec.headers['x-api-key'], ANTHROPIC_KEY);
    assertClientKeyNotForwarded(rec);
  });

  it('the access log has the usage of both, with cached (cache-read) tokens', async () => {
    const { client, anthropic, gw } = fx.current;
    const [, plainRec] = await withUpstreamRequest(anthropic, () =>
      client.messages.create({ model, max_tokens: MAX_TOKENS, messages: userMessage('usage please') }));
    const [, streamRec] = await withUpstreamRequest(anthropic, () =>
      client.messages.stream({ model, max_tokens: MAX_TOKENS, messages: userMessage('streamed usage please') }).finalMessage());
    for (const [rec, stream] of [[plainRec, false], [streamRec, true]]) {
      const line = await accessLineOf(gw, rec);
      assert.equal(line.path, '/v1/messages');
      assert.equal(line.model, model);
      assert.equal(line.provider, 'anth');
      assert.equal(line.status, 200);
      assert.equal(line.stream, stream);
      assert.equal(line.completion_tokens, USAGE.output);
      assert.equal(line.cached_tokens, USAGE.cached);
      // Anthropic's input_tokens excludes cache reads: the prompt is input + cache_read + cache_creation.
      assert.equal(line.prompt_tokens, USAGE.input + USAGE.cached);
      assert.equal(line.total_tokens, line.prompt_tokens + line.completion_tokens);
    }
  });
});

describe('Anthropic SDK -> tahua -> openai provider (translated)', () => {
  const fx = sharedFixture(startAll);
  const model = MODELS.openai.name;

  it('non-streaming text: an OpenAI chat request upstream, an Anthropic message back', async () => {
    const { client, openai, gw } = fx.current;
    const prompt = 'Hello through the translation';
    const [res, rec] = await withUpstreamRequest(openai, () =>
      client.messages.create({ model, max_tokens: MAX_TOKENS, system: 'Be brief.', messages: userMessage(prompt) }));
    assert.equal(res.type, 'message');
    assert.equal(res.role, 'assistant');
    assert.match(res.id, /^msg_/);
    assert.equal(res.model, model);
    assert.deepEqual(res.content, [{ type: 'text', text: replyText(VENDOR_NAMES.openai, prompt) }]);
    assert.equal(res.stop_reason, 'end_turn');
    assert.equal(res.usage.output_tokens, USAGE.output);
    assert.equal(res.usage.cache_read_input_tokens, USAGE.cached);
    assert.equal(res.usage.input_tokens + res.usage.cache_read_input_tokens, USAGE.input, 'OpenAI prompt_tokens include the cached ones');

    assert.equal(rec.path, '/v1/chat/completions');
    assert.equal(rec.headers.authorization, `Bearer ${OPENAI_KEY}`);
    assert.equal(rec.body.model, MODELS.openai.upstream_model);
    assert.equal(rec.body.max_tokens, MAX_TOKENS);
    assert.deepEqual(rec.body.messages, [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: prompt }]);
    assert.notEqual(rec.body.stream, true);
    assertClientKeyNotForwarded(rec);

    const line = await accessLineOf(gw, rec);
    assert.equal(line.provider, 'oai');
    assert.equal(line.prompt_tokens, USAGE.input);
    assert.equal(line.completion_tokens, USAGE.output);
    assert.equal(line.cached_tokens, USAGE.cached);
  });

  it('non-streaming tool use: tools in OpenAI function shape upstream, a tool_use block back', async () => {
    const { client, openai } = fx.current;
    const [res, rec] = await withUpstreamRequest(openai, () =>
      client.messages.create({ model, max_tokens: MAX_TOKENS, tools: [WEATHER_TOOL], messages: userMessage('Weather in Paris?') }));
    assert.equal(res.stop_reason, 'tool_use');
    const uses = toolUses(res);
    assert.equal(uses.length, 1);
    assert.equal(uses[0].id, rec.reply.toolCallId);
    assert.equal(uses[0].name, WEATHER_TOOL.name);
    assert.deepEqual(uses[0].input, TOOL_ARGS);

    assert.deepEqual(rec.body.tools, [
      {
        type: 'function',
        function: { name: WEATHER_TOOL.name, description: WEATHER_TOOL.description, parameters: WEATHER_TOOL.input_schema },
      },
    ]);
  });

  it('streaming text: on("text") deltas add up to finalText(); stream_options.include_usage upstream', async () => {
    const { client, openai } = fx.current;
    const prompt = 'Stream me some text';
    let seen;
    let final;
    const [text, rec] = await withUpstreamRequest(openai, async () => {
      const stream = client.messages.stream({ model, max_tokens: MAX_TOKENS, messages: userMessage(prompt) });
      seen = watch(stream);
      const t = await stream.finalText();
      final = await stream.finalMessage();
      return t;
    });
    const expected = replyText(VENDOR_NAMES.openai, prompt);
    assert.equal(text, expected);
    assert.equal(seen.text.join(''), expected);
    assert.ok(seen.text.length >= 3, `streamed in pieces, got ${JSON.stringify(seen.text)}`);
    assertEventSequence(seen.types);
    assert.equal(final.stop_reason, 'end_turn');
    assert.equal(final.usage.output_tokens, USAGE.output);
    assert.equal(final.usage.input_tokens + (final.usage.cache_read_input_tokens ?? 0), USAGE.input, 'the stream\'s usage chunk reaches the client');

    assert.equal(rec.body.stream, true);
    assert.deepEqual(rec.body.stream_options, { include_usage: true });
    assert.equal(rec.body.model, MODELS.openai.upstream_model);
  });

  it('streamed usage: message_start announces the estimated prompt (> 0, growing with it), the final usage is exact', async () => {
    const { client, openai } = fx.current;
    const streamed = async (prompt) => {
      const starts = [];
      const deltas = [];
      const [final] = await withUpstreamRequest(openai, () => {
        const stream = client.messages.stream({ model, max_tokens: MAX_TOKENS, messages: userMessage(prompt) });
        stream.on('streamEvent', (event) => {
          // Copies: the SDK accumulates the final message into message_start's object.
          if (event.type === 'message_start') starts.push({ ...event.message.usage });
          if (event.type === 'message_delta') deltas.push({ ...event.usage });
        });
        return stream.finalMessage();
      });
      assert.equal(starts.length, 1);
      assert.equal(deltas.length, 1);
      return { start: starts[0], delta: deltas[0], final };
    };
    const short = await streamed('How many tokens?');
    const long = await streamed('How many tokens? '.repeat(50));
    // The upstream reports usage only in its last chunk: message_start has the gateway's
    // estimate (LangChain's ChatAnthropic reads input tokens only from there).
    assert.ok(short.start.input_tokens > 0, JSON.stringify(short.start));
    assert.ok(long.start.input_tokens > short.start.input_tokens, `${long.start.input_tokens} > ${short.start.input_tokens}`);
    for (const { delta, final } of [short, long]) {
      // message_delta carries the exact cumulative figures, which the SDK keeps.
      assert.deepEqual(delta, { input_tokens: USAGE.input - USAGE.cached, output_tokens: USAGE.output, cache_read_input_tokens: USAGE.cached });
      assert.equal(final.usage.input_tokens, USAGE.input - USAGE.cached);
      assert.equal(final.usage.cache_read_input_tokens, USAGE.cached);
      assert.equal(final.usage.output_tokens, USAGE.output);
    }
  });

  it('streaming tool use: finalMessage() has the tool_use block, input_json deltas give TOOL_ARGS', async () => {
    const { client, openai, gw } = fx.current;
    let seen;
    const [final, rec] = await withUpstreamRequest(openai, () => {
      const stream = client.messages.stream({ model, max_tokens: MAX_TOKENS, tools: [WEATHER_TOOL], messages: userMessage('Weather in Paris?') });
      seen = watch(stream);
      return stream.finalMessage();
    });
    assert.equal(final.stop_reason, 'tool_use');
    const uses = toolUses(final);
    assert.equal(uses.length, 1);
    assert.equal(uses[0].id, rec.reply.toolCallId);
    assert.equal(uses[0].name, WEATHER_TOOL.name);
    assert.deepEqual(uses[0].input, TOOL_ARGS);
    assert.equal(seen.json.join(''), TOOL_ARGS_JSON);
    assertEventSequence(seen.types);

    assert.equal(rec.body.stream, true);
    assert.deepEqual(rec.body.stream_options, { include_usage: true });
    assert.equal(rec.body.tools?.[0]?.type, 'function');
    assert.equal(rec.body.tools[0].function.name, WEATHER_TOOL.name);
    assert.deepEqual(rec.body.tools[0].function.parameters, WEATHER_TOOL.input_schema);

    const line = await accessLineOf(gw, rec);
    assert.equal(line.stream, true);
    assert.equal(line.completion_tokens, USAGE.output);
    assert.equal(line.prompt_tokens, USAGE.input);
  });

  it('request parameters: stop_sequences, temperature, top_p, metadata.user_id and tool_choice are mapped', async () => {
    const { client, openai } = fx.current;
    const base = { model, max_tokens: MAX_TOKENS, tools: [WEATHER_TOOL], messages: userMessage('x') };
    const [, rec] = await withUpstreamRequest(openai, () =>
      client.messages.create({
        ...base,
        stop_sequences: ['END'],
        temperature: 0.2,
        top_p: 0.9,
        metadata: { user_id: 'user-1' },
        tool_choice: { type: 'tool', name: WEATHER_TOOL.name },
      }));
    assert.deepEqual(rec.body.stop, ['END']);
    assert.equal(rec.body.temperature, 0.2);
    assert.equal(rec.body.top_p, 0.9);
    assert.equal(rec.body.user, 'user-1');
    assert.deepEqual(rec.body.tool_choice, { type: 'function', function: { name: WEATHER_TOOL.name } });

    const [, anyRec] = await withUpstreamRequest(openai, () =>
      client.messages.create({ ...base, tool_choice: { type: 'any', disable_parallel_tool_use: true } }));
    assert.equal(anyRec.body.tool_choice, 'required');
    assert.equal(anyRec.body.parallel_tool_calls, false);
  });

  it('an image block becomes an image_url part with a data: URL', async () => {
    const { client, openai } = fx.current;
    const data = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
    const [res, rec] = await withUpstreamRequest(openai, () =>
      client.messages.create({
        model,
        max_tokens: MAX_TOKENS,
        messages: [{
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data } },
            { type: 'text', text: 'What is in this picture?' },
          ],
        }],
      }));
    assert.equal(res.content[0].text, replyText(VENDOR_NAMES.openai, 'What is in this picture?'));
    assert.deepEqual(rec.body.messages, [{
      role: 'user',
      content: [
        { type: 'image_url', image_url: { url: `data:image/png;base64,${data}` } },
        { type: 'text', text: 'What is in this picture?' },
      ],
    }]);
  });

  it('system text blocks keep their boundary (not glued into one word)', async () => {
    const { client, openai } = fx.current;
    const [, rec] = await withUpstreamRequest(openai, () =>
      client.messages.create({
        model,
        max_tokens: MAX_TOKENS,
        system: [{ type: 'text', text: 'Rule one.' }, { type: 'text', text: 'Rule two.', cache_control: { type: 'ephemeral' } }],
        messages: userMessage('x'),
      }));
    const sys = rec.body.messages.filter((m) => m.role === 'system');
    // Either one system message per block / an array of text parts, or one string with a separator.
    const parts = sys.flatMap((m) => (typeof m.content === 'string' ? [m.content] : m.content.map((p) => p.text)));
    assert.match(parts.join('\n'), /^Rule one\.\s+Rule two\.$/, `upstream system: ${JSON.stringify(sys)}`);
  });

  it('multi-turn: tool_use + tool_result blocks become assistant tool_calls + a tool message with the same id', async () => {
    const { client, openai } = fx.current;
    const question = 'What is the weather in Paris?';
    const toolUseId = 'toolu_01MultiTurnTest';
    const messages = [
      { role: 'user', content: question },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Let me check.' },
          { type: 'tool_use', id: toolUseId, name: WEATHER_TOOL.name, input: TOOL_ARGS },
        ],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: toolUseId, content: '18 degrees and sunny' }] },
    ];
    const [res, rec] = await withUpstreamRequest(openai, () =>
      client.messages.create({ model, max_tokens: MAX_TOKENS, tools: [WEATHER_TOOL], messages }));
    // The last message is a tool result: the mock answers with text.
    assert.deepEqual(res.content, [{ type: 'text', text: replyText(VENDOR_NAMES.openai, question) }]);
    assert.equal(res.stop_reason, 'end_turn');

    const up = rec.body.messages;
    assert.equal(up.length, 3, JSON.stringify(up));
    assert.deepEqual(up[0], { role: 'user', content: question });
    assert.equal(up[1].role, 'assistant');
    const assistantText = typeof up[1].content === 'string' ? up[1].content : up[1].content.map((p) => p.text).join('');
    assert.equal(assistantText, 'Let me check.');
    assert.equal(up[1].tool_calls?.length, 1, JSON.stringify(up[1]));
    const [call] = up[1].tool_calls;
    assert.equal(call.id, toolUseId);
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, WEATHER_TOOL.name);
    assert.deepEqual(JSON.parse(call.function.arguments), TOOL_ARGS);
    assert.equal(up[2].role, 'tool');
    assert.equal(up[2].tool_call_id, toolUseId);
    const toolText = typeof up[2].content === 'string' ? up[2].content : up[2].content.map((p) => p.text).join('');
    assert.equal(toolText, '18 degrees and sunny');
  });

  it('multi-turn: two parallel tool_use blocks, tool_result with block content and is_error, then user text', async () => {
    const { client, openai } = fx.current;
    const messages = [
      { role: 'user', content: 'Weather in Oslo and Rome?' },
      {
        role: 'assistant',
        content: [
          { type: 'tool_use', id: 'toolu_A', name: WEATHER_TOOL.name, input: { location: 'Oslo' } },
          { type: 'tool_use', id: 'toolu_B', name: WEATHER_TOOL.name, input: { location: 'Rome' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_A', content: [{ type: 'text', text: 'snow' }] },
          { type: 'tool_result', tool_use_id: 'toolu_B', content: 'service unavailable', is_error: true },
          { type: 'text', text: 'Summarise please' },
        ],
      },
    ];
    const [res, rec] = await withUpstreamRequest(openai, () =>
      client.messages.create({ model, max_tokens: MAX_TOKENS, tools: [WEATHER_TOOL], messages }));
    // The last upstream message is the user's text, so the mock calls the tool again.
    assert.equal(toolUses(res).length, 1);
    const up = rec.body.messages;
    const calls = up.find((m) => m.role === 'assistant')?.tool_calls ?? [];
    assert.deepEqual(calls.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)]), [
      ['toolu_A', WEATHER_TOOL.name, { location: 'Oslo' }],
      ['toolu_B', WEATHER_TOOL.name, { location: 'Rome' }],
    ]);
    const toolMsgs = up.filter((m) => m.role === 'tool');
    assert.deepEqual(toolMsgs.map((m) => m.tool_call_id), ['toolu_A', 'toolu_B']);
    const text = (c) => (typeof c === 'string' ? c : c.map((p) => p.text).join(''));
    assert.equal(text(toolMsgs[0].content), 'snow');
    assert.match(text(toolMsgs[1].content), /service unavailable/);
    const lastMsg = up.at(-1);
    assert.equal(lastMsg.role, 'user');
    assert.equal(text(lastMsg.content), 'Summarise please');
    assert.ok(up.indexOf(toolMsgs[1]) < up.indexOf(lastMsg), 'tool messages come before the user text');
  });
});

for (const vendor of ['gemini', 'bedrock']) {
  describe(`Anthropic SDK -> tahua -> ${vendor} provider (translated)`, () => {
    const fx = sharedFixture(startAll);
    const model = MODELS[vendor].name;
    const upstreamTools = (rec) =>
      vendor === 'gemini'
        ? rec.body.tools.flatMap((x) => x.functionDeclarations ?? x.function_declarations ?? [])
        : rec.body.toolConfig.tools.map((x) => x.toolSpec);
    const checkUpstream = (rec, { stream }) => {
      assert.equal(rec.model, MODELS[vendor].upstream_model);
      assert.equal(rec.stream, stream);
      if (vendor === 'gemini') assert.equal(rec.headers['x-goog-api-key'], GEMINI_KEY);
      else assert.equal(rec.sigv4.verified, true, `SigV4: ${rec.sigv4.reason}`);
      assertClientKeyNotForwarded(rec);
    };

    it('non-streaming text', async () => {
      const { client, [vendor]: mock } = fx.current;
      const prompt = `Hello ${vendor}, non-streaming`;
      const [res, rec] = await withUpstreamRequest(mock, () =>
        client.messages.create({ model, max_tokens: MAX_TOKENS, messages: userMessage(prompt) }));
      assert.deepEqual(res.content, [{ type: 'text', text: replyText(VENDOR_NAMES[vendor], prompt) }]);
      assert.equal(res.stop_reason, 'end_turn');
      assert.equal(res.model, model);
      assert.equal(res.usage.output_tokens, USAGE.output);
      assert.equal(res.usage.cache_read_input_tokens, USAGE.cached);
      checkUpstream(rec, { stream: false });
    });

    it('streaming text', async () => {
      const { client, [vendor]: mock } = fx.current;
      const prompt = `Hello ${vendor}, streaming`;
      let seen;
      let final;
      const [text, rec] = await withUpstreamRequest(mock, async () => {
        const stream = client.messages.stream({ model, max_tokens: MAX_TOKENS, messages: userMessage(prompt) });
        seen = watch(stream);
        const t = await stream.finalText();
        final = await stream.finalMessage();
        return t;
      });
      const expected = replyText(VENDOR_NAMES[vendor], prompt);
      assert.equal(text, expected);
      assert.equal(seen.text.join(''), expected);
      assert.ok(seen.text.length >= 3, `streamed in pieces, got ${JSON.stringify(seen.text)}`);
      assertEventSequence(seen.types);
      assert.equal(final.stop_reason, 'end_turn');
      assert.equal(final.usage.output_tokens, USAGE.output);
      checkUpstream(rec, { stream: true });
    });

    it('streamed usage: message_start has the prompt tokens, the final usage is exact', async () => {
      const { client, [vendor]: mock } = fx.current;
      let start;
      const [final] = await withUpstreamRequest(mock, () => {
        const stream = client.messages.stream({ model, max_tokens: MAX_TOKENS, messages: userMessage(`Usage from ${vendor}`) });
        stream.on('streamEvent', (event) => {
          if (event.type === 'message_start') start = { ...event.message.usage };  // the SDK updates its object later
        });
        return stream.finalMessage();
      });
      // Gemini's promptTokenCount includes cached tokens, Bedrock's inputTokens (like
      // Anthropic's input_tokens) does not.
      const exactInput = vendor === 'gemini' ? USAGE.input - USAGE.cached : USAGE.input;
      // Gemini reports the prompt in its first chunk already; Bedrock only at the end, so
      // message_start has the gateway's estimate there.
      if (vendor === 'gemini') assert.equal(start.input_tokens, exactInput, JSON.stringify(start));
      else assert.ok(start.input_tokens > 0, JSON.stringify(start));
      assert.equal(final.usage.input_tokens, exactInput);
      assert.equal(final.usage.cache_read_input_tokens, USAGE.cached);
      assert.equal(final.usage.output_tokens, USAGE.output);
    });

    it('non-streaming tool use', async () => {
      const { client, [vendor]: mock } = fx.current;
      const [res, rec] = await withUpstreamRequest(mock, () =>
        client.messages.create({ model, max_tokens: MAX_TOKENS, tools: [WEATHER_TOOL], messages: userMessage('Weather in Paris?') }));
      assert.equal(res.stop_reason, 'tool_use', 'a tool call ends with tool_use whatever the vendor\'s finish reason');
      const uses = toolUses(res);
      assert.equal(uses.length, 1);
      assert.equal(uses[0].name, WEATHER_TOOL.name);
      assert.deepEqual(uses[0].input, TOOL_ARGS);
      assert.equal(typeof uses[0].id, 'string');
      assert.ok(uses[0].id.length > 0);
      if (vendor === 'bedrock') assert.equal(uses[0].id, rec.reply.toolCallId);
      assert.deepEqual(upstreamTools(rec).map((d) => d.name), [WEATHER_TOOL.name]);
      checkUpstream(rec, { stream: false });
    });

    it('streaming tool use: finalMessage() has the tool_use block with TOOL_ARGS', async () => {
      const { client, [vendor]: mock } = fx.current;
      let seen;
      const [final, rec] = await withUpstreamRequest(mock, () => {
        const stream = client.messages.stream({ model, max_tokens: MAX_TOKENS, tools: [WEATHER_TOOL], messages: userMessage('Weather in Paris?') });
        seen = watch(stream);
        return stream.finalMessage();
      });
      assert.equal(final.stop_reason, 'tool_use');
      const uses = toolUses(final);
      assert.equal(uses.length, 1);
      assert.equal(uses[0].name, WEATHER_TOOL.name);
      assert.deepEqual(uses[0].input, TOOL_ARGS);
      if (vendor === 'bedrock') assert.equal(uses[0].id, rec.reply.toolCallId);
      assert.deepEqual(JSON.parse(seen.json.join('')), TOOL_ARGS, 'input_json deltas add up to the arguments');
      assertEventSequence(seen.types);
      assert.deepEqual(upstreamTools(rec).map((d) => d.name), [WEATHER_TOOL.name]);
      checkUpstream(rec, { stream: true });
    });
  });
}

describe('Anthropic SDK -> tahua -> in-process mock provider', () => {
  const fx = sharedFixture(startAll);
  const model = MODELS.mock.name;
  const MOCK_TEXT = /^Hello from the tahua mock model/;

  it('non-streaming: an Anthropic message with the mock\'s text and usage', async () => {
    const { client, gw } = fx.current;
    const res = await client.messages.create({ model, max_tokens: MAX_TOKENS, messages: userMessage('Hi mock') });
    assert.equal(res.type, 'message');
    assert.equal(res.role, 'assistant');
    assert.equal(res.model, model);
    assert.equal(res.content.length, 1);
    assert.equal(res.content[0].type, 'text');
    assert.match(res.content[0].text, MOCK_TEXT);
    assert.equal(res.stop_reason, 'end_turn');
    assert.ok(res.usage.input_tokens > 0);
    assert.ok(res.usage.output_tokens > 0);
    const [line] = await gw.waitForAccessLog((l) => l.path === '/v1/messages' && l.model === model && !l.stream);
    assert.equal(line.provider, 'local');
    assert.equal(line.status, 200);
    assert.equal(line.completion_tokens, res.usage.output_tokens);
  });

  it('streaming: text deltas add up to finalText(), in a well-formed event sequence', async () => {
    const { client } = fx.current;
    const stream = client.messages.stream({ model, max_tokens: MAX_TOKENS, messages: userMessage('Hi mock, stream') });
    const seen = watch(stream);
    const text = await stream.finalText();
    const final = await stream.finalMessage();
    assert.match(text, MOCK_TEXT);
    assert.equal(seen.text.join(''), text);
    assert.ok(seen.text.length >= 3, `streamed in pieces, got ${seen.text.length}`);
    assertEventSequence(seen.types);
    assert.equal(final.stop_reason, 'end_turn');
    assert.ok(final.usage.output_tokens > 0);
  });
});

describe('Anthropic SDK -> tahua: errors in Anthropic\'s shape', () => {
  const fx = sharedFixture(startAll);

  const assertAnthropicError = (err, status, type) => {
    assert.equal(err.status, status);
    assert.equal(err.error?.type, 'error', JSON.stringify(err.error));
    assert.equal(err.error.error?.type, type, JSON.stringify(err.error));
    assert.equal(typeof err.error.error.message, 'string');
    assert.ok(err.error.error.message.length > 0);
  };

  it('unknown model -> 404 not_found_error (NotFoundError), non-streaming and streaming, nothing sent upstream', async () => {
    const { client, anthropic, openai } = fx.current;
    const sent = anthropic.requests.length + openai.requests.length;
    await assert.rejects(
      client.messages.create({ model: 'no-such-model', max_tokens: MAX_TOKENS, messages: userMessage('hi') }),
      (err) => {
        assert.ok(err instanceof Anthropic.NotFoundError, `got ${err.constructor.name}: ${err.message}`);
        assertAnthropicError(err, 404, 'not_found_error');
        assert.match(err.error.error.message, /no-such-model/);
        return true;
      },
    );
    await assert.rejects(
      client.messages.stream({ model: 'no-such-model', max_tokens: MAX_TOKENS, messages: userMessage('hi') }).finalMessage(),
      (err) => {
        assert.ok(err instanceof Anthropic.NotFoundError, `got ${err.constructor.name}: ${err.message}`);
        assertAnthropicError(err, 404, 'not_found_error');
        return true;
      },
    );
    assert.equal(anthropic.requests.length + openai.requests.length, sent);
  });

  it('upstream 429 from the OpenAI provider -> RateLimitError with an Anthropic-shaped body', async () => {
    const { client, openai } = fx.current;
    openai.failNext({ status: 429 });
    await assert.rejects(
      client.messages.create({ model: MODELS.openai.name, max_tokens: MAX_TOKENS, messages: userMessage('hi') }),
      (err) => {
        assert.ok(err instanceof Anthropic.RateLimitError, `got ${err.constructor.name}: ${err.message}`);
        assertAnthropicError(err, 429, 'rate_limit_error');
        return true;
      },
    );
    assert.equal(openai.requests.at(-1).reply.status, 429, 'the upstream did answer 429');
  });

  it('upstream 429 before a stream starts -> RateLimitError from finalMessage()', async () => {
    const { client, openai } = fx.current;
    openai.failNext({ status: 429 });
    await assert.rejects(
      client.messages.stream({ model: MODELS.openai.name, max_tokens: MAX_TOKENS, messages: userMessage('hi') }).finalMessage(),
      (err) => {
        assert.ok(err instanceof Anthropic.RateLimitError, `got ${err.constructor.name}: ${err.message}`);
        assertAnthropicError(err, 429, 'rate_limit_error');
        return true;
      },
    );
  });

  it('upstream 429 from the anthropic provider (pass-through) -> RateLimitError with the vendor\'s error', async () => {
    const { client, anthropic } = fx.current;
    anthropic.failNext({ status: 429 });
    await assert.rejects(
      client.messages.create({ model: MODELS.anthropic.name, max_tokens: MAX_TOKENS, messages: userMessage('hi') }),
      (err) => {
        assert.ok(err instanceof Anthropic.RateLimitError, `got ${err.constructor.name}: ${err.message}`);
        assertAnthropicError(err, 429, 'rate_limit_error');
        return true;
      },
    );
  });

  it('the client recovers: the next request after an upstream error succeeds', async () => {
    const { client } = fx.current;
    const res = await client.messages.create({ model: MODELS.openai.name, max_tokens: MAX_TOKENS, messages: userMessage('again') });
    assert.equal(res.content[0].text, replyText(VENDOR_NAMES.openai, 'again'));
  });
});

describe('Anthropic SDK countTokens -> tahua /v1/messages/count_tokens', () => {
  const fx = sharedFixture(startAll);

  it('non-anthropic model: estimated locally, > 0 and growing with the content, nothing sent upstream', async () => {
    const { client, openai, gw } = fx.current;
    const sent = openai.requests.length;
    const model = MODELS.openai.name;
    const short = await client.messages.countTokens({ model, messages: userMessage('Hi there') });
    const long = await client.messages.countTokens({
      model,
      messages: userMessage('Hi there. '.repeat(40) + 'Please describe the weather in Paris, Lyon and Marseille in detail.'),
    });
    const withSystemAndTools = await client.messages.countTokens({
      model,
      system: 'You are a meticulous meteorologist who answers in three paragraphs.',
      tools: [WEATHER_TOOL],
      messages: userMessage('Hi there'),
    });
    assert.deepEqual(Object.keys(short), ['input_tokens']);
    assert.ok(Number.isInteger(short.input_tokens) && short.input_tokens > 0, JSON.stringify(short));
    assert.ok(long.input_tokens > short.input_tokens, `${long.input_tokens} > ${short.input_tokens}`);
    assert.ok(withSystemAndTools.input_tokens > short.input_tokens, `system + tools count: ${withSystemAndTools.input_tokens} > ${short.input_tokens}`);
    assert.equal(openai.requests.length, sent, 'answered without the upstream');
    const lines = await gw.waitForAccessLog((l) => l.path === '/v1/messages/count_tokens' && l.model === model, { count: 3 });
    assert.ok(lines.every((l) => l.status === 200));
  });

  it('unknown model -> NotFoundError in Anthropic\'s shape', async () => {
    const { client } = fx.current;
    await assert.rejects(client.messages.countTokens({ model: 'no-such-model', messages: userMessage('hi') }), (err) => {
      assert.ok(err instanceof Anthropic.NotFoundError, `got ${err.constructor.name}: ${err.message}`);
      assert.equal(err.error?.type, 'error');
      assert.equal(err.error.error?.type, 'not_found_error');
      return true;
    });
  });

  it('anthropic model: forwarded to the vendor\'s count_tokens with the upstream model and key', async () => {
    const { client, anthropic } = fx.current;
    const messages = userMessage('Count me, please');
    const [res, rec] = await withUpstreamRequest(anthropic, () =>
      client.messages.countTokens({ model: MODELS.anthropic.name, messages }));
    assert.deepEqual(res, { input_tokens: ANTHROPIC_COUNT_TOKENS });
    assert.equal(rec.path, '/v1/messages/count_tokens');
    assert.equal(rec.reply.kind, 'count_tokens');
    assert.deepEqual(rec.body, { model: MODELS.anthropic.upstream_model, messages });
    assert.equal(rec.headers['x-api-key'], ANTHROPIC_KEY);
    assert.ok(rec.headers['anthropic-version']);
    assertClientKeyNotForwarded(rec);
  });
});

describe('Anthropic SDK -> tahua: upstream SSE split across TCP writes (fragmented events)', () => {
  const fx = sharedFixture(() => startAll({ fragmentSse: true }));

  for (const vendor of ['anthropic', 'openai', 'gemini']) {
    it(`${vendor}: streamed text and streamed tool use survive fragmented upstream events`, async () => {
      const { client, [vendor]: mock } = fx.current;
      const model = MODELS[vendor].name;
      const [text] = await withUpstreamRequest(mock, () =>
        client.messages.stream({ model, max_tokens: MAX_TOKENS, messages: userMessage('fragments') }).finalText());
      assert.equal(text, replyText(VENDOR_NAMES[vendor], 'fragments'));
      const [final] = await withUpstreamRequest(mock, () =>
        client.messages.stream({ model, max_tokens: MAX_TOKENS, tools: [WEATHER_TOOL], messages: userMessage('fragments') }).finalMessage());
      assert.deepEqual(toolUses(final).map((b) => b.input), [TOOL_ARGS]);
      assert.equal(final.stop_reason, 'tool_use');
    });
  }
});
