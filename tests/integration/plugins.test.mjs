// Lua plugins (docs/plugins.md): the shipped examples in plugins/ run as a platform team
// would deploy them (Plugin resources in a config directory), and hostile plugins try
// every sandbox limit: each is cut off within its budget, the request gets the outcome
// its failure mode says, and other requests on the same worker go on meanwhile.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import https from 'node:https';
import { issueCert, makeCa } from './lib/certs.mjs';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { checkConfig, gatewayConfig, openaiProvider, REPO_ROOT, startTahua, writeConfig } from './lib/tahua.mjs';
import { chatBody, chatText, collectData, expectError, openStream, post } from './lib/http.mjs';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { eventually, makeTempDir, STACK_TRACE_PATTERN } from './lib/util.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { toYaml } from './lib/yaml.mjs';
import { startRedis } from './lib/redis.mjs';

const EXAMPLES = ['deny_model_for_client', 'tag_request', 'stream_footer', 'client_type_auth'];

async function examplesGateway(t) {
  const upstream = await startMockUpstream({ t });
  const dir = makeTempDir();
  for (const name of EXAMPLES)
    for (const ext of ['yaml', 'lua']) copyFileSync(join(REPO_ROOT, 'plugins', `${name}.${ext}`), join(dir, `${name}.${ext}`));
  const config = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl()), { name: 'm', type: 'mock' }],
    models: [
      { name: 'gpt-4o', provider: 'up' },
      { name: 'gpt-4o-mini', provider: 'up' },
      { name: 'claude-3-5-haiku', provider: 'm' },
    ],
  });
  writeFileSync(join(dir, 'gateway.yaml'), toYaml(config));
  const gw = await startTahua({ t, args: ['--config', dir] });
  return { gw, upstream };
}

/** A config file with one inline plugin next to a mock upstream. */
async function pluginGateway(t, plugin, extra = {}) {
  const upstream = await startMockUpstream({ t });
  const config = {
    ...gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: 'm1', provider: 'up' }] }),
    plugins: [{ id: 'p', ...plugin }],
    ...extra,
  };
  const gw = await startTahua({ t, config });
  return { gw, upstream };
}

const calls = async (gw, outcome) => sum(await scrape(gw.url), 'tahua_plugin_calls_total', { plugin: 'p', outcome });

describe('plugins: the shipped examples', () => {
  it('a request policy refuses a model to a client type, in the client API shape, and counts it', async (t) => {
    const { gw, upstream } = await examplesGateway(t);
    const denied = await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-client-type': 'Mobile' } });
    expectError(denied, 403, 'model_not_allowed_for_client');
    assert.match(denied.json.error.message, /gpt-4o is not available to mobile clients/);
    const anthropic = await post(
      gw.url,
      '/v1/messages',
      { model: 'claude-3-5-haiku', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] },
      { headers: { 'x-client-type': 'watch', 'anthropic-version': '2023-06-01' } },
    );
    assert.equal(anthropic.status, 403);
    assert.equal(anthropic.json.type, 'error');
    assert.equal(anthropic.json.error.type, 'permission_error');
    // Other clients, other models, and requests without the header go through.
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-client-type': 'web' } })).status, 200);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'))).status, 200);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o-mini'), { headers: { 'x-client-type': 'mobile' } })).status, 403);
    assert.equal(upstream.requests.length, 2, 'refused requests never reach the upstream');
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_plugin_counter_total', { plugin: 'deny-model-for-client', name: 'denied_mobile' }), 2);
    assert.equal(sum(m, 'tahua_plugin_counter_total', { plugin: 'deny-model-for-client', name: 'denied_watch' }), 1);
    assert.equal(sum(m, 'tahua_plugin_calls_total', { plugin: 'deny-model-for-client', outcome: 'ok' }), 4,
      'selected by its matchers: the request without X-Client-Type ran no Lua');
  });

  it('a rewrite tags the upstream request, fills a body field and adds a response header', async (t) => {
    const { gw, upstream } = await examplesGateway(t);
    const r = await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o', { temperature: 0.5 }));
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-tagged-by'], 'tag-request/1.0.0');
    const seen = upstream.requests.at(-1);
    assert.equal(seen.headers['x-gateway-tenant'], 'anonymous');
    assert.equal(seen.json.user, 'anonymous/-');
    assert.equal(seen.json.temperature, 0.5, 'the other fields are kept');
    assert.deepEqual(seen.json.messages, chatBody('gpt-4o').messages);
    // A field the client set is left alone.
    await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o', { user: 'u-42' }));
    assert.equal(upstream.requests.at(-1).json.user, 'u-42');
  });

  it('a stream-event plugin appends a footer chunk before [DONE]', async (t) => {
    const { gw } = await examplesGateway(t);
    const { events, first } = await openStream(gw.url, chatBody('gpt-4o', { stream: true }));
    const data = [first.data, ...(await collectData(events))];
    assert.equal(data.at(-1), '[DONE]');
    const footer = JSON.parse(data.at(-2));
    assert.equal(footer.id, 'footer');
    assert.ok(chatText(data).endsWith('\n\n(generated by an AI model)'), chatText(data));
    assert.ok(chatText(data).startsWith('Hello from the mock upstream.'), 'the upstream events pass unchanged');
  });
});

