// The official `openai` SDK's Responses API (client.responses.create / .stream) against
// tahua's /v1/responses: passed through untouched to an `openai` provider's {base_url}/responses,
// and translated (Responses -> chat -> vendor, and back into a `response` object or the
// `response.*` event sequence) for anthropic, gemini and the in-process mock provider.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { sharedFixture } from './lib/fixtures.mjs';
import { gatewayConfig, startTahua } from './lib/tahua.mjs';
import {
  RESPONSES_WEATHER_TOOL,
  TOOL_ARGS,
  TOOL_ARGS_JSON,
  TOOL_ARGS_PIECES,
  USAGE,
  VENDOR_NAMES,
  replyPieces,
  replyText,
  startAnthropicMock,
  startGeminiMock,
  startOpenAIChatMock,
} from './lib/vendor_mocks.mjs';

const TIMEOUTS = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };
const CLIENT_KEY = 'sk-client';
const ANTHROPIC_KEY = 'sk-ant-test';
const OPENAI_KEY = 'sk-test';
const GEMINI_KEY = 'gm';
const DEFAULT_MAX_TOKENS = 512;

const MODELS = {
  openai: { name: 'gpt-responses', provider: 'oai', upstream_model: 'gpt-upstream-resp' },
  anthropic: { name: 'claude-via-responses', provider: 'anth', upstream_model: 'claude-upstream-resp' },
  gemini: { name: 'gemini-via-responses', provider: 'gem', upstream_model: 'gemini-upstream-resp' },
  mock: { name: 'local-mock', provider: 'local' },
};

const WEATHER_TOOL = RESPONSES_WEATHER_TOOL;

const TEXT_EVENTS_HEAD = ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added'];
const TEXT_EVENTS_TAIL = ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed'];

async function startAll({ fragmentSse = false } = {}) {
  const mocks = [];
  try {
    const anthropic = await startAnthropicMock({ fragmentSse });
    mocks.push(anthropic);
    const openai = await startOpenAIChatMock({ fragmentSse });
    mocks.push(openai);
    const gemini = await startGeminiMock({ fragmentSse });
    mocks.push(gemini);
    const config = gatewayConfig({
      providers: [
        { name: 'anth', type: 'anthropic', base_url: anthropic.baseUrl(), api_key: ANTHROPIC_KEY, default_max_tokens: DEFAULT_MAX_TOKENS, timeouts: TIMEOUTS },
        // Lists `responses`: /v1/responses passes through to the mock's own.
        { name: 'oai', type: 'openai', base_url: openai.baseUrl(), api_key: OPENAI_KEY, timeouts: TIMEOUTS, apis: ['chat', 'responses'] },
        { name: 'gem', type: 'gemini', base_url: gemini.baseUrl(), api_key: GEMINI_KEY, timeouts: TIMEOUTS },
        { name: 'local', type: 'mock', timeouts: TIMEOUTS },
      ],
      models: Object.values(MODELS),
    });
    const gw = await startTahua({ config });
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: CLIENT_KEY, maxRetries: 0, timeout: 10_000 });
    const close = async () => {
      await gw.kill();
      await Promise.all(mocks.map((m) => m.close()));
    };
    return { gw, client, anthropic, openai, gemini, close };
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

function assertClientKeyNotForwarded(rec) {
  for (let i = 0; i < rec.rawHeaders.length; i += 2) {
    assert.ok(!String(rec.rawHeaders[i + 1]).includes(CLIENT_KEY), `client key forwarded in ${rec.rawHeaders[i]}`);
  }
  assert.ok(!rec.rawBody.toString('utf8').includes(CLIENT_KEY), 'client key forwarded in the body');
}

async function accessLineOf(gw, rec) {
  const id = rec.headers['x-request-id'];
  assert.equal(typeof id, 'string', 'the gateway sends x-request-id upstream');
  const [line] = await gw.waitForAccessLog((l) => l.request_id === id);
  return line;
}

/** Consumes a `stream: true` create() result: all events, in order. */
async function collect(stream) {
  const events = [];
  for await (const event of stream) events.push(event);
  return events;
}

/** sequence_number is 0, 1, 2, ... over the whole stream. */
function assertSequenceNumbers(events) {
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i), 'sequence_number counts from 0 without gaps');
}

