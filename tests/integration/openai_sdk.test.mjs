// The official `openai` SDK against tahua: in front of a Node mock upstream, and against
// the built-in mock provider (default config and a configured one).
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { gatewayWithUpstream, openaiClient, MODEL } from './lib/fixtures.mjs';
import { DEFAULT_PIECES, MOCK_PROMPT_TOKENS, mockEmbedding } from './lib/mock_upstream.mjs';
import { gatewayConfig, startTahua } from './lib/tahua.mjs';

const messages = [{ role: 'user', content: 'Say hello' }];

describe('openai SDK -> tahua -> mock upstream', () => {
  let fx;
  let client;
  before(async () => {
    fx = await gatewayWithUpstream({
      models: [
        { name: MODEL, provider: 'up' },
        { name: 'embed-test', provider: 'up' },
        { name: 'instruct-test', provider: 'up' },
      ],
    });
    client = openaiClient(fx.gw);
  });
  after(() => fx?.close());

  it('non-streaming chat returns the upstream completion', async () => {
    const res = await client.chat.completions.create({ model: MODEL, messages });
    assert.equal(res.object, 'chat.completion');
    assert.equal(res.choices[0].message.role, 'assistant');
    assert.equal(res.choices[0].message.content, DEFAULT_PIECES.join(''));
    assert.equal(res.choices[0].finish_reason, 'stop');
    assert.deepEqual(res.usage, {
      prompt_tokens: MOCK_PROMPT_TOKENS,
      completion_tokens: DEFAULT_PIECES.length,
      total_tokens: MOCK_PROMPT_TOKENS + DEFAULT_PIECES.length,
    });
    const forwarded = fx.upstream.requests.at(-1);
    assert.equal(forwarded.path, '/v1/chat/completions');
    assert.deepEqual(forwarded.json.messages, messages);
  });

  it('streaming chat yields every delta the upstream sent, in order', async () => {
    const stream = await client.chat.completions.create({ model: MODEL, messages, stream: true });
    const deltas = [];
    let finish;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      const choice = chunk.choices[0];
      if (choice?.delta?.content) deltas.push(choice.delta.content);
      if (choice?.finish_reason) finish = choice.finish_reason;
    }
    assert.deepEqual(deltas, DEFAULT_PIECES);
    assert.equal(finish, 'stop');
  });

  it('streaming chat with include_usage yields the usage chunk', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    assert.equal(usage?.completion_tokens, DEFAULT_PIECES.length);
    assert.deepEqual(fx.upstream.requests.at(-1).json.stream_options, { include_usage: true });
  });

  it('embeddings (SDK default base64 encoding and explicit float)', async () => {
    const b64 = await client.embeddings.create({ model: 'embed-test', input: ['a', 'b'] });
    assert.equal(b64.data.length, 2);
    assert.deepEqual(b64.data[1].embedding, mockEmbedding(1));
    assert.equal(fx.upstream.requests.at(-1).path, '/v1/embeddings');

    const floats = await client.embeddings.create({ model: 'embed-test', input: 'a', encoding_format: 'float' });
    assert.deepEqual(floats.data[0].embedding, mockEmbedding(0));
    assert.equal(floats.model, 'embed-test');
  });

  it('legacy completions, non-streaming and streaming', async () => {
    const res = await client.completions.create({ model: 'instruct-test', prompt: 'Once' });
    assert.equal(res.object, 'text_completion');
    assert.equal(res.choices[0].text, DEFAULT_PIECES.join(''));
    assert.equal(fx.upstream.requests.at(-1).path, '/v1/completions');

    const stream = await client.completions.create({ model: 'instruct-test', prompt: 'Once', stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    assert.equal(text, DEFAULT_PIECES.join(''));
  });

  it('models.list() returns exactly the configured models', async () => {
    const ids = [];
    for await (const model of client.models.list()) {
      assert.equal(model.object, 'model');
      ids.push(model.id);
    }
    assert.deepEqual(ids.sort(), [MODEL, 'embed-test', 'instruct-test'].sort());
  });

  it('upstream errors surface as SDK APIError with the upstream status', async () => {
    fx.upstream.next({
      mode: 'error',
      status: 429,
      body: { error: { message: 'Rate limit reached', type: 'requests', param: null, code: 'rate_limit_exceeded' } },
    });
    await assert.rejects(client.chat.completions.create({ model: MODEL, messages }), (err) => {
      assert.equal(err.status, 429);
      assert.equal(err.code, 'rate_limit_exceeded');
      return true;
    });
  });
});