describe('plugins: auth links', () => {
  const sha256 = (s) => createHash('sha256').update(s).digest('hex');
  const KEY = 'sk-plain-api-key';

  /** The client-type example as the first link of the chain, the key check second. */
  async function authGateway(t, extraPlugins = [], links = [{ type: 'plugin', id: 'client-type-auth' }, 'api_key']) {
    const upstream = await startMockUpstream({ t });
    const dir = makeTempDir();
    for (const ext of ['yaml', 'lua']) copyFileSync(join(REPO_ROOT, 'plugins', `client_type_auth.${ext}`), join(dir, `client_type_auth.${ext}`));
    const config = gatewayConfig({
      providers: [openaiProvider('up', upstream.baseUrl()), { name: 'm', type: 'mock' }],
      models: [{ name: 'gpt-4o', provider: 'up' }, { name: 'claude-3-5-haiku', provider: 'm' }],
    });
    config.tenants = [{ name: 'mobile-apps' }, { name: 'web-apps', limits: { requests_per_minute: 50 } }, { name: 'backend' }];
    config.keys = [
      { name: 'mobile-app', tenant: 'mobile-apps', sha256: sha256('unused-1'), limits: { requests_per_minute: 2 } },
      { name: 'web-frontend', tenant: 'web-apps', sha256: sha256('unused-2') },
      { name: 'backend-key', tenant: 'backend', sha256: sha256(KEY) },
    ];
    config.auth = { chains: [{ name: 'clients', links }] };
    if (extraPlugins.length) config.plugins = extraPlugins;
    writeFileSync(join(dir, 'gateway.yaml'), toYaml(config));
    const gw = await startTahua({ t, args: ['--config', dir] });
    return { gw, upstream };
  }

  it("the X-Client-Type plugin decides the tenant and key, whose limits then apply; other requests fall to the key check", async (t) => {
    const { gw, upstream } = await authGateway(t);
    const mobile = { 'x-client-type': 'mobile', 'x-device-token': 'dev_0123abcd' };
    const first = await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: mobile });
    assert.equal(first.status, 200, first.text);
    assert.equal(first.headers['x-ratelimit-limit-requests'], '2', "the key's own limit");
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: mobile })).status, 200);
    expectError(await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: mobile }), 429, 'rate_limit_exceeded');
    // Another client type is another tenant, with its limits.
    const web = await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-client-type': 'web', 'x-session': 'sess_42' } });
    assert.equal(web.status, 200);
    assert.equal(web.headers['x-ratelimit-limit-requests'], '50');
    // Refusals in the client's API shape.
    const noSession = await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-client-type': 'web' } });
    expectError(noSession, 401, 'invalid_client_token');
    assert.match(noSession.json.error.message, /x-session/);
    const anthropic = await post(gw.url, '/v1/messages', { model: 'claude-3-5-haiku', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] },
      { headers: { 'x-client-type': 'fridge', 'anthropic-version': '2023-06-01' } });
    assert.equal(anthropic.status, 401);
    assert.equal(anthropic.json.type, 'error');
    assert.equal(anthropic.json.error.type, 'authentication_error');
    // No X-Client-Type: not the plugin's to decide; the key check is.
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { authorization: `Bearer ${KEY}` } })).status, 200);
    expectError(await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o')), 401, 'missing_api_key');
    assert.equal(upstream.requests.length, 4);
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_plugin_counter_total', { plugin: 'client-type-auth', name: 'authenticated_mobile' }), 3);
    assert.equal(sum(m, 'tahua_plugin_calls_total', { plugin: 'client-type-auth', phase: 'auth', outcome: 'ok' }), 8);
  });

  it('a slow auth plugin pauses the request, not the worker; a failing one passes (open) or refuses (closed)', async (t) => {
    // Spins past its 1 ms slice before deciding: the rest runs off the event loop.
    const slow = `return { on_auth = function(req)
      local what = req:header("x-do")
      if what == "spin" then local n = 0 for i = 1, 2000000 do n = n + i end req:authenticate("backend", "backend-key")
      elseif what == "loop" then tahua.log("looping") while true do end
      elseif what == "ghost" then req:authenticate("no-such-tenant")
      elseif what == "other-key" then req:authenticate("backend", "mobile-app")
      end
    end }`;
    const plugins = [
      { id: 'slow-open', source: slow, budgets: { cpu: '200ms', slice: '1ms' }, breaker: { failures: 1000 } },
      { id: 'slow-closed', source: slow, budgets: { cpu: '200ms', slice: '1ms' }, failure_mode: 'closed', breaker: { failures: 1000 } },
    ];
    const { gw } = await authGateway(t, plugins, [{ type: 'plugin', id: 'slow-open' }, 'api_key']);
    const spun = await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-do': 'spin' } });
    assert.equal(spun.status, 200, spun.text);
    assert.ok(sum(await scrape(gw.url), 'tahua_plugin_calls_total', { plugin: 'slow-open', phase: 'auth', outcome: 'ok' }) === 1);
    // While one call loops on the plugin thread, other requests are served.
    let loopEnded = false;
    const looping = post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-do': 'loop' } }).then((r) => ((loopEnded = true), r));
    await gw.stderr.waitUntil(() => gw.stderr.json().some((l) => l.msg === 'plugin log' && l.message === 'looping'));
    for (let i = 0; i < 3; i++)
      assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { authorization: `Bearer ${KEY}` } })).status, 200);
    assert.equal(loopEnded, false, 'served while the looping call ran');
    expectError(await looping, 401, 'missing_api_key');  // fail open: the next link (no key) decides
    // A tenant that does not exist, or a key of another tenant, is the plugin's failure.
    expectError(await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-do': 'ghost' } }), 401, 'missing_api_key');
    expectError(await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-do': 'other-key' } }), 401, 'missing_api_key');
    const warned = gw.stderr.json().filter((l) => /authenticate named/.test(l.msg)).map((l) => l.msg);
    assert.deepEqual(warned, ['authenticate named a tenant that does not exist', 'authenticate named a key of another tenant']);
    assert.equal(sum(await scrape(gw.url), 'tahua_plugin_calls_total', { plugin: 'slow-open', phase: 'auth', outcome: 'cpu_budget' }), 1);

    const { gw: closed } = await authGateway(t, plugins, [{ type: 'plugin', id: 'slow-closed' }, 'api_key']);
    expectError(await post(closed.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-do': 'loop' } }), 503, 'plugin_failed');
    expectError(await post(closed.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-do': 'ghost' } }), 503, 'plugin_failed');
    assert.equal((await post(closed.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-do': 'spin' } })).status, 200);
  });

  it('an auth plugin that reads tahua.kv (answered at once by the in-process store) goes on from its own link', async (t) => {
    const plugins = [
      { id: 'noop', source: 'return { on_auth = function(req) end }' },
      {
        id: 'kv-auth',
        source: `return {
          on_auth = function(req)
            local user = req:header("x-user")
            if not user then return end
            local tenant = tahua.kv.get("tenant:" .. user)
            if tenant then req:authenticate(tenant) end
          end,
          on_request = function(req)
            local seed = req:header("x-seed")
            if seed then tahua.kv.put("tenant:" .. seed, "web-apps", 60) end
          end,
        }`,
      },
    ];
    const { gw } = await authGateway(t, plugins, [{ type: 'plugin', id: 'noop' }, { type: 'plugin', id: 'kv-auth' }, 'api_key']);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { authorization: `Bearer ${KEY}`, 'x-seed': 'u1' } })).status, 200);
    const r = await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-user': 'u1' } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-ratelimit-limit-requests'], '50', "web-apps' limit: the tenant the plugin read");
    expectError(await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-user': 'nobody' } }), 401, 'missing_api_key');
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_plugin_calls_total', { plugin: 'kv-auth', phase: 'auth' }), 3, 'one call per request: the chain went on after its link');
    assert.equal(sum(m, 'tahua_plugin_calls_total', { plugin: 'noop', phase: 'auth' }), 3);
  });

  it('a link naming a plugin without on_auth is a config error; an unknown link type lists plugin', () => {
    const base = gatewayConfig({ providers: [{ name: 'm', type: 'mock' }], models: [{ name: 'm1', provider: 'm' }] });
    base.tenants = [{ name: 'a' }];
    base.plugins = [{ id: 'req-only', source: 'return { on_request = function() end }' }];
    base.auth = { chains: [{ name: 'c', links: [{ type: 'plugin', id: 'req-only' }] }] };
    let r = checkConfig(writeConfig(base));
    assert.match(r.stderr, /auth\.chains\[0\]\.links\[0\]\.id: plugin "req-only" defines no on_auth/);
    base.auth = { chains: [{ name: 'c', links: [{ type: 'plugin' }] }] };
    r = checkConfig(writeConfig(base));
    assert.match(r.stderr, /auth\.chains\[0\]\.links\[0\]\.id: required for type plugin/);
    base.auth = { chains: [{ name: 'c', links: [{ type: 'oauth' }] }] };
    r = checkConfig(writeConfig(base));
    assert.match(r.stderr, /unknown link type "oauth" \(api_key \| anonymous \| plugin \| jwt\)/);
  });
});

