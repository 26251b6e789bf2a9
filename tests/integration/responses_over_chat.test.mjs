// The Responses API in front of an OpenAI-compatible server that serves only chat
// completions (Ollama, llama.cpp, DeepSeek, Groq, older vLLM): an `openai` provider whose
// `apis` list lacks `responses` (the default) gets /v1/responses translated to
// /v1/chat/completions, and tahua keeps the state. The mock answers 404 to
// /v1/responses, so any pass-through would fail. Driven by the official SDK.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { sharedFixture } from './lib/fixtures.mjs';
import { gatewayConfig, startTahua } from './lib/tahua.mjs';
import { request } from './lib/http.mjs';
import { RESPONSES_WEATHER_TOOL, TOOL_ARGS, USAGE, VENDOR_NAMES, replyPieces, replyText, startOpenAIChatMock } from './lib/vendor_mocks.mjs';

const TIMEOUTS = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };
const MODEL = 'llama-chat-only';
const NO_USAGE_MODEL = 'llama-no-stream-usage';
const EMBED_ONLY_MODEL = 'embedder';
const CHAT_ONLY_LISTED = 'chat-listed';
const OPENAI = VENDOR_NAMES.openai;

async function startAll() {
  const upstream = await startOpenAIChatMock({ chatOnly: true });
  try {
    const base = { type: 'openai', base_url: upstream.baseUrl(), api_key: 'sk-upstream', timeouts: TIMEOUTS };
    const config = gatewayConfig({
      providers: [
        { name: 'ollama', ...base },  // the default list: no `responses`
        { name: 'old', ...base, stream_usage: false },
        { name: 'tei', ...base, apis: ['embeddings'] },
        { name: 'chat', ...base, apis: ['chat'] },
      ],
      models: [
        { name: MODEL, provider: 'ollama', upstream_model: 'llama3.1:8b' },
        { name: NO_USAGE_MODEL, provider: 'old', upstream_model: 'llama3.1:8b' },
        { name: EMBED_ONLY_MODEL, provider: 'tei' },
        { name: CHAT_ONLY_LISTED, provider: 'chat' },
      ],
    });
    const gw = await startTahua({ config });
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: 'sk-client', maxRetries: 0, timeout: 10_000 });
    return { gw, client, upstream, close: async () => { await gw.kill(); await upstream.close(); } };
  } catch (err) {
    await upstream.close();
    throw err;
  }
}

/** Runs `fn`; returns [its result, the requests the upstream received meanwhile]. */
async function withUpstream(upstream, fn) {
  const before = upstream.requests.length;
  const result = await fn();
  return [result, upstream.requests.slice(before)];
}

/** The one upstream request, which must be a chat completion. */
function oneChatRequest(recs) {
  assert.equal(recs.length, 1, `one upstream request, got ${recs.map((r) => r.path).join(', ')}`);
  assert.equal(recs[0].path, '/v1/chat/completions');
  assert.equal(recs[0].reply.kind === 'error', false, `the upstream answered ${JSON.stringify(recs[0].reply)}`);
  return recs[0];
}

async function collect(stream) {
  const events = [];
  for await (const e of stream) events.push(e);
  return events;
}

/** Asserts a 400 naming `param`, with nothing sent upstream. */
async function assertRefused(fx, body, param, pattern) {
  const { client, upstream } = fx.current;
  const sent = upstream.requests.length;
  await assert.rejects(client.responses.create(body), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `got ${err.constructor.name}: ${err.message}`);
    assert.equal(err.type, 'invalid_request_error');
    assert.equal(err.param, param);
    assert.match(err.message, pattern);
    return true;
  });
  assert.equal(upstream.requests.length, sent, 'nothing reached the upstream');
}