/** The exact event sequence of a streamed text answer with `n` deltas, and its consistency. */
function assertTextStream(events, expectedText) {
  const types = events.map((e) => e.type);
  const deltas = events.filter((e) => e.type === 'response.output_text.delta');
  assert.ok(deltas.length >= 3, `several text deltas, got ${deltas.length}`);
  assert.deepEqual(types, [...TEXT_EVENTS_HEAD, ...deltas.map(() => 'response.output_text.delta'), ...TEXT_EVENTS_TAIL]);
  assertSequenceNumbers(events);
  const text = deltas.map((d) => d.delta).join('');
  if (expectedText instanceof RegExp) assert.match(text, expectedText);
  else assert.equal(text, expectedText);

  const byType = Object.fromEntries(events.map((e) => [e.type, e]));
  const created = byType['response.created'].response;
  assert.equal(created.object, 'response');
  assert.equal(created.status, 'in_progress');
  const itemId = byType['response.output_item.added'].item.id;
  assert.equal(byType['response.output_item.added'].item.type, 'message');
  for (const e of [...deltas, byType['response.output_text.done'], byType['response.content_part.added'], byType['response.content_part.done']]) {
    assert.equal(e.item_id, itemId, `${e.type} names the message item`);
    assert.equal(e.output_index, 0);
    assert.equal(e.content_index, 0);
  }
  assert.equal(byType['response.output_text.done'].text, text);
  assert.deepEqual(byType['response.content_part.done'].part.text, text);
  const done = byType['response.output_item.done'].item;
  assert.equal(done.id, itemId);
  assert.equal(done.status, 'completed');
  assert.equal(done.content[0].text, text);
  const completed = byType['response.completed'].response;
  assert.equal(completed.id, created.id, 'one response id through the stream');
  assert.equal(completed.status, 'completed');
  assert.equal(completed.output.length, 1);
  assert.equal(completed.output[0].content[0].text, text);
  assert.ok(completed.usage.output_tokens > 0);
  assert.equal(completed.usage.total_tokens, completed.usage.input_tokens + completed.usage.output_tokens);
  return { text, completed };
}

/** A function_call output item carrying the scripted call. */
function assertFunctionCall(item, { callId } = {}) {
  assert.equal(item.type, 'function_call', JSON.stringify(item));
  assert.equal(item.name, WEATHER_TOOL.name);
  assert.deepEqual(JSON.parse(item.arguments), TOOL_ARGS);
  assert.equal(typeof item.call_id, 'string');
  assert.ok(item.call_id.length > 0);
  if (callId) assert.equal(item.call_id, callId);
}