describe('plugins: the key-value store', () => {
  // At most two requests per user (X-User): a count kept in tahua.kv, per plugin.
  const perUser = `return { on_request = function(req)
    local user = req:header("x-user")
    if not user then return end
    local seen, err = tahua.kv.get("seen:" .. user)
    if err then req:set_header("x-kv-error", err) return end
    local n = tonumber(seen or "0")
    if n >= 2 then req:deny(429, "User " .. user .. " has had their two requests.", "user_quota") return end
    tahua.kv.put("seen:" .. user, n + 1, 60)
  end }`;
  const shared = {
    id: 'writer',
    kv: { shared: true },
    source: 'return { on_complete = function(info) tahua.kv.shared.put("last-model", info.model or "-", 60) end }',
  };
  const reader = {
    id: 'reader',
    kv: { shared: true },
    source: `return { on_request = function(req)
      req:set_header("x-last-model", tahua.kv.shared.get("last-model") or "none")
      req:set_header("x-own", tahua.kv.get("last-model") or "none")
    end }`,
  };
  const loner = { id: 'loner', source: 'return { on_request = function(req) req:set_header("x-has-shared", tostring(tahua.kv.shared ~= nil)) end }' };

  it('in process: a plugin counts per user across requests; namespaces are its own unless shared', async (t) => {
    const { gw, upstream } = await pluginGateway(t, { source: perUser }, { plugins: [{ id: 'p', source: perUser }, shared, reader, loner] });
    const as = (user) => post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-user': user } });
    assert.equal((await as('ann')).status, 200);
    assert.equal((await as('ann')).status, 200);
    expectError(await as('ann'), 429, 'user_quota');
    assert.equal((await as('bob')).status, 200, 'another user, another count');
    const seen = upstream.requests.at(-1).headers;
    assert.equal(seen['x-last-model'], 'm1', "the writer's shared value");
    assert.equal(seen['x-own'], 'none', "a plugin's own namespace is not the shared one");
    assert.equal(seen['x-has-shared'], 'false', 'no shared namespace without kv.shared');
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_plugin_kv_operations_total', { plugin: 'p', op: 'get', result: 'missing' }), 2);
    assert.equal(sum(m, 'tahua_plugin_kv_operations_total', { plugin: 'p', op: 'get', result: 'found' }), 2);
    assert.equal(sum(m, 'tahua_plugin_kv_operations_total', { plugin: 'p', op: 'put', result: 'ok' }), 3);
  });

  it('with Redis: two replicas share the counts; Redis stopped is "unavailable", not "missing"', async (t) => {
    const redis = await startRedis({ t });
    const upstream = await startMockUpstream({ t });
    const config = {
      ...gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: 'm1', provider: 'up' }] }),
      plugins: [{ id: 'p', source: perUser }],
      store: { type: 'redis', redis: { url: redis.url, command_timeout: '200ms', heartbeat: '100ms', replica_ttl: '1s', resync: '1s' } },
    };
    const a = await startTahua({ t, config });
    const b = await startTahua({ t, config });
    const as = (gw, user) => post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-user': user } });
    assert.equal((await as(a, 'cy')).status, 200);
    // The write is made when the call ends, not waited for: the next request may be first.
    await eventually(async () => (await redis.cli('GET', 'tahua:kv:p:seen:cy')) === '1', { what: 'the count in Redis' });
    assert.equal((await as(b, 'cy')).status, 200, 'the other replica sees one request');
    await eventually(async () => (await redis.cli('GET', 'tahua:kv:p:seen:cy')) === '2', { what: 'the second count' });
    expectError(await as(a, 'cy'), 429, 'user_quota');
    const ttl = Number(await redis.cli('PTTL', 'tahua:kv:p:seen:cy'));
    assert.ok(ttl > 0 && ttl <= 60000, `every value has its TTL (${ttl})`);
    await redis.stop();
    // A key that exists (one never written may be answered "missing" by the lookup filter,
    // rightly: see the filter's tests).
    const down = await as(a, 'cy');
    assert.equal(down.status, 200);
    assert.equal(upstream.requests.at(-1).headers['x-kv-error'], 'unavailable');
    assert.ok(sum(await scrape(a.url), 'tahua_plugin_kv_operations_total', { plugin: 'p', op: 'get', result: 'unavailable' }) >= 1);
  });

  it('kv.get is refused where a call cannot wait; keys, values and TTLs are bounded', async (t) => {
    const source = `return {
      on_request = function(req)
        local what = req:header("x-do")
        if what == "long-key" then tahua.kv.get(string.rep("k", 300))
        elseif what == "big" then tahua.kv.put("k", string.rep("v", 70000))
        elseif what == "ttl" then tahua.kv.put("k", "v", 0)
        elseif what == "table" then tahua.kv.put("k", {})
        elseif what == "sort" then local t = {2, 1} table.sort(t, function(a, b) tahua.kv.get("x") return a < b end)
        end
      end,
      on_complete = function(info) tahua.kv.get("x") end,
    }`;
    const { gw } = await pluginGateway(t, { source, breaker: { failures: 1000 } });
    for (const what of ['long-key', 'big', 'ttl', 'table', 'sort'])
      assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-do': what } })).status, 200, what);
    await eventually(() => gw.stderr.json().filter((l) => l.msg === 'plugin call failed').length >= 6, { what: 'the failures logged' });
    const errors = gw.stderr.json().filter((l) => l.msg === 'plugin call failed').map((l) => l.error).join('\n');
    for (const m of [/a key has 1 to 256 bytes/, /at most 65536 bytes/, /the ttl is 1 second to 30 days/, /a string or a number/,
      /cannot wait here/, /only available in on_request and on_auth/])
      assert.match(errors, m);
  });
});

