// /healthz, /readyz, /metrics and the access log.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { gatewayWithUpstream, MODEL, PROVIDER } from './lib/fixtures.mjs';
import { DEFAULT_PIECES, MOCK_PROMPT_TOKENS } from './lib/mock_upstream.mjs';
import { REPO_ROOT, gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { post, request, chatBody } from './lib/http.mjs';
import { scrape, find, sum } from './lib/metrics.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';

const MARKER = 'PROMPT-MARKER-q8z7w1';
const REPLY_TEXT = DEFAULT_PIECES.join('');
const COMPLETION = DEFAULT_PIECES.length;
const ALWAYS_FIELDS = ['ts', 'request_id', 'method', 'path', 'status', 'stream', 'bytes_in', 'bytes_out', 'duration_ms'];

describe('health, metrics and access log', () => {
  let fx;
  const bodies = {};
  before(async () => {
    fx = await gatewayWithUpstream();
    const url = fx.gw.url;
    bodies.plain = JSON.stringify(chatBody(MODEL, { content: `${MARKER} plain` }));
    bodies.stream = JSON.stringify(chatBody(MODEL, { content: `${MARKER} stream`, stream: true, stream_options: { include_usage: true } }));
    for (const body of [bodies.plain, bodies.plain]) assert.equal((await post(url, '/v1/chat/completions', body)).status, 200);
    const streamed = await post(url, '/v1/chat/completions', bodies.stream);
    assert.match(streamed.text, /\[DONE\]/);
    fx.upstream.next({ mode: 'error', status: 429 });
    assert.equal((await post(url, '/v1/chat/completions', chatBody(MODEL, { content: MARKER }))).status, 429);
    fx.upstream.next({ mode: 'garbage' });
    assert.equal((await post(url, '/v1/chat/completions', chatBody(MODEL, { content: MARKER }))).status, 502);
    assert.equal((await post(url, '/v1/chat/completions', chatBody('unknown-model', { content: MARKER }))).status, 404);
  });
  after(() => fx?.close());

  it('/healthz and /readyz answer 200', async () => {
    assert.equal((await request(fx.gw.url, '/healthz')).status, 200);
    assert.equal((await request(fx.gw.url, '/readyz')).status, 200);
  });

  it('/metrics counts requests by model, provider and status', async () => {
    const labels = { model: MODEL, provider: PROVIDER };
    const m = await eventually(async () => {
      const s = await scrape(fx.gw.url);
      return sum(s, 'tahua_requests_total', { ...labels, status: '200' }) >= 3 && s;
    }, { what: 'three 200s in tahua_requests_total' });
    assert.match(m.headers['content-type'], /^text\/plain/);
    assert.equal(m.types.tahua_requests_total, 'counter');
    assert.equal(sum(m, 'tahua_requests_total', { ...labels, status: '200' }), 3);
    assert.equal(sum(m, 'tahua_requests_total', { ...labels, status: '429' }), 1);
    assert.equal(sum(m, 'tahua_requests_total', { ...labels, status: '502' }), 1);
  });

  it('/metrics has the duration and time-to-first-token histograms', async () => {
    const m = await scrape(fx.gw.url);
    const labels = { model: MODEL, provider: PROVIDER };
    for (const name of ['tahua_request_duration_seconds', 'tahua_time_to_first_token_seconds']) {
      assert.equal(m.types[name], 'histogram', `${name} is a histogram`);
      const count = sum(m, `${name}_count`, labels);
      const inf = sum(m, `${name}_bucket`, { ...labels, le: '+Inf' });
      assert.equal(inf, count, `${name}: +Inf bucket equals _count`);
      assert.equal(find(m, `${name}_sum`, labels).length, 1, `${name}_sum`);
      assert.ok(find(m, `${name}_bucket`, labels).length > 1, `${name} has buckets`);
    }
    assert.ok(sum(m, 'tahua_request_duration_seconds_count', labels) >= 3);
    assert.ok(sum(m, 'tahua_time_to_first_token_seconds_count', labels) >= 1, 'the stream is observed');
  });

  it('/metrics has token counters, gauges and upstream counters', async () => {
    const m = await scrape(fx.gw.url);
    const tokens = find(m, 'tahua_tokens_total', { model: MODEL, provider: PROVIDER });
    const byType = (re) => tokens.filter((s) => re.test(s.labels.type)).reduce((a, s) => a + s.value, 0);
    assert.equal(byType(/prompt/), 3 * MOCK_PROMPT_TOKENS, 'prompt tokens of three answers with usage');
    assert.equal(byType(/completion/), 3 * COMPLETION, 'completion tokens of three answers with usage');
    assert.equal(m.types.tahua_active_streams, 'gauge');
    assert.equal(sum(m, 'tahua_active_streams'), 0);
    assert.equal(m.types.tahua_active_connections, 'gauge');
    assert.ok(sum(m, 'tahua_active_connections') >= 1, 'the scrape connection itself');
    assert.ok(sum(m, 'tahua_upstream_errors_total', { provider: PROVIDER }) >= 1, 'the garbage response');
    assert.ok(find(m, 'tahua_upstream_errors_total', { provider: PROVIDER }).every((s) => s.labels.kind));
    assert.ok(sum(m, 'tahua_upstream_connections_opened_total', { provider: PROVIDER }) >= 1);
  });

  it('every metric /metrics exports is listed in docs/observability.md', async () => {
    const { types } = await scrape(fx.gw.url);
    const readme = readFileSync(join(REPO_ROOT, 'docs', 'observability.md'), 'utf8');
    const names = Object.keys(types);
    assert.ok(names.includes('tahua_connections_rejected_total'), names.join(' '));
    const missing = names.filter((name) => !readme.includes(`\`${name}`));
    assert.deepEqual(missing, [], 'metrics docs/observability.md does not list');
  });

  it('writes one access log line per request with the documented fields', async () => {
    const chats = await fx.gw.waitForAccessLog((l) => l.path === '/v1/chat/completions', { count: 6 });
    assert.equal(chats.length, 6);
    for (const line of chats) {
      for (const f of ALWAYS_FIELDS) assert.ok(f in line, `field ${f} in ${JSON.stringify(line)}`);
      assert.equal(line.method, 'POST');
      assert.equal(typeof line.request_id, 'string');
      assert.ok(line.duration_ms >= 0);
    }
    assert.equal(new Set(chats.map((l) => l.request_id)).size, chats.length, 'request ids are unique');

    const [plain1, plain2, streamed, limited, bad, unknown] = chats;
    for (const plain of [plain1, plain2]) {
      assert.equal(plain.model, MODEL);
      assert.equal(plain.provider, PROVIDER);
      assert.equal(plain.status, 200);
      assert.equal(plain.stream, false);
      assert.ok(plain.bytes_in >= Buffer.byteLength(bodies.plain), 'bytes_in counts at least the body');
      assert.ok(plain.bytes_out > 0);
      assert.equal(plain.prompt_tokens, MOCK_PROMPT_TOKENS);
      assert.equal(plain.completion_tokens, COMPLETION);
      assert.equal(plain.total_tokens, MOCK_PROMPT_TOKENS + COMPLETION);
    }
    assert.equal(streamed.stream, true);
    assert.equal(streamed.status, 200);
    assert.equal(typeof streamed.ttft_ms, 'number');
    assert.ok(streamed.ttft_ms >= 0 && streamed.ttft_ms <= streamed.duration_ms);
    assert.equal(streamed.completion_tokens, COMPLETION, 'stream usage parsed');
    assert.ok(streamed.bytes_in >= Buffer.byteLength(bodies.stream));
    assert.equal(limited.status, 429);
    assert.equal(bad.status, 502);
    assert.ok(bad.error, 'the error field names the failure');
    assert.equal(unknown.status, 404);
  });

  it('never logs prompt or completion content', () => {
    const out = fx.gw.output();
    assert.ok(!out.includes(MARKER), 'prompt text not in stdout/stderr');
    assert.ok(!out.includes(REPLY_TEXT), 'completion text not in stdout/stderr');
  });
});

describe('readiness and access log file', () => {
  it('/readyz is 503 (and /healthz 200) when no provider is usable', async (t) => {
    const gw = await startTahua({
      t,
      env: { TAHUA_IT_UNSET_KEY: undefined },
      config: gatewayConfig({
        providers: [openaiProvider('nokey', 'http://127.0.0.1:9/v1', { api_key: undefined, api_key_env: 'TAHUA_IT_UNSET_KEY' })],
        models: [{ name: 'm', provider: 'nokey' }],
      }),
    });
    assert.equal((await request(gw.url, '/readyz')).status, 503);
    assert.equal((await request(gw.url, '/healthz')).status, 200);
  });

  it('access_log.path writes the lines to that file', async (t) => {
    const file = join(makeTempDir(), 'access.log');
    const gw = await startTahua({
      t,
      config: gatewayConfig({
        accessLog: { enabled: true, path: file },
        providers: [{ name: 'm', type: 'mock' }],
        models: [{ name: 'mock', provider: 'm' }],
      }),
    });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('mock'))).status, 200);
    const line = await eventually(() => {
      if (!existsSync(file)) return false;
      return readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
        .find((l) => l.path === '/v1/chat/completions');
    }, { what: 'the access log line in the file' });
    assert.equal(line.model, 'mock');
    assert.equal(line.provider, 'm');
    assert.equal(gw.accessLog().filter((l) => l.path).length, 0, 'nothing on stdout');
  });
});