describe('OpenAI SDK responses -> tahua -> openai provider (pass-through)', () => {
  const fx = sharedFixture(startAll);
  const model = MODELS.openai.name;

  it('non-streaming text: the body reaches {base_url}/responses unchanged but for the model', async () => {
    const { client, openai, gw } = fx.current;
    const body = { model, input: 'Hello Responses', instructions: 'Be brief.', temperature: 0.5, max_output_tokens: 100, metadata: { case: 'pass' } };
    const [res, rec] = await withUpstreamRequest(openai, () => client.responses.create(body));
    assert.equal(res.object, 'response');
    assert.match(res.id, /^resp_mock/, 'the vendor\'s response object is passed through');
    assert.equal(res.output_text, replyText(VENDOR_NAMES.openai, 'Hello Responses'));
    assert.equal(res.output[0].id, rec.reply.itemId);
    assert.deepEqual(res.usage, {
      input_tokens: USAGE.input,
      input_tokens_details: { cached_tokens: USAGE.cached },
      output_tokens: USAGE.output,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: USAGE.total,
    });

    assert.equal(rec.method, 'POST');
    assert.equal(rec.path, '/v1/responses');
    assert.deepEqual(rec.body, { ...body, model: MODELS.openai.upstream_model });
    assert.equal(rec.headers.authorization, `Bearer ${OPENAI_KEY}`);
    assertClientKeyNotForwarded(rec);

    const line = await accessLineOf(gw, rec);
    assert.equal(line.path, '/v1/responses');
    assert.equal(line.model, model);
    assert.equal(line.provider, 'oai');
    assert.equal(line.status, 200);
    assert.equal(line.stream, false);
    assert.equal(line.prompt_tokens, USAGE.input);
    assert.equal(line.completion_tokens, USAGE.output);
    assert.equal(line.total_tokens, USAGE.total);
    assert.equal(line.cached_tokens, USAGE.cached);
  });

  it('non-streaming function call: call_id, name and arguments of the vendor\'s item', async () => {
    const { client, openai } = fx.current;
    const body = { model, input: 'Weather in Paris?', tools: [WEATHER_TOOL], tool_choice: 'auto' };
    const [res, rec] = await withUpstreamRequest(openai, () => client.responses.create(body));
    assert.equal(res.output.length, 1);
    assertFunctionCall(res.output[0], { callId: rec.reply.toolCallId });
    assert.equal(res.output[0].arguments, TOOL_ARGS_JSON);
    assert.equal(res.output_text, '');
    assert.deepEqual(rec.body, { ...body, model: MODELS.openai.upstream_model });
  });

  it('streaming text (create stream:true): the vendor\'s exact event sequence, usage in the access log', async () => {
    const { client, openai, gw } = fx.current;
    const body = { model, input: 'Stream Responses', stream: true };
    const [events, rec] = await withUpstreamRequest(openai, async () => collect(await client.responses.create(body)));
    const { completed } = assertTextStream(events, replyText(VENDOR_NAMES.openai, 'Stream Responses'));
    assert.deepEqual(events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta), rec.reply.pieces);
    assert.equal(completed.usage.input_tokens_details.cached_tokens, USAGE.cached);
    assert.deepEqual(rec.body, { ...body, model: MODELS.openai.upstream_model });

    const line = await accessLineOf(gw, rec);
    assert.equal(line.stream, true);
    assert.equal(line.status, 200);
    assert.equal(line.prompt_tokens, USAGE.input);
    assert.equal(line.completion_tokens, USAGE.output);
    assert.equal(line.cached_tokens, USAGE.cached);
  });

  it('streaming function call (responses.stream): argument deltas and finalResponse()', async () => {
    const { client, openai } = fx.current;
    const argDeltas = [];
    const [final, rec] = await withUpstreamRequest(openai, () => {
      const stream = client.responses.stream({ model, input: 'Weather in Paris?', tools: [WEATHER_TOOL] });
      stream.on('response.function_call_arguments.delta', (e) => argDeltas.push(e.delta));
      return stream.finalResponse();
    });
    assert.deepEqual(argDeltas, TOOL_ARGS_PIECES);
    assert.equal(final.status, 'completed');
    assert.equal(final.output.length, 1);
    assertFunctionCall(final.output[0], { callId: rec.reply.toolCallId });
    assert.equal(rec.body.stream, true);
    assert.deepEqual(rec.body.tools, [WEATHER_TOOL]);
  });

  it('previous_response_id is passed through to an OpenAI model', async () => {
    const { client, openai } = fx.current;
    const [res, rec] = await withUpstreamRequest(openai, () =>
      client.responses.create({ model, input: 'And then?', previous_response_id: 'resp_previous123' }));
    assert.equal(rec.body.previous_response_id, 'resp_previous123');
    assert.equal(res.previous_response_id, 'resp_previous123');
  });
});