describe('plugins: lookups of ids that do not exist (Bloom filter and cached misses)', () => {
  const source = `return { on_request = function(req)
    local put = req:header("x-put")
    if put then tahua.kv.put("order:" .. put, "shipped", 3600) return end
    local id = req:header("x-order")
    if id then
      local v, err = tahua.kv.get("order:" .. id)
      req:set_header("x-order-state", v or err or "unknown")
    end
  end }`;

  it('a flood of unknown ids never reaches Redis; ids written through any replica are found, before and after a replica starts', async (t) => {
    const redis = await startRedis({ t });
    const upstream = await startMockUpstream({ t });
    const config = {
      ...gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: 'm1', provider: 'up' }] }),
      plugins: [{ id: 'orders', source }],
      store: {
        type: 'redis',
        redis: { url: redis.url, command_timeout: '200ms', heartbeat: '100ms', replica_ttl: '1s', resync: '1s' },
        lookups: { expected_ids: 100000, false_positive_rate: 0.01, negative_ttl: '1h' },
      },
    };
    config.access_log = { enabled: false };
    const a = await startTahua({ t, config });
    const ready = async (gw) => sum(await scrape(gw.url), 'tahua_store_id_filter_ready') === 1;
    await eventually(() => ready(a), { what: "replica a's filter built" });
    const state = async (gw, id) => {
      await post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-order': id } });
      return upstream.requests.at(-1).headers['x-order-state'];
    };
    // Written through a before b starts: b's filter is built from Redis's keys.
    await post(a.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-put': 'early' } });
    await eventually(() => redis.cli('EXISTS', 'tahua:kv:orders:order:early') === '1', { what: 'the early order in Redis' });
    const b = await startTahua({ t, config });
    await eventually(() => ready(b), { what: "replica b's filter built" });
    assert.equal(await state(b, 'early'), 'shipped');

    // The flood: 2,000 ids nobody wrote, on both replicas.
    const gets = () => Number(/cmdstat_get:calls=(\d+)/.exec(redis.cli('INFO', 'commandstats'))?.[1] ?? 0);
    const before = gets();
    for (let batch = 0; batch < 50; batch++)
      await Promise.all(Array.from({ length: 40 }, (_, i) => post((i % 2 ? a : b).url, '/v1/chat/completions', chatBody('m1'),
        { headers: { 'x-order': `ghost-${batch}-${i}` } })));
    const reached = gets() - before;
    const filtered = sum(await scrape(a.url), 'tahua_store_lookups_total', { answer: 'filter' }) +
      sum(await scrape(b.url), 'tahua_store_lookups_total', { answer: 'filter' });
    t.diagnostic(`flood of 2000 unknown ids: ${reached} reached Redis, ${filtered} answered by the filter`);
    assert.ok(reached <= 60, `${reached} of 2000 lookups reached Redis (the filter's false positives only)`);
    assert.ok(filtered >= 1940, `${filtered} answered by the filter`);
    assert.ok(upstream.requests.slice(-2000).every((r) => r.headers['x-order-state'] === 'unknown'));

    // b remembers a miss (for an hour here); a write through a wipes it on b at once.
    const ghost = 'ghost-0-1';
    for (let i = 0; i < 3; i++) assert.equal(await state(b, ghost), 'unknown');
    await post(a.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-put': ghost } });
    await eventually(async () => (await state(b, ghost)) === 'shipped', { what: 'the order written through a, seen on b' });
    await eventually(async () => (await state(a, 'late')) === 'unknown', { what: 'a miss' });
    await post(b.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-put': 'late' } });
    await eventually(async () => (await state(a, 'late')) === 'shipped', { what: 'the order written through b, seen on a' });
  });
});

