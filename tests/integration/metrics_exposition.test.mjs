// The whole exposition, with every feature on (tenants and limits on Redis, routes,
// tracing, usage records): strictly valid for `promtool check metrics`, the same behind
// the admin token at /admin/v1/metrics, and the new families' values right after a
// scripted mix of requests.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { startMockUpstream, MOCK_PROMPT_TOKENS, DEFAULT_PIECES } from './lib/mock_upstream.mjs';
import { startCollector } from './lib/collector.mjs';
import { startRedis } from './lib/redis.mjs';
import { gatewayConfig, openaiProvider } from './lib/tahua.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { chatBody, post, request } from './lib/http.mjs';
import { parseMetrics, find, sum } from './lib/metrics.mjs';
import { makeTempDir } from './lib/util.mjs';

const MODEL = 'gpt-test';
const KEY = 'tk-expo-0123456789abcdef';
const sha256 = (s) => createHash('sha256').update(s).digest('hex');

describe('metrics exposition', () => {
  it('is valid for promtool with everything on, also behind the admin token, with the right values', async (t) => {
    const redis = await startRedis({ t });
    const collector = await startCollector({ t });
    const upstream = await startMockUpstream({ t });
    const dir = makeTempDir('tahua-expo-');
    const config = gatewayConfig({
      server: { tenant_metrics: true },
      providers: [openaiProvider('up', upstream.baseUrl(), { retry: { attempts: 2, backoff: '1ms', on_status: [503] } })],
      models: [{ name: MODEL, provider: 'up' }],
    });
    config.routes = [{ name: 'team-route', match: { headers: { 'x-team': 'search' } }, target: MODEL }];
    config.tenants = [{ name: 'team-a', limits: { requests_per_minute: 1000 } }];
    config.keys = [{ name: 'a', tenant: 'team-a', sha256: sha256(KEY) }];
    config.store = { type: 'redis', redis: { url: redis.url } };
    config.tracing = { endpoint: `${collector.url}/v1/traces` };
    config.usage = { spill_dir: join(dir, 'spill'), sinks: [{ type: 'redis_stream' }] };
    config.admin = adminSection();
    config.cache = { enabled: true };  // these requests set no temperature: bypassed, and counted
    const { gw, admin } = await startWithAdmin(t, config);
    const auth = { authorization: `Bearer ${KEY}` };
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: auth })).status, 200);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL, { stream: true }), { headers: auth })).status, 200);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('any'), { headers: { ...auth, 'x-team': 'search' } })).status, 200);
    upstream.next({ mode: 'error', status: 503 });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL), { headers: auth })).status, 200);

    const res = await request(gw.url, '/metrics');
    const text = res.text;
    const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    assert.equal(check.status, 0, `promtool check metrics:\n${check.stdout}${check.stderr}`);

    // The same families behind the admin token; none without it.
    assert.equal((await admin('GET', '/admin/v1/metrics', { token: null })).status, 401);
    const viaAdmin = await admin('GET', '/admin/v1/metrics');
    assert.equal(viaAdmin.status, 200);
    assert.match(viaAdmin.headers['content-type'], /^text\/plain; version=0\.0\.4/);
    assert.deepEqual(Object.keys(parseMetrics(viaAdmin.text).types).sort(), Object.keys(parseMetrics(text).types).sort());
    assert.equal((await admin('GET', '/admin/v1/metrics')).status, 200, 'a second scrape (the gateway is still there)');

    const m = parseMetrics(text);
    // Four requests, five upstream calls (one retried after a 503).
    assert.equal(sum(m, 'tahua_deployment_requests_total', { model: MODEL, deployment: 'up', status: '200' }), 4);
    assert.equal(sum(m, 'tahua_deployment_requests_total', { model: MODEL, deployment: 'up', status: '503' }), 1);
    assert.equal(sum(m, 'tahua_upstream_duration_seconds_count', { model: MODEL, deployment: 'up' }), 5);
    assert.equal(sum(m, 'tahua_route_requests_total', { route: 'team-route', status: '200' }), 1);
    assert.equal(sum(m, 'tahua_inter_token_latency_seconds_count', { model: MODEL }), 1, 'one stream');
    assert.equal(sum(m, 'tahua_request_tokens_count', { model: MODEL }), 4);
    assert.equal(sum(m, 'tahua_request_tokens_sum', { model: MODEL }), 4 * (MOCK_PROMPT_TOKENS + DEFAULT_PIECES.length));
    assert.equal(sum(m, 'tahua_request_tokens_bucket', { model: MODEL, le: '16' }), 0);
    assert.equal(sum(m, 'tahua_request_tokens_bucket', { model: MODEL, le: '64' }), 4);
    assert.equal(sum(m, 'tahua_rate_limit_decisions_total', { store: 'redis' }), 4);
    assert.equal(sum(m, 'tahua_rate_limit_decision_duration_seconds_count', { store: 'redis' }), 4);
    assert.ok(sum(m, 'tahua_redis_commands_total') >= 1);
    assert.equal(sum(m, 'tahua_redis_command_timeouts_total'), 0);
    // Every command is answered (timed), timed out, or failed.
    assert.equal(sum(m, 'tahua_redis_command_duration_seconds_count') + sum(m, 'tahua_redis_command_timeouts_total') +
      sum(m, 'tahua_redis_command_errors_total'), sum(m, 'tahua_redis_commands_total'));
    assert.equal(find(m, 'tahua_config_info').length, 1);
    assert.equal(find(m, 'tahua_build_info').length, 1);
    assert.ok(sum(m, 'process_resident_memory_bytes') > 1 << 20);
    assert.ok(sum(m, 'process_open_fds') >= 5);
    assert.ok(Math.abs(sum(m, 'process_start_time_seconds') - Date.now() / 1000) < 120);
    assert.ok(sum(m, 'process_cpu_seconds_total') > 0);
    assert.equal(sum(m, 'tahua_tenant_requests_total', { tenant: 'team-a', status: '200' }), 4);
  });
});