for (const vendor of ['anthropic', 'gemini']) {
  describe(`OpenAI SDK responses -> tahua -> ${vendor} provider (translated)`, () => {
    const fx = sharedFixture(startAll);
    const model = MODELS[vendor].name;
    // The vendors' usage as a Responses `usage`: input includes the cached tokens (Anthropic's
    // input_tokens does not, so its cache reads are added).
    const expectedInput = vendor === 'anthropic' ? USAGE.input + USAGE.cached : USAGE.input;

    const checkUpstream = (rec, { stream }) => {
      assert.equal(rec.model, MODELS[vendor].upstream_model);
      assert.equal(rec.stream, stream);
      if (vendor === 'anthropic') {
        assert.equal(rec.path, '/v1/messages');
        assert.equal(rec.headers['x-api-key'], ANTHROPIC_KEY);
      } else {
        assert.equal(rec.headers['x-goog-api-key'], GEMINI_KEY);
      }
      assertClientKeyNotForwarded(rec);
    };
    const upstreamToolNames = (rec) =>
      vendor === 'anthropic'
        ? rec.body.tools.map((x) => x.name)
        : rec.body.tools.flatMap((x) => x.functionDeclarations ?? x.function_declarations ?? []).map((d) => d.name);

    it('non-streaming text: a `response` object with output_text and usage', async () => {
      const { client, [vendor]: mock, gw } = fx.current;
      const prompt = `Hello ${vendor} via Responses`;
      const [res, rec] = await withUpstreamRequest(mock, () => client.responses.create({ model, input: prompt, instructions: 'Be brief.' }));
      assert.equal(res.object, 'response');
      assert.match(res.id, /^resp_/);
      assert.equal(res.status, 'completed');
      assert.equal(res.model, model);
      assert.equal(res.output.length, 1);
      assert.equal(res.output[0].type, 'message');
      assert.equal(res.output[0].role, 'assistant');
      assert.equal(res.output[0].content[0].type, 'output_text');
      assert.equal(res.output_text, replyText(VENDOR_NAMES[vendor], prompt));
      assert.equal(res.usage.input_tokens, expectedInput);
      assert.equal(res.usage.input_tokens_details.cached_tokens, USAGE.cached);
      assert.equal(res.usage.output_tokens, USAGE.output);
      assert.equal(res.usage.total_tokens, expectedInput + USAGE.output);
      checkUpstream(rec, { stream: false });
      if (vendor === 'anthropic') {
        assert.equal(rec.body.max_tokens, DEFAULT_MAX_TOKENS, 'the provider\'s default_max_tokens fills in max_tokens');
        const system = typeof rec.body.system === 'string' ? rec.body.system : rec.body.system?.map((b) => b.text).join('');
        assert.equal(system, 'Be brief.', 'instructions become the system prompt');
      } else {
        assert.deepEqual(rec.body.systemInstruction?.parts?.map((p) => p.text), ['Be brief.'], 'instructions become the systemInstruction');
      }

      const line = await accessLineOf(gw, rec);
      assert.equal(line.path, '/v1/responses');
      assert.equal(line.model, model);
      assert.equal(line.prompt_tokens, expectedInput);
      assert.equal(line.completion_tokens, USAGE.output);
      assert.equal(line.cached_tokens, USAGE.cached);
    });

    it('non-streaming function call: a function_call item with call_id, name and TOOL_ARGS', async () => {
      const { client, [vendor]: mock } = fx.current;
      const [res, rec] = await withUpstreamRequest(mock, () =>
        client.responses.create({ model, input: 'Weather in Paris?', tools: [WEATHER_TOOL], max_output_tokens: 100 }));
      assert.equal(res.status, 'completed');
      assert.equal(res.output.length, 1);
      assertFunctionCall(res.output[0], vendor === 'anthropic' ? { callId: rec.reply.toolCallId } : {});
      assert.equal(res.output_text, '');
      assert.deepEqual(upstreamToolNames(rec), [WEATHER_TOOL.name]);
      if (vendor === 'anthropic') {
        assert.equal(rec.body.max_tokens, 100, 'max_output_tokens becomes max_tokens');
        assert.deepEqual(rec.body.tools[0].input_schema, WEATHER_TOOL.parameters);
      }
      checkUpstream(rec, { stream: false });
    });

    it('streaming text (create stream:true): the full response.* event sequence', async () => {
      const { client, [vendor]: mock } = fx.current;
      const prompt = `Stream ${vendor} via Responses`;
      const [events, rec] = await withUpstreamRequest(mock, async () => collect(await client.responses.create({ model, input: prompt, stream: true })));
      const { completed } = assertTextStream(events, replyText(VENDOR_NAMES[vendor], prompt));
      assert.deepEqual(events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta), replyPieces(VENDOR_NAMES[vendor], prompt));
      assert.equal(completed.model, model);
      assert.equal(completed.usage.output_tokens, USAGE.output);
      assert.equal(completed.usage.input_tokens, expectedInput);
      checkUpstream(rec, { stream: true });
    });

    it('streaming text (responses.stream): text delta events and finalResponse().output_text', async () => {
      const { client, [vendor]: mock } = fx.current;
      const prompt = `Helper stream ${vendor}`;
      const deltas = [];
      const [final] = await withUpstreamRequest(mock, () => {
        const stream = client.responses.stream({ model, input: prompt });
        stream.on('response.output_text.delta', (e) => deltas.push(e.delta));
        return stream.finalResponse();
      });
      assert.equal(final.output_text, replyText(VENDOR_NAMES[vendor], prompt));
      assert.equal(deltas.join(''), final.output_text);
      assert.equal(final.status, 'completed');
    });

    it('streaming function call (responses.stream): argument deltas, .done event and finalResponse()', async () => {
      const { client, [vendor]: mock } = fx.current;
      const events = [];
      const [final, rec] = await withUpstreamRequest(mock, () => {
        const stream = client.responses.stream({ model, input: 'Weather in Paris?', tools: [WEATHER_TOOL] });
        stream.on('event', (e) => events.push(e));
        return stream.finalResponse();
      });
      assertSequenceNumbers(events);
      const types = events.map((e) => e.type);
      assert.deepEqual(types.slice(0, 3), ['response.created', 'response.in_progress', 'response.output_item.added']);
      assert.deepEqual(types.slice(-3), ['response.function_call_arguments.done', 'response.output_item.done', 'response.completed']);
      const added = events[2].item;
      assert.equal(added.type, 'function_call');
      assert.equal(added.name, WEATHER_TOOL.name);
      const argDeltas = events.filter((e) => e.type === 'response.function_call_arguments.delta');
      assert.ok(argDeltas.length >= 1);
      assert.ok(argDeltas.every((e) => e.item_id === added.id && e.output_index === 0));
      const doneEvent = events.find((e) => e.type === 'response.function_call_arguments.done');
      assert.deepEqual(JSON.parse(argDeltas.map((e) => e.delta).join('')), TOOL_ARGS);
      assert.deepEqual(JSON.parse(doneEvent.arguments), TOOL_ARGS);

      assert.equal(final.status, 'completed');
      assert.equal(final.output.length, 1);
      assertFunctionCall(final.output[0], vendor === 'anthropic' ? { callId: rec.reply.toolCallId } : {});
      assert.equal(final.output[0].call_id, added.call_id);
      checkUpstream(rec, { stream: true });
    });
  });
}