describe('plugins: outbound HTTP', () => {
  /** An identity service: GET /introspect with the client's token; slow or huge on demand. */
  async function identityService(t) {
    const hits = [];
    const server = createServer((req, res) => {
      hits.push({ url: req.url, headers: req.headers });
      const token = req.headers['x-token'];
      if (token === 'slow') return setTimeout(() => res.end('{}'), 2000).unref();
      if (token === 'huge') return res.end('x'.repeat(200000));
      if (token === 'down') { res.writeHead(503); return res.end(); }
      if (token?.startsWith('good-')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ active: true, tenant: 'backend', key: 'backend-key' }));
      }
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end('{"active":false}');
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.after(() => server.close());
    return { url: `http://127.0.0.1:${server.address().port}`, port: server.address().port, hits };
  }

  it('an auth plugin validates tokens against an identity service, caches the answer, and is bounded by its allow-list, timeout, size limit and breaker', async (t) => {
    const idp = await identityService(t);
    const source = `return { on_auth = function(req)
      local token = req:header("x-token")
      if not token then return end
      local cached = tahua.kv.get("token:" .. token)
      if cached then req:authenticate(cached) return end
      local url = req:header("x-idp") or "${idp.url}/introspect"
      local resp, err = tahua.http.request{ url = url, headers = { ["x-token"] = token }, timeout = 0.3 }
      if not resp then req:deny(401, "identity service: " .. err, "idp_error") return end
      if resp.status ~= 200 then req:deny(401, "The token is not valid.", "invalid_token") return end
      local tenant = resp.body:match('"tenant":"([^"]+)"')
      tahua.kv.put("token:" .. token, tenant, 60)
      req:authenticate(tenant)
    end }`;
    const upstream = await startMockUpstream({ t });
    const config = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: 'm1', provider: 'up' }] });
    config.tenants = [{ name: 'backend' }];
    config.keys = [{ name: 'backend-key', tenant: 'backend', sha256: createHash('sha256').update('unused').digest('hex') }];
    config.plugins = [{
      id: 'idp-auth', source, failure_mode: 'closed',
      http: { allow: [`127.0.0.1:${idp.port}`], timeout: '1s', max_response_bytes: 4096, breaker: { failures: 3, cooldown: '1h' } },
    }];
    config.auth = { chains: [{ name: 'tokens', links: [{ type: 'plugin', id: 'idp-auth' }] }] };
    const gw = await startTahua({ t, config });
    const call = (headers) => post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers });

    assert.equal((await call({ 'x-token': 'good-1' })).status, 200);
    assert.equal(idp.hits.length, 1);
    assert.equal(idp.hits[0].headers['x-token'], 'good-1', 'the header the plugin set');
    assert.equal((await call({ 'x-token': 'good-1' })).status, 200);
    assert.equal(idp.hits.length, 1, 'the second request was answered from tahua.kv');
    expectError(await call({ 'x-token': 'bad' }), 401, 'invalid_token');
    // Not on the allow-list: no call is made.
    const other = await call({ 'x-token': 'good-2', 'x-idp': 'http://127.0.0.2:9/introspect' });
    expectError(other, 401, 'idp_error');
    assert.match(other.json.error.message, /not allowed: 127\.0\.0\.2:9 is not on the plugin's http\.allow list/);
    // Too large an answer, a slow one and a failing one: the breaker opens at the third failure in a row.
    const huge = await call({ 'x-token': 'huge' });
    assert.match(huge.json.error.message, /response too large/);
    assert.equal(idp.hits.length, 3);
    const slow = await call({ 'x-token': 'slow' });
    assert.match(slow.json.error.message, /identity service: timeout/);
    const down = await call({ 'x-token': 'down' });
    expectError(down, 401, 'invalid_token');
    const hitsBefore = idp.hits.length;
    const skipped = await call({ 'x-token': 'good-3' });
    assert.match(skipped.json.error.message, /breaker open/);
    assert.equal(idp.hits.length, hitsBefore, 'no call while the breaker is open');
    const m = await scrape(gw.url);
    const http = (result) => sum(m, 'tahua_plugin_http_calls_total', { plugin: 'idp-auth', result });
    assert.equal(http('2xx'), 1);
    assert.equal(http('4xx'), 1);
    assert.equal(http('5xx'), 1);
    assert.equal(http('timeout'), 1);
    assert.equal(http('error'), 1, 'the answer over max_response_bytes');
    assert.equal(http('not_allowed'), 1);
    assert.equal(http('breaker_open'), 1);
    assert.equal(gw.stderr.json().filter((l) => l.msg === 'plugin http breaker opened').length, 1);
  });

  it('https: the certificate is checked against the trusted CAs and the host name', async (t) => {
    const ca = makeCa();
    const leaf = issueCert(ca, ['DNS:localhost']);
    const server = https.createServer({ cert: leaf.cert, key: leaf.key }, (req, res) => res.end('{"ok":true}'));
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.after(() => server.close());
    const port = server.address().port;
    const source = `return { on_request = function(req)
      local resp, err = tahua.http.request{ url = req:header("x-url") }
      req:set_header("x-result", resp and tostring(resp.status) .. " " .. resp.body or err)
    end }`;
    const upstream = await startMockUpstream({ t });
    const config = {
      ...gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: 'm1', provider: 'up' }] }),
      plugins: [{ id: 'p', source, http: { allow: [`localhost:${port}`, `127.0.0.1:${port}`] } }],
    };
    const call = async (gw, url) => {
      await post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-url': url } });
      return upstream.requests.at(-1).headers['x-result'];
    };
    // OpenSSL's default verify paths honour SSL_CERT_FILE: here, the test CA.
    const trusting = await startTahua({ t, config, env: { SSL_CERT_FILE: ca.caFile } });
    assert.equal(await call(trusting, `https://localhost:${port}/introspect`), '200 {"ok":true}');
    assert.match(await call(trusting, `https://127.0.0.1:${port}/introspect`), /^tls: /, 'a certificate for another name');
    const other = await startTahua({ t, config });
    assert.match(await call(other, `https://localhost:${port}/introspect`), /^tls: /, 'a CA the system does not trust');
  });

  it('calls to one host share a kept-alive connection; one the service closed is not reused', async (t) => {
    let connections = 0;
    const server = createServer((req, res) => {
      if (req.url === '/bye') res.setHeader('connection', 'close');
      res.end('{"ok":true}');
    });
    server.on('connection', () => connections++);
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.after(() => server.close());
    const port = server.address().port;
    const source = `return { on_request = function(req)
      local resp, err = tahua.http.request{ url = "http://127.0.0.1:${port}" .. req:header("x-path") }
      req:set_header("x-result", resp and tostring(resp.status) or err)
    end }`;
    const upstream = await startMockUpstream({ t });
    const config = {
      ...gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: 'm1', provider: 'up' }] }),
      plugins: [{ id: 'p', source, http: { allow: [`127.0.0.1:${port}`] } }],
    };
    const gw = await startTahua({ t, config });
    const call = async (path) => {
      assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-path': path } })).status, 200);
      return upstream.requests.at(-1).headers['x-result'];
    };
    for (let i = 0; i < 3; i++) assert.equal(await call('/check'), '200');
    assert.equal(connections, 1, 'three calls, one connection');
    assert.equal(await call('/bye'), '200');
    assert.equal(await call('/check'), '200');
    assert.equal(connections, 2, 'the connection the service closed was not reused');
  });

  it('tahua.http exists only with an allow-list; a bad request is the plugin\'s error', async (t) => {
    const source = `return { on_request = function(req)
      local what = req:header("x-do")
      if what == "absent" then req:set_header("x-has-http", tostring(tahua.http ~= nil))
      elseif what == "scheme" then tahua.http.request{ url = "ftp://127.0.0.1/" }
      elseif what == "header" then tahua.http.request{ url = "http://127.0.0.1:9/", headers = { host = "evil" } }
      end
    end }`;
    const { gw, upstream } = await pluginGateway(t, { source }, {
      plugins: [
        { id: 'p', source, http: { allow: ['127.0.0.1'] }, breaker: { failures: 1000 } },
        { id: 'q', source: 'return { on_request = function(req) req:set_header("x-q-http", tostring(tahua.http ~= nil)) end }' },
      ],
    });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-do': 'absent' } })).status, 200);
    assert.equal(upstream.requests.at(-1).headers['x-has-http'], 'true');
    assert.equal(upstream.requests.at(-1).headers['x-q-http'], 'false');
    for (const what of ['scheme', 'header'])
      assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-do': what } })).status, 200);
    const errors = gw.stderr.json().filter((l) => l.msg === 'plugin call failed').map((l) => l.error).join('\n');
    assert.match(errors, /only http:\/\/ and https:\/\/ are supported/);
    assert.match(errors, /host is set by the gateway/);
  });
});

describe('plugins: rewriting the request', () => {
  it('set_field reaches into arrays by index (messages.0.content); a path it cannot write raises', async (t) => {
    const source = `return { on_request = function(req)
      req:set_field("messages.0.content", "[rewritten] " .. req:field("messages.0.content"))
      req:set_field("messages.1.role", "user")
      if req:header("x-bad") then req:set_field(req:header("x-bad"), "x") end
    end }`;
    const { gw, upstream } = await pluginGateway(t, { source });
    const body = { model: 'm1', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'assistant', content: 'Hi' }] };
    assert.equal((await post(gw.url, '/v1/chat/completions', body)).status, 200);
    const sent = upstream.requests.at(-1).json.messages;
    assert.equal(sent[0].content, '[rewritten] Be brief.');
    assert.equal(sent[1].role, 'user');
    for (const bad of ['messages.7.content', 'messages.role', 'messages.0.content.text']) {
      const before = await calls(gw, 'error');
      await post(gw.url, '/v1/chat/completions', body, { headers: { 'x-bad': bad } });
      assert.equal(await calls(gw, 'error'), before + 1, `set_field("${bad}") raised`);
    }
    // The self-test sees the change too.
    const selftest = checkConfig(writeConfig({
      ...gatewayConfig({ providers: [{ name: 'm', type: 'mock' }], models: [{ name: 'm1', provider: 'm' }] }),
      plugins: [{ id: 'rw', source, tests: [{ request: { body: JSON.stringify(body) }, expect: { fields: { 'messages.0.content': '[rewritten] Be brief.' } } }] }],
    }));
    assert.equal(selftest.status, 0, selftest.stderr);
  });
});