describe('openai SDK -> tahua built-in mock provider (default config)', () => {
  let gw;
  let client;
  before(async () => {
    gw = await startTahua({ args: ['--listen', '127.0.0.1:0'] });
    client = openaiClient(gw);
  });
  after(() => gw?.kill());

  it('lists mock-gpt and mock-embedding', async () => {
    const page = await client.models.list();
    assert.deepEqual(page.data.map((m) => m.id).sort(), ['mock-embedding', 'mock-gpt']);
  });

  it('non-streaming chat returns a chat.completion with usage', async () => {
    const res = await client.chat.completions.create({ model: 'mock-gpt', messages });
    assert.equal(res.object, 'chat.completion');
    assert.equal(res.model, 'mock-gpt');
    assert.equal(typeof res.choices[0].message.content, 'string');
    assert.ok(res.choices[0].message.content.length > 0);
    assert.equal(res.choices[0].finish_reason, 'stop');
    assert.ok(res.usage.completion_tokens > 0);
    assert.equal(res.usage.total_tokens, res.usage.prompt_tokens + res.usage.completion_tokens);
  });

  it('streaming chat: role chunk, content chunks, stop, then usage with include_usage', async () => {
    const stream = await client.chat.completions.create({
      model: 'mock-gpt',
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    assert.equal(chunks[0].choices[0].delta.content, '');
    const contentChunks = chunks.filter((c) => c.choices[0]?.delta?.content);
    const stopIndex = chunks.findIndex((c) => c.choices[0]?.finish_reason === 'stop');
    assert.ok(stopIndex > 0, 'a chunk with finish_reason stop');
    const last = chunks.at(-1);
    assert.equal(stopIndex, chunks.length - 2, 'usage chunk comes right after the stop chunk');
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, contentChunks.length);
    assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
  });

  it('streaming chat without include_usage has no usage chunk', async () => {
    const stream = await client.chat.completions.create({ model: 'mock-gpt', messages, stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
    assert.ok(chunks.every((c) => !c.usage), 'no usage');
  });

  it('embeddings, SDK default (base64) and float', async () => {
    const floats = await client.embeddings.create({ model: 'mock-embedding', input: ['x', 'y'], encoding_format: 'float' });
    assert.equal(floats.data.length, 2);
    const dims = floats.data[0].embedding.length;
    assert.ok(dims > 0 && floats.data[0].embedding.every(Number.isFinite));
    const b64 = await client.embeddings.create({ model: 'mock-embedding', input: ['x', 'y'] });
    assert.equal(b64.data[0].embedding.length, dims, 'base64 embeddings decode to the same dimension count');
    b64.data[0].embedding.forEach((v, i) => assert.ok(Math.abs(v - floats.data[0].embedding[i]) < 1e-6));
  });

  it('legacy completions return text_completion', async () => {
    const res = await client.completions.create({ model: 'mock-gpt', prompt: 'Once upon' });
    assert.equal(res.object, 'text_completion');
    assert.ok(res.choices[0].text.length > 0);
  });
});

describe('openai SDK -> tahua configured mock provider', () => {
  let gw;
  let client;
  before(async () => {
    gw = await startTahua({
      config: gatewayConfig({
        providers: [{ name: 'm', type: 'mock', mock: { completion_tokens: 3, chunk_delay: '0ms', embedding_dimensions: 5 } }],
        models: [
          { name: 'tiny', provider: 'm' },
          { name: 'tiny-embed', provider: 'm' },
        ],
      }),
    });
    client = openaiClient(gw);
  });
  after(() => gw?.kill());

  it('streams exactly completion_tokens content chunks', async () => {
    const stream = await client.chat.completions.create({
      model: 'tiny',
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.equal(chunks.filter((c) => c.choices[0]?.delta?.content).length, 3);
    assert.equal(chunks.at(-1).usage.completion_tokens, 3);
  });

  it('returns embedding_dimensions floats per input', async () => {
    const res = await client.embeddings.create({ model: 'tiny-embed', input: ['a', 'b', 'c'], encoding_format: 'float' });
    assert.equal(res.data.length, 3);
    for (const d of res.data) assert.equal(d.embedding.length, 5);
  });
});