describe('OpenAI SDK responses -> tahua -> in-process mock provider', () => {
  const fx = sharedFixture(startAll);
  const model = MODELS.mock.name;
  const MOCK_TEXT = /^Hello from the tahua mock model/;

  it('non-streaming: output_text from the mock model, usage', async () => {
    const { client } = fx.current;
    const res = await client.responses.create({ model, input: 'Hi mock' });
    assert.equal(res.object, 'response');
    assert.equal(res.status, 'completed');
    assert.equal(res.model, model);
    assert.match(res.output_text, MOCK_TEXT);
    assert.ok(res.usage.input_tokens > 0);
    assert.ok(res.usage.output_tokens > 0);
    assert.equal(res.usage.total_tokens, res.usage.input_tokens + res.usage.output_tokens);
  });

  it('streaming (create stream:true and responses.stream)', async () => {
    const { client } = fx.current;
    const events = await collect(await client.responses.create({ model, input: 'Hi mock, stream', stream: true }));
    const { text } = assertTextStream(events, MOCK_TEXT);
    const final = await client.responses.stream({ model, input: 'Hi mock, stream' }).finalResponse();
    assert.equal(final.output_text, text);
  });
});

describe('OpenAI SDK responses -> tahua: multi-turn function calling to anthropic', () => {
  const fx = sharedFixture(startAll);

  it('function_call + function_call_output items reach the vendor as tool_use / tool_result', async () => {
    const { client, anthropic } = fx.current;
    const question = 'What is the weather in Paris?';
    const callId = 'call_MultiTurn123';
    const input = [
      { role: 'user', content: question },
      { type: 'function_call', call_id: callId, name: WEATHER_TOOL.name, arguments: TOOL_ARGS_JSON },
      { type: 'function_call_output', call_id: callId, output: '18 degrees and sunny' },
    ];
    const [res, rec] = await withUpstreamRequest(anthropic, () =>
      client.responses.create({ model: MODELS.anthropic.name, input, tools: [WEATHER_TOOL] }));
    // The conversation ends with a tool result: the mock answers with text.
    assert.equal(res.output_text, replyText(VENDOR_NAMES.anthropic, question));

    const msgs = rec.body.messages;
    assert.equal(msgs.length, 3, JSON.stringify(msgs));
    assert.equal(msgs[0].role, 'user');
    const firstText = typeof msgs[0].content === 'string' ? msgs[0].content : msgs[0].content.map((b) => b.text).join('');
    assert.equal(firstText, question);
    assert.equal(msgs[1].role, 'assistant');
    const uses = msgs[1].content.filter((b) => b.type === 'tool_use');
    assert.deepEqual(uses, [{ type: 'tool_use', id: callId, name: WEATHER_TOOL.name, input: TOOL_ARGS }]);
    assert.equal(msgs[2].role, 'user');
    const results = msgs[2].content.filter((b) => b.type === 'tool_result');
    assert.equal(results.length, 1, JSON.stringify(msgs[2]));
    assert.equal(results[0].tool_use_id, callId);
    const resultText = typeof results[0].content === 'string' ? results[0].content : results[0].content.map((b) => b.text).join('');
    assert.equal(resultText, '18 degrees and sunny');
  });
});