describe('plugins: upstream selection hints', () => {
  it('pin_version sends a request to the deployments of that version, as a client pin would', async (t) => {
    const upstream = await startMockUpstream({ t });
    const config = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [] });
    config.models = [{ name: 'm1', deployments: [{ id: 'stable', provider: 'up' }, { id: 'next', provider: 'up', version: 'canary', weight: 0 }] }];
    config.server = { ...config.server, deployment_header: true };
    config.plugins = [{
      id: 'beta-users',
      source: 'return { on_request = function(req) if req:header("x-beta") then req:pin_version("canary") end end }',
    }];
    const gw = await startTahua({ t, config });
    const beta = await post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-beta': '1' } });
    assert.equal(beta.status, 200, beta.text);
    assert.equal(beta.headers['x-tahua-deployment'], 'next');
    assert.equal(beta.headers['x-tahua-version'], 'canary');
    for (let i = 0; i < 5; i++)
      assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('m1'))).headers['x-tahua-deployment'], 'stable', 'weight 0: pinned only');
  });
});

describe('plugins: the sandbox holds against hostile code', () => {
  const loop = 'return { on_request = function(req) if req:header("x-evil") then tahua.log("looping") while true do end end end }';

  it('an infinite loop is cut off at its CPU budget while other requests on the worker go on', async (t) => {
    const { gw } = await pluginGateway(t, { source: loop, budgets: { cpu: '300ms', slice: '1ms' } });
    const order = [];
    const hostile = post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-evil': '1' } }).then((r) => {
      order.push('hostile');
      return r;
    });
    // Sent once the hostile request is in its loop: served between its slices.
    await gw.stderr.waitUntil(() => gw.stderr.json().some((l) => l.msg === 'plugin log' && l.message === 'looping'));
    const plain = [];
    for (let i = 0; i < 5; i++)
      plain.push(post(gw.url, '/v1/chat/completions', chatBody('m1')).then((r) => (order.push('plain'), r)));
    for (const r of await Promise.all(plain)) assert.equal(r.status, 200);
    const h = await hostile;
    assert.equal(h.status, 200, 'fail open: the request goes on without the plugin');
    assert.deepEqual(order, ['plain', 'plain', 'plain', 'plain', 'plain', 'hostile']);
    assert.equal(await calls(gw, 'cpu_budget'), 1);
    const line = gw.stderr.json().find((l) => l.msg === 'plugin call failed');
    assert.equal(line.outcome, 'cpu_budget');
    assert.equal(line.plugin, 'p');
    assert.equal(line.request_id, h.headers['x-request-id']);
  });

  it('fail closed: a looping, exploding or forbidden plugin refuses the request with plugin_failed', async (t) => {
    const source = `return { on_request = function(req)
      local what = req:header("x-do")
      if what == "loop" then while true do end
      elseif what == "memory" then local s = "x" while true do s = s .. s end
      elseif what == "execute" then os.execute("touch /tmp/pwned")
      elseif what == "open" then io.open("/etc/passwd")
      elseif what == "require" then require("os")
      elseif what == "load" then load("return 1")
      elseif what == "recurse" then local function r() return 1 + r() end r()
      elseif what == "throw" then error("secret-token-123 should not reach the client")
      elseif what == "find" then local s = string.rep("a", 1 << 20) return s:find(".-.-.-.-b")
      end
    end }`;
    const { gw, upstream } = await pluginGateway(t, {
      source,
      failure_mode: 'closed',
      budgets: { cpu: '50ms', memory_bytes: 4194304 },
      breaker: { failures: 1000 },
    });
    for (const what of ['loop', 'memory', 'execute', 'open', 'require', 'load', 'recurse', 'throw']) {
      const r = await post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-do': what } });
      expectError(r, 503, 'plugin_failed');
      assert.doesNotMatch(r.text, /secret-token|passwd|STACK|nil value/, what);
      assert.doesNotMatch(r.text, STACK_TRACE_PATTERN, what);
    }
    // A backtracking pattern over a megabyte runs in linear time and the call succeeds.
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-do': 'find' } })).status, 200);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('m1'))).status, 200);
    assert.equal(upstream.requests.length, 2);
    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_plugin_calls_total', { plugin: 'p', outcome: 'cpu_budget' }), 1);
    assert.ok(sum(m, 'tahua_plugin_calls_total', { plugin: 'p', outcome: 'memory_budget' }) >= 1);
    assert.ok(sum(m, 'tahua_plugin_calls_total', { plugin: 'p', outcome: 'error' }) >= 5);
    const errors = gw.stderr.json().filter((l) => l.msg === 'plugin call failed').map((l) => l.error);
    assert.ok(errors.some((e) => /attempt to call a nil value \(field 'execute'\)/.test(e)), errors.join('\n'));
    assert.ok(errors.some((e) => /global 'io'/.test(e)), errors.join('\n'));
    assert.equal(gw.exitCode, undefined, 'the gateway is still up');
  });

  it('repeated failures open the plugin breaker: calls are skipped until the cooldown', async (t) => {
    const { gw } = await pluginGateway(t, {
      source: 'return { on_request = function() error("down") end }',
      breaker: { failures: 3, cooldown: '1h' },
    });
    for (let i = 0; i < 6; i++) assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('m1'))).status, 200);
    assert.equal(await calls(gw, 'error'), 3);
    assert.equal(await calls(gw, 'breaker_open'), 3);
  });

  it('a stream-event plugin that fails closed ends the stream with an error event', async (t) => {
    const { gw } = await pluginGateway(t, {
      source: 'return { on_stream_event = function(ev) if ev.index == 2 then error("boom") end end }',
      failure_mode: 'closed',
    });
    const { events, first } = await openStream(gw.url, chatBody('m1', { stream: true }));
    const data = [first.data, ...(await collectData(events))];
    const last = JSON.parse(data.at(-1) === '[DONE]' ? data.at(-2) : data.at(-1));
    assert.equal(last.error.code, 'plugin_failed');
    assert.equal(data.filter((d) => d !== '[DONE]' && !JSON.parse(d).error).length, 2, 'the events before the failed one');
  });
});