describe('Responses API -> tahua -> a chat-completions-only server', () => {
  const fx = sharedFixture(startAll);

  it('a plain input: translated to /v1/chat/completions, answered as a response object', async () => {
    const { client, upstream } = fx.current;
    const [res, recs] = await withUpstream(upstream, () =>
      client.responses.create({ model: MODEL, input: 'Hi there', instructions: 'Be brief.', max_output_tokens: 50, temperature: 0.3 }));
    const rec = oneChatRequest(recs);
    assert.equal(rec.body.model, 'llama3.1:8b');
    assert.deepEqual(rec.body.messages, [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi there' }]);
    assert.equal(rec.body.max_tokens, 50);
    assert.equal(rec.body.temperature, 0.3);
    assert.equal(rec.headers.authorization, 'Bearer sk-upstream');
    assert.equal(res.object, 'response');
    assert.match(res.id, /^resp_[A-Za-z0-9]{32}$/, 'an id of tahua\'s own');
    assert.equal(res.status, 'completed');
    assert.equal(res.model, MODEL);
    assert.equal(res.output_text, replyText(OPENAI, 'Hi there'));
    assert.equal(res.instructions, 'Be brief.');
    assert.deepEqual(
      [res.usage.input_tokens, res.usage.output_tokens, res.usage.total_tokens, res.usage.input_tokens_details.cached_tokens],
      [USAGE.input, USAGE.output, USAGE.total, USAGE.cached]);
  });

  it('previous_response_id continues the conversation from tahua\'s stored responses', async () => {
    const { client, upstream, gw } = fx.current;
    const r1 = await client.responses.create({ model: MODEL, input: 'My name is Ada' });
    const [r2, recs] = await withUpstream(upstream, () =>
      client.responses.create({ model: MODEL, input: 'What is my name?', previous_response_id: r1.id }));
    const rec = oneChatRequest(recs);
    assert.deepEqual(rec.body.messages, [
      { role: 'user', content: 'My name is Ada' },
      { role: 'assistant', content: replyText(OPENAI, 'My name is Ada') },
      { role: 'user', content: 'What is my name?' },
    ]);
    assert.equal(r2.previous_response_id, r1.id);
    assert.equal(r2.output_text, replyText(OPENAI, 'What is my name?'));
    // Both are served from tahua's store.
    const got = await request(gw.url, `/v1/responses/${r2.id}`);
    assert.equal(got.status, 200, got.text);
    assert.equal(got.json.previous_response_id, r1.id);
    assert.equal(got.json.output[0].content[0].text, r2.output_text);
    const items = await client.responses.inputItems.list(r2.id);
    assert.deepEqual(items.data.map((i) => i.content[0].text), ['What is my name?']);
  });

  it('stream: true: the Responses events in order, response.completed with usage; the streamed answer is stored', async () => {
    const { client, upstream } = fx.current;
    const [events, recs] = await withUpstream(upstream, async () =>
      collect(await client.responses.create({ model: MODEL, input: 'Stream it', stream: true })));
    const rec = oneChatRequest(recs);
    assert.equal(rec.body.stream, true);
    assert.deepEqual(rec.body.stream_options, { include_usage: true }, 'usage asked for, for metering');
    const pieces = replyPieces(OPENAI, 'Stream it');
    assert.deepEqual(events.map((e) => e.type), [
      'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
      ...pieces.map(() => 'response.output_text.delta'),
      'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed',
    ]);
    assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
    assert.deepEqual(events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta), pieces);
    const completed = events.at(-1).response;
    assert.equal(completed.id, events[0].response.id);
    assert.equal(completed.status, 'completed');
    assert.equal(completed.output[0].content[0].text, pieces.join(''));
    assert.deepEqual([completed.usage.input_tokens, completed.usage.output_tokens, completed.usage.total_tokens],
      [USAGE.input, USAGE.output, USAGE.total]);
    // Continued at once: the record was written before response.completed reached us.
    const [, next] = await withUpstream(upstream, () =>
      client.responses.create({ model: MODEL, input: 'And?', previous_response_id: completed.id }));
    assert.deepEqual(oneChatRequest(next).body.messages.map((m) => m.content), ['Stream it', pieces.join(''), 'And?']);
  });

  it('stream_usage: false: no stream_options upstream, the stream still completes', async () => {
    const { client, upstream } = fx.current;
    const [events, recs] = await withUpstream(upstream, async () =>
      collect(await client.responses.create({ model: NO_USAGE_MODEL, input: 'Old server', stream: true })));
    assert.equal(oneChatRequest(recs).body.stream_options, undefined);
    assert.equal(events.at(-1).type, 'response.completed');
    assert.equal(events.at(-1).response.output[0].content[0].text, replyText(OPENAI, 'Old server'));
  });

  it('function tools: the call goes out as a function_call item, its output comes back with previous_response_id', async () => {
    const { client, upstream } = fx.current;
    const [r1, recs1] = await withUpstream(upstream, () =>
      client.responses.create({ model: MODEL, input: 'Weather in Paris?', tools: [RESPONSES_WEATHER_TOOL], tool_choice: 'auto' }));
    const sent1 = oneChatRequest(recs1).body;
    assert.deepEqual(sent1.tools, [{
      type: 'function',
      function: {
        name: RESPONSES_WEATHER_TOOL.name, description: RESPONSES_WEATHER_TOOL.description, parameters: RESPONSES_WEATHER_TOOL.parameters, strict: true,
      },
    }]);
    assert.equal(sent1.tool_choice, 'auto');
    const call = r1.output.find((o) => o.type === 'function_call');
    assert.ok(call, JSON.stringify(r1.output));
    assert.equal(call.name, RESPONSES_WEATHER_TOOL.name);
    assert.deepEqual(JSON.parse(call.arguments), TOOL_ARGS);
    assert.equal(call.call_id, recs1[0].reply.toolCallId, 'the upstream\'s call id');

    const [r2, recs2] = await withUpstream(upstream, () => client.responses.create({
      model: MODEL,
      tools: [RESPONSES_WEATHER_TOOL],
      previous_response_id: r1.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp":21}' }],
    }));
    const messages = oneChatRequest(recs2).body.messages;
    assert.deepEqual(messages.map((m) => m.role), ['user', 'assistant', 'tool']);
    assert.deepEqual(messages[1].tool_calls, [{
      id: call.call_id, type: 'function', function: { name: RESPONSES_WEATHER_TOOL.name, arguments: call.arguments },
    }]);
    assert.deepEqual([messages[2].tool_call_id, messages[2].content], [call.call_id, '{"temp":21}']);
    assert.equal(r2.status, 'completed');
    assert.equal(r2.output[0].type, 'message', 'the upstream answered the tool result with text');
  });

  it('a streamed function call: argument deltas and the finished call', async () => {
    const { client, upstream } = fx.current;
    const [final, recs] = await withUpstream(upstream, () =>
      client.responses.stream({ model: MODEL, input: 'Weather in Paris?', tools: [RESPONSES_WEATHER_TOOL] }).finalResponse());
    oneChatRequest(recs);
    const call = final.output.find((o) => o.type === 'function_call');
    assert.ok(call, JSON.stringify(final.output));
    assert.deepEqual(JSON.parse(call.arguments), TOOL_ARGS);
    assert.equal(call.status, 'completed');
  });

  it('text.format json_schema becomes chat\'s response_format', async () => {
    const { client, upstream } = fx.current;
    const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false };
    const [, recs] = await withUpstream(upstream, () => client.responses.create({
      model: MODEL, input: 'City?', text: { format: { type: 'json_schema', name: 'city', schema, strict: true } },
    }));
    assert.deepEqual(oneChatRequest(recs).body.response_format,
      { type: 'json_schema', json_schema: { name: 'city', schema, strict: true } });
  });

  it('a built-in tool (web_search) is a 400 naming the field, never dropped', async () => {
    await assertRefused(fx, { model: MODEL, input: 'x', tools: [RESPONSES_WEATHER_TOOL, { type: 'web_search' }] }, 'tools[1].type', /web_search/);
    await assertRefused(fx, { model: MODEL, input: 'x', tools: [{ type: 'file_search', vector_store_ids: ['vs_1'] }] }, 'tools[0].type', /file_search/);
    await assertRefused(fx, { model: MODEL, input: 'x', tool_choice: { type: 'web_search_preview' } }, 'tool_choice', /web_search_preview/);
  });

  it('background: true is a 400 naming the field', async () => {
    await assertRefused(fx, { model: MODEL, input: 'x', background: true }, 'background', /background/);
  });

  it('a reasoning item in the input is a 400 naming the item', async () => {
    await assertRefused(fx, {
      model: MODEL,
      input: [{ type: 'reasoning', id: 'rs_1', summary: [] }, { role: 'user', content: 'x' }],
    }, 'input[0]', /reasoning/);
  });

  it('an API the provider does not serve: 400 naming its `apis` entry', async () => {
    const { client, upstream } = fx.current;
    const sent = upstream.requests.length;
    await assert.rejects(client.responses.create({ model: EMBED_ONLY_MODEL, input: 'x' }), (err) => {
      assert.equal(err.status, 400);
      assert.match(err.message, /`apis` list does not name `chat`/);
      return true;
    });
    await assert.rejects(client.embeddings.create({ model: CHAT_ONLY_LISTED, input: 'x' }), (err) => {
      assert.equal(err.status, 400);
      assert.match(err.message, /`apis` list does not name `embeddings`/);
      return true;
    });
    assert.equal(upstream.requests.length, sent);
  });
});