describe('OpenAI SDK responses -> tahua -> anthropic: request mapping', () => {
  const fx = sharedFixture(startAll);
  const model = MODELS.anthropic.name;
  const textOf = (content) => (typeof content === 'string' ? content : content.map((b) => b.text).join('\n'));

  it('developer message -> system, tool_choice {type:function} -> {type:tool}, temperature kept', async () => {
    const { client, anthropic } = fx.current;
    const [res, rec] = await withUpstreamRequest(anthropic, () =>
      client.responses.create({
        model,
        input: [
          { role: 'developer', content: 'Answer in French.' },
          { role: 'user', content: 'Weather?' },
        ],
        tools: [WEATHER_TOOL],
        tool_choice: { type: 'function', name: WEATHER_TOOL.name },
        temperature: 0.3,
      }));
    assertFunctionCall(res.output[0], { callId: rec.reply.toolCallId });
    assert.equal(textOf(rec.body.system), 'Answer in French.');
    assert.deepEqual(rec.body.messages.map((m) => [m.role, textOf(m.content)]), [['user', 'Weather?']]);
    assert.deepEqual(rec.body.tool_choice, { type: 'tool', name: WEATHER_TOOL.name });
    assert.equal(rec.body.temperature, 0.3);
  });

  it('a prior assistant turn (output_text) is kept as an assistant message', async () => {
    const { client, anthropic } = fx.current;
    const [res, rec] = await withUpstreamRequest(anthropic, () =>
      client.responses.create({
        model,
        input: [
          { role: 'user', content: 'first question' },
          { role: 'assistant', content: [{ type: 'output_text', text: 'first answer' }] },
          { role: 'user', content: 'second question' },
        ],
      }));
    assert.equal(res.output_text, replyText(VENDOR_NAMES.anthropic, 'second question'));
    assert.deepEqual(rec.body.messages.map((m) => [m.role, textOf(m.content)]), [
      ['user', 'first question'],
      ['assistant', 'first answer'],
      ['user', 'second question'],
    ]);
  });

  it('several input_text parts keep their boundary (not glued into one word)', async () => {
    const { client, anthropic } = fx.current;
    const [, rec] = await withUpstreamRequest(anthropic, () =>
      client.responses.create({
        model,
        input: [{ role: 'user', content: [{ type: 'input_text', text: 'part A' }, { type: 'input_text', text: 'part B' }] }],
      }));
    const [msg] = rec.body.messages;
    // Either two text blocks, or one text with a separator between the parts.
    assert.match(textOf(msg.content), /^part A\s+part B$/, `upstream content: ${JSON.stringify(msg.content)}`);
  });

  it('an input_image with a data: URL becomes an Anthropic base64 image block', async () => {
    const { client, anthropic } = fx.current;
    const data = 'iVBORw0KGgo=';
    const [, rec] = await withUpstreamRequest(anthropic, () =>
      client.responses.create({
        model,
        input: [{ role: 'user', content: [{ type: 'input_image', image_url: `data:image/png;base64,${data}`, detail: 'auto' }, { type: 'input_text', text: 'see' }] }],
      }));
    assert.deepEqual(rec.body.messages[0].content, [
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data } },
      { type: 'text', text: 'see' },
    ]);
  });

  it('a built-in (non-function) tool -> 400 for a non-OpenAI model, nothing sent upstream', async () => {
    const { client, anthropic } = fx.current;
    const sent = anthropic.requests.length;
    await assert.rejects(client.responses.create({ model, input: 'x', tools: [{ type: 'web_search_preview' }] }), (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `got ${err.constructor.name}: ${err.message}`);
      assert.match(err.message, /tools\[0\]/);
      return true;
    });
    assert.equal(anthropic.requests.length, sent);
  });
});