describe('plugins: config', () => {
  const base = (plugin) => ({
    ...gatewayConfig({ providers: [{ name: 'm', type: 'mock' }], models: [{ name: 'm1', provider: 'm' }] }),
    plugins: [plugin],
  });

  it('code that does not compile, or whose phases do not match, is refused naming the file and field', () => {
    let r = checkConfig(writeConfig(base({ id: 'bad', source: 'return { on_request = function( }' })));
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /tahua\.yaml:\d+:\d+: plugins\[0\]\.source: bad:1:/);
    r = checkConfig(writeConfig(base({ id: 'x', phases: ['complete'], source: 'return { on_request = function() end }' })));
    assert.match(r.stderr, /plugins\[0\]\.phases\[0\]: the code defines no on_complete/);
    r = checkConfig(writeConfig(base({ id: 'x', source: 'while true do end' })));
    assert.match(r.stderr, /plugins\[0\]\.source: top level: cpu_budget/);
    r = checkConfig(writeConfig(base({ id: 'x', supports: { paths: ['/v2/nope'] }, source: 'return { on_complete = function() end }' })));
    assert.match(r.stderr, /plugins\[0\]\.supports\.paths\[0\]: unknown API path/);
    r = checkConfig(writeConfig(base({ id: 'x', source: 'return { on_complete = function() end }' })));
    assert.equal(r.status, 0, r.stderr);
  });

  it("a version whose own tests fail is refused, naming the test and what differed", () => {
    const source = 'return { on_request = function(req) if req:header("x-tier") == "free" then req:deny(402, "Upgrade.", "upgrade_required") end end }';
    const tests = (expect) => [
      { name: 'free tier is refused', request: { headers: { 'x-tier': 'free' } }, expect },
      { name: 'paid tier goes on', request: { headers: { 'x-tier': 'paid' } }, expect: { outcome: 'continue' } },
    ];
    let r = checkConfig(writeConfig(base({ id: 'tier', source, tests: tests({ status: 402, code: 'upgrade_required' }) })));
    assert.equal(r.status, 0, r.stderr);
    r = checkConfig(writeConfig(base({ id: 'tier', source, tests: tests({ status: 403 }) })));
    assert.match(r.stderr, /plugins\[0\]\.tests: test 'free tier is refused' failed: expected status 403, got 402/);
    r = checkConfig(writeConfig(base({ id: 'tier', source: 'return { on_request = function() end }', tests: tests({ outcome: 'deny' }) })));
    assert.match(r.stderr, /test 'free tier is refused' failed: expected a refusal; the request went on/);
    const rewrite = 'return { on_request = function(req) req:set_field("metadata.tier", req:header("x-tier")) end }';
    r = checkConfig(writeConfig(base({ id: 'rw', source: rewrite, tests: [{ request: { headers: { 'x-tier': 'gold' } }, expect: { fields: { 'metadata.tier': 'silver' } } }] })));
    assert.match(r.stderr, /test '#1' failed: expected body field metadata\.tier = "silver", got "gold"/);
  });
});

describe('plugins: the examples in the docs', () => {
  const blocks = (doc, lang) =>
    [...readFileSync(join(REPO_ROOT, doc), 'utf8').matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1]);

  it("the short guide's plugin refuses gpt-4 models to mobile clients", async (t) => {
    const block = blocks('docs/plugins.md', 'yaml').find((b) => b.startsWith('plugins:'));
    assert.ok(block, 'docs/plugins.md has the plugins block');
    const base = toYaml(gatewayConfig({ providers: [{ name: 'm', type: 'mock' }], models: [{ name: 'gpt-4o', provider: 'm' }] }));
    const gw = await startTahua({ t, args: ['--config', writeConfig(`${base}\n${block}`)] });
    const denied = await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-client-type': 'mobile' } });
    expectError(denied, 403, 'plugin_denied');
    assert.equal(denied.headers['x-policy'], 'mobile-policy');
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { 'x-client-type': 'web' } })).status, 200);
  });

  it('the Plugin resource and the Lua code of docs/plugins.md load and run together', async (t) => {
    const resource = blocks('docs/plugins.md', 'yaml').find((b) => b.includes('kind: Plugin'));
    const code = blocks('docs/plugins.md', 'lua')[0];
    assert.ok(resource && code, 'docs/plugins.md has the resource and the code');
    const dir = makeTempDir();
    writeFileSync(join(dir, 'plugin.yaml'), resource);
    writeFileSync(join(dir, 'deny_model_for_client.lua'), code);
    const config = gatewayConfig({
      providers: [{ name: 'm', type: 'mock' }],
      models: [{ name: 'gpt-4o', provider: 'm' }],
    });
    config.tenants = [{ name: 'acme' }];
    config.keys = [{ name: 'ci-key', tenant: 'acme', sha256: createHash('sha256').update('sk-doc-example-key').digest('hex') }];
    writeFileSync(join(dir, 'gateway.yaml'), toYaml(config));
    const gw = await startTahua({ t, args: ['--config', dir] });
    const headers = { authorization: 'Bearer sk-doc-example-key', 'x-client-type': 'mobile' };
    const denied = await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers });
    expectError(denied, 403, 'model_not_allowed_for_client');
    const ok = await post(gw.url, '/v1/chat/completions', chatBody('gpt-4o'), { headers: { ...headers, 'x-client-type': 'web' } });
    assert.equal(ok.status, 200);
    assert.equal(ok.headers['x-policy'], 'v1');
    assert.equal(sum(await scrape(gw.url), 'tahua_plugin_counter_total', { plugin: 'deny-model-for-client', name: 'answers' }), 2);
  });
});

describe('plugins: hot loading through the admin API', () => {
  const version = (v) => ({
    version: v,
    source: `return { on_response_headers = function(resp) resp:set_header("x-plugin-version", "${v}") end }`,
  });

  it('versions swap under load with no failed request; a broken version is refused and the last good one keeps running', async (t) => {
    const upstream = await startMockUpstream({ t });
    const c = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: 'm1', provider: 'up' }] });
    c.access_log = { enabled: false };
    c.admin = adminSection();
    const { gw, admin } = await startWithAdmin(t, c);

    // Load through every change: 4 clients, one request after the other each.
    const seen = [];
    let stop = false;
    const client = async () => {
      while (!stop) {
        const r = await post(gw.url, '/v1/chat/completions', chatBody('m1'));
        seen.push({ status: r.status, version: r.headers['x-plugin-version'] ?? null });
      }
    };
    const clients = [client(), client(), client(), client()];
    const waitFor = (v) => eventually(() => seen.at(-1)?.version === v && seen.at(-4)?.version === v, { what: `version ${v}` });

    assert.equal((await admin('PUT', '/admin/v1/plugins/versioned', { json: version('1') })).status, 200);
    await waitFor('1');
    const broken = await admin('PUT', '/admin/v1/plugins/versioned', { json: { version: '2', source: 'return { on_request = function( }' } });
    assert.equal(broken.status, 400);
    assert.equal(broken.json.error.code, 'invalid_resource');
    assert.match(broken.json.error.message, /Plugin\/versioned\.spec\.source: versioned:1:/);
    const looping = await admin('PUT', '/admin/v1/plugins/versioned', { json: { version: '2', source: 'while true do end' } });
    assert.equal(looping.status, 400, 'a top level that never returns is refused at load');
    const failingTests = await admin('PUT', '/admin/v1/plugins/versioned', {
      json: { ...version('2'), source: 'return { on_request = function() end }', tests: [{ name: 't', expect: { outcome: 'deny' } }] },
    });
    assert.equal(failingTests.status, 400, 'a version whose own tests fail is refused');
    assert.match(failingTests.json.error.message, /test 't' failed/);
    const fromFile = await admin('PUT', '/admin/v1/plugins/other', { json: { file: '/etc/passwd' } });
    assert.equal(fromFile.status, 400);
    assert.match(fromFile.json.error.message, /carries its code in `source`/);
    const before = seen.length;
    await eventually(() => seen.length > before + 20, { what: 'more requests after the refused versions' });
    assert.ok(seen.slice(before).every((s) => s.version === '1'), 'the last good version keeps running');

    assert.equal((await admin('PUT', '/admin/v1/plugins/versioned', { json: version('2') })).status, 200);
    await waitFor('2');
    const listed = await admin('GET', '/admin/v1/plugins');
    assert.equal(listed.status, 200);
    assert.deepEqual(
      listed.json.plugins.map((p) => [p.id, p.version, p.source, p.state, p.phases]),
      [['versioned', '2', 'store', 'applied', 'response_headers']],
    );
    assert.equal((await admin('DELETE', '/admin/v1/plugins/versioned')).status, 200);
    await waitFor(null);
    stop = true;
    await Promise.all(clients);
    assert.ok(seen.length > 50, `${seen.length} requests`);
    assert.deepEqual(seen.filter((s) => s.status !== 200), [], 'no request failed');
  });
});