describe('OpenAI SDK responses -> tahua: stateful parameters and errors', () => {
  const fx = sharedFixture(startAll);

  for (const vendor of ['anthropic', 'gemini', 'mock']) {
    it(`previous_response_id to a ${vendor} model -> 400 naming the parameter, nothing sent upstream`, async () => {
      const { client, anthropic, gemini, openai } = fx.current;
      const sent = anthropic.requests.length + gemini.requests.length + openai.requests.length;
      for (const stream of [false, true]) {
        await assert.rejects(
          client.responses.create({ model: MODELS[vendor].name, input: 'Continue', previous_response_id: 'resp_abc123', ...(stream ? { stream } : {}) }),
          (err) => {
            assert.ok(err instanceof OpenAI.BadRequestError, `got ${err.constructor.name}: ${err.message}`);
            assert.equal(err.status, 400);
            assert.match(err.message, /previous_response_id/);
            assert.equal(err.type, 'invalid_request_error');
            return true;
          },
        );
      }
      assert.equal(anthropic.requests.length + gemini.requests.length + openai.requests.length, sent);
    });
  }

  it('unknown model -> 404 NotFoundError', async () => {
    const { client } = fx.current;
    await assert.rejects(client.responses.create({ model: 'no-such-model', input: 'hi' }), (err) => {
      assert.ok(err instanceof OpenAI.NotFoundError, `got ${err.constructor.name}: ${err.message}`);
      assert.match(err.message, /no-such-model/);
      return true;
    });
  });

  it('upstream 429 from the openai provider (pass-through) -> RateLimitError with OpenAI\'s error body', async () => {
    const { client, openai } = fx.current;
    openai.failNext({ status: 429 });
    await assert.rejects(client.responses.create({ model: MODELS.openai.name, input: 'hi' }), (err) => {
      assert.ok(err instanceof OpenAI.RateLimitError, `got ${err.constructor.name}: ${err.message}`);
      assert.equal(err.code, 'rate_limit_exceeded');
      assert.match(err.message, /Rate limit reached/);
      return true;
    });
  });

  it('upstream 429 from a translated provider -> RateLimitError', async () => {
    const { client, anthropic } = fx.current;
    anthropic.failNext({ status: 429 });
    await assert.rejects(client.responses.create({ model: MODELS.anthropic.name, input: 'hi' }), (err) => {
      assert.ok(err instanceof OpenAI.RateLimitError, `got ${err.constructor.name}: ${err.message}`);
      assert.equal(err.status, 429);
      assert.equal(typeof err.error?.message, 'string', `OpenAI error shape: ${JSON.stringify(err.error)}`);
      return true;
    });
    assert.equal(anthropic.requests.at(-1).reply.status, 429);
  });
});

describe('OpenAI SDK responses -> tahua: upstream SSE split across TCP writes (fragmented events)', () => {
  const fx = sharedFixture(() => startAll({ fragmentSse: true }));

  for (const vendor of ['openai', 'anthropic', 'gemini']) {
    it(`${vendor}: streamed text and streamed function call survive fragmented upstream events`, async () => {
      const { client, [vendor]: mock } = fx.current;
      const model = MODELS[vendor].name;
      const [events] = await withUpstreamRequest(mock, async () => collect(await client.responses.create({ model, input: 'fragments', stream: true })));
      assertTextStream(events, replyText(VENDOR_NAMES[vendor], 'fragments'));
      const [final] = await withUpstreamRequest(mock, () =>
        client.responses.stream({ model, input: 'fragments', tools: [WEATHER_TOOL] }).finalResponse());
      assert.equal(final.output.length, 1);
      assertFunctionCall(final.output[0]);
    });
  }
});