describe('plugins: canary versions', () => {
  const tagger = (v) => `return { on_response_headers = function(resp) resp:set_header("x-plugin-version", "${v}") end }`;

  it('a canary version takes its share of users, sticky per user; its share changes through the admin API', async (t) => {
    const upstream = await startMockUpstream({ t });
    const c = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: 'm1', provider: 'up' }] });
    c.access_log = { enabled: false };
    c.admin = adminSection();
    c.plugins = [{ id: 'tagger', version: '1', source: tagger('1') }];
    const { gw, admin } = await startWithAdmin(t, c);
    const as = async (user) => (await post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-user': user } })).headers['x-plugin-version'];
    const share = async () => {
      const seen = await Promise.all(Array.from({ length: 400 }, (_, i) => as(`user-${i}`)));
      assert.deepEqual([...new Set(seen)].sort().filter((v) => v !== '1' && v !== '2'), []);
      return seen.filter((v) => v === '2').length / seen.length;
    };
    assert.equal(await share(), 0);
    const put = (percent) => admin('PUT', '/admin/v1/plugins/tagger-v2', {
      json: { version: '2', source: tagger('2'), canary: { of: 'tagger', percent, sticky_header: 'x-user' } },
    });
    assert.equal((await put(25)).status, 200);
    await eventually(async () => (await as('probe-' + Math.random())) !== undefined && (await share()) > 0, { what: 'the canary in force' });
    const quarter = await share();
    assert.ok(quarter > 0.17 && quarter < 0.33, `25% canary: ${quarter}`);
    // Sticky: a user stays on one side.
    for (const user of ['user-1', 'user-2', 'user-3']) {
      const first = await as(user);
      for (let i = 0; i < 5; i++) assert.equal(await as(user), first, user);
    }
    const listed = await admin('GET', '/admin/v1/plugins');
    assert.deepEqual(listed.json.plugins.find((p) => p.id === 'tagger-v2').canary, { of: 'tagger', percent: 25 });
    assert.equal((await put(100)).status, 200);
    await eventually(async () => (await share()) === 1, { what: 'the canary at 100%' });
    assert.equal((await admin('DELETE', '/admin/v1/plugins/tagger-v2')).status, 200);
    await eventually(async () => (await share()) === 0, { what: 'the stable version alone again' });
  });

  it('a canary of an auth plugin decides for its share; a canary naming itself is refused', async (t) => {
    const auth = (tenant) => `return { on_auth = function(req) req:authenticate("${tenant}") end }`;
    const upstream = await startMockUpstream({ t });
    const config = gatewayConfig({ providers: [openaiProvider('up', upstream.baseUrl())], models: [{ name: 'm1', provider: 'up' }] });
    config.tenants = [{ name: 'old', limits: { requests_per_minute: 1000 } }, { name: 'new', limits: { requests_per_minute: 2000 } }];
    config.plugins = [
      { id: 'who', source: auth('old') },
      { id: 'who-next', source: auth('new'), canary: { of: 'who', percent: 50, sticky_header: 'x-user' } },
    ];
    config.auth = { chains: [{ name: 'all', links: [{ type: 'plugin', id: 'who' }] }] };
    const gw = await startTahua({ t, config });
    const limits = await Promise.all(Array.from({ length: 200 }, async (_, i) =>
      (await post(gw.url, '/v1/chat/completions', chatBody('m1'), { headers: { 'x-user': `u${i}` } })).headers['x-ratelimit-limit-requests']));
    const onNew = limits.filter((l) => l === '2000').length;
    assert.equal(limits.filter((l) => l !== '1000' && l !== '2000').length, 0);
    assert.ok(onNew > 70 && onNew < 130, `50% canary: ${onNew} of 200`);
    const selfCanary = { ...config, plugins: [{ id: 'who', source: auth('old'), canary: { of: 'who', percent: 5 } }] };
    const r = checkConfig(writeConfig(selfCanary));
    assert.match(r.stderr, /plugins\[0\]\.canary\.of: a plugin cannot be its own canary/);
  });
});

describe('plugins: events cut across reads', () => {
  it('an event that arrives in two reads is rewritten whole', async (t) => {
    // An upstream that writes one chunk in two halves, a moment apart, so the gateway
    // reads them separately and the plugin must see (and replace) the joined event.
    const chunk = (content, finish = null) =>
      `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm1',
        choices: [{ index: 0, delta: { content }, finish_reason: finish }] })}\n\n`;
    const server = createServer(async (req, res) => {
      req.resume();
      await new Promise((resolve) => req.on('end', resolve));
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(chunk('hello '));
      const split = chunk('split world');
      res.write(split.slice(0, 40));
      await new Promise((resolve) => setTimeout(resolve, 50));  // forces a second read of the same event
      res.write(split.slice(40));
      res.write(chunk('', 'stop'));
      res.end('data: [DONE]\n\n');
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.after(() => server.close());
    const c = gatewayConfig({
      providers: [openaiProvider('up', `http://127.0.0.1:${server.address().port}/v1`)],
      models: [{ name: 'm1', provider: 'up' }],
    });
    c.plugins = [{
      id: 'upper',
      source: `return { on_stream_event = function(ev)
        if ev.data == "[DONE]" then return nil end
        return (ev.data:gsub('"content":"([^"]*)"', function(s) return '"content":"' .. s:upper() .. '"' end))
      end }`,
    }];
    const gw = await startTahua({ t, config: c });
    // The client asks for the usage chunk itself: the gateway then relays the upstream's
    // reads as they come (it cuts nothing out), so the plugin filter sees the half event.
    const body = chatBody('m1', { stream: true, stream_options: { include_usage: true } });
    const { events, first } = await openStream(gw.url, body);
    const data = [first.data, ...(await collectData(events))];
    assert.equal(chatText(data), 'HELLO SPLIT WORLD');
    assert.equal(data.at(-1), '[DONE]');
  });
});
