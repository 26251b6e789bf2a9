// Declarative routes through the real binary: a virtual model name ("auto") routed by
// prompt length and tools (cost-aware), header routing, glob routing, `override` on a
// configured model, the 404 for an unrouted unknown model, and `--check-config`
// diagnostics (file:line:col and the field path) for a bad route. The chosen deployment
// is read from X-Tahua-Deployment, the answer's `model` (the mock echoes the deployment's
// upstream_model) and the access log's `route_name`.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { checkConfig, gatewayConfig, startTahua, writeConfig } from './lib/tahua.mjs';
import { chatBody, collectData, expectError, openStream, post } from './lib/http.mjs';
import { toYaml } from './lib/yaml.mjs';

const mockProvider = { name: 'mock', type: 'mock' };

/** A model with one mock deployment `<id>` whose upstream model is `<id>-up`. */
const model = (name, id) => ({ name, deployments: [{ id, provider: 'mock', upstream_model: `${id}-up` }] });

const MODELS = [
  model('cheap', 'cheap-d'),
  model('big', 'big-d'),
  model('agent', 'agent-d'),
  model('search-model', 'search-d'),
  model('claude-pool', 'claude-d'),
  model('gpt-4o-mini', 'mini-d'), // a configured name clients may ask for directly
  model('premium', 'premium-d'),
];

const ROUTES = [
  { name: 'search-team', match: { headers: { 'X-Team': 'search' } }, target: 'search-model' },
  { name: 'claude-glob', match: { model: 'claude-*' }, target: 'claude-pool' },
  { name: 'auto-tools', match: { model: 'auto' }, when: { has_tools: true }, target: 'agent' },
  { name: 'auto-short', match: { model: 'auto' }, when: { max_prompt_tokens: 200 }, target: 'cheap' },
  { name: 'auto-long', match: { model: 'auto' }, when: { min_prompt_tokens: 201 }, target: 'big' },
  {
    name: 'force-premium',
    match: { model: 'gpt-4o-mini', headers: { 'x-plan': 'premium' } },
    override: true,
    target: 'premium',
  },
  { name: 'gold-query', match: { query: { tier: 'gold' }, path: '/v1/chat/completions' }, target: 'premium' },
];

const LONG = 'The quick brown fox jumps over the lazy dog. '.repeat(200); // ~2000 tokens
const TOOLS = [
  {
    type: 'function',
    function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
  },
];

describe('declarative routes', () => {
  let gw;
  before(async () => {
    const config = { ...gatewayConfig({ server: { deployment_header: true }, providers: [mockProvider], models: MODELS }), routes: ROUTES };
    gw = await startTahua({ config });
  });
  after(() => gw?.kill());

  /** POSTs `body` and returns the result plus the access log line of that request. */
  async function call(body, { path = '/v1/chat/completions', headers = {}, query = '' } = {}) {
    const res = await post(gw.url, `${path}${query}`, body, { headers });
    const id = res.headers['x-request-id'];
    assert.ok(id, `x-request-id on the answer: ${res.status} ${res.text}`);
    const [log] = await gw.waitForAccessLog((l) => l.request_id === id);
    return { ...res, deployment: res.headers['x-tahua-deployment'], log };
  }

  /** Asserts a 200 from deployment `id` of model `modelName`, chosen by route `route`. */
  function expectRouted(r, { id, modelName, route }) {
    assert.equal(r.status, 200, `status; body: ${r.text}`);
    assert.equal(r.deployment, id, 'X-Tahua-Deployment');
    if (r.json?.model !== undefined) assert.equal(r.json.model, `${id}-up`, 'the answer names the upstream model');
    assert.equal(r.log.model, modelName, 'access log model');
    assert.equal(r.log.deployment, id, 'access log deployment');
    if (route === undefined) assert.equal(r.log.route_name, undefined, 'no route_name in the access log');
    else assert.equal(r.log.route_name, route, 'access log route_name');
  }

  it('"auto" with a short prompt goes to the cheap model', async () => {
    const r = await call(chatBody('auto', { content: 'hi' }));
    expectRouted(r, { id: 'cheap-d', modelName: 'cheap', route: 'auto-short' });
  });

  it('"auto" with a long prompt goes to the big model', async () => {
    const r = await call(chatBody('auto', { content: LONG }));
    expectRouted(r, { id: 'big-d', modelName: 'big', route: 'auto-long' });
  });

  it('"auto" with tools goes to the agent model, whatever the prompt length', async () => {
    expectRouted(await call(chatBody('auto', { content: 'hi', tools: TOOLS })), {
      id: 'agent-d',
      modelName: 'agent',
      route: 'auto-tools',
    });
    expectRouted(await call(chatBody('auto', { content: LONG, tools: TOOLS })), {
      id: 'agent-d',
      modelName: 'agent',
      route: 'auto-tools',
    });
    // An empty tools list is no tools.
    expectRouted(await call(chatBody('auto', { content: 'hi', tools: [] })), {
      id: 'cheap-d',
      modelName: 'cheap',
      route: 'auto-short',
    });
  });

  it('"auto" on /v1/messages counts the system prompt (Anthropic estimate)', async () => {
    const body = (system) => ({ model: 'auto', max_tokens: 32, system, messages: [{ role: 'user', content: 'hi' }] });
    const short = await call(body('Be brief.'), { path: '/v1/messages' });
    assert.equal(short.status, 200, short.text);
    assert.equal(short.deployment, 'cheap-d');
    assert.equal(short.log.route_name, 'auto-short');
    const long = await call(body(LONG), { path: '/v1/messages' });
    assert.equal(long.status, 200, long.text);
    assert.equal(long.deployment, 'big-d');
    assert.equal(long.log.route_name, 'auto-long');
  });

  it('a streamed "auto" request is routed the same way', async () => {
    const { res, events, first } = await openStream(gw.url, chatBody('auto', { stream: true, content: LONG }));
    assert.equal(res.headers.get('x-tahua-deployment'), 'big-d');
    assert.equal(JSON.parse(first.data).model, 'big-d-up');
    const data = await collectData(events);
    assert.equal(data.at(-1), '[DONE]');
    const id = res.headers.get('x-request-id');
    const [log] = await gw.waitForAccessLog((l) => l.request_id === id);
    assert.equal(log.route_name, 'auto-long');
    assert.equal(log.stream, true);
  });

  it('header routing: x-team: search goes to the search model (name case-insensitive, value exact)', async () => {
    const r = await call(chatBody('auto'), { headers: { 'x-team': 'search' } });
    expectRouted(r, { id: 'search-d', modelName: 'search-model', route: 'search-team' });
    // Another value does not match: the cost routes apply.
    const other = await call(chatBody('auto'), { headers: { 'x-team': 'Search' } });
    expectRouted(other, { id: 'cheap-d', modelName: 'cheap', route: 'auto-short' });
    // Unknown model names are routed by header too (the route has no model matcher).
    const unknown = await call(chatBody('my-app-model'), { headers: { 'X-TEAM': 'search' } });
    expectRouted(unknown, { id: 'search-d', modelName: 'search-model', route: 'search-team' });
  });

  it('glob routing: claude-* goes to the claude pool, on both APIs', async () => {
    const r = await call(chatBody('claude-3-5-sonnet-latest'));
    expectRouted(r, { id: 'claude-d', modelName: 'claude-pool', route: 'claude-glob' });
    const m = await call(
      { model: 'claude-opus-4', max_tokens: 32, messages: [{ role: 'user', content: 'hi' }] },
      { path: '/v1/messages' },
    );
    assert.equal(m.status, 200, m.text);
    assert.equal(m.deployment, 'claude-d');
    assert.equal(m.log.route_name, 'claude-glob');
    // The first route (header) comes before the glob.
    const first = await call(chatBody('claude-3-haiku'), { headers: { 'x-team': 'search' } });
    expectRouted(first, { id: 'search-d', modelName: 'search-model', route: 'search-team' });
  });

  it('a configured model name is served directly; an override route re-routes it', async () => {
    // Without override the client's explicit choice wins, even when a header route matches.
    const direct = await call(chatBody('gpt-4o-mini'), { headers: { 'x-team': 'search' } });
    expectRouted(direct, { id: 'mini-d', modelName: 'gpt-4o-mini', route: undefined });
    // With override: true the matching route applies.
    const forced = await call(chatBody('gpt-4o-mini'), { headers: { 'x-plan': 'premium' } });
    expectRouted(forced, { id: 'premium-d', modelName: 'premium', route: 'force-premium' });
    // The override route's other matchers still have to match.
    const plain = await call(chatBody('gpt-4o-mini'), { headers: { 'x-plan': 'basic' } });
    expectRouted(plain, { id: 'mini-d', modelName: 'gpt-4o-mini', route: undefined });
  });

  it('query and path matchers', async () => {
    const gold = await call(chatBody('some-model'), { query: '?tier=gold' });
    expectRouted(gold, { id: 'premium-d', modelName: 'premium', route: 'gold-query' });
    const silver = await call(chatBody('some-model'), { query: '?tier=silver' });
    expectError(silver, 404, 'model_not_found');
    // The route is for /v1/chat/completions only.
    const completions = await call({ model: 'some-model', prompt: 'hi' }, { path: '/v1/completions', query: '?tier=gold' });
    expectError(completions, 404, 'model_not_found');
  });

  it('an unknown model no route matches is a 404 model_not_found', async () => {
    const r = await call(chatBody('llama-3-70b'));
    expectError(r, 404, 'model_not_found');
    assert.match(r.json.error.message, /llama-3-70b/);
    assert.equal(r.log.status, 404);
    assert.equal(r.log.route_name, undefined);
  });
});

describe('--check-config rejects bad routes', () => {
  const base = {
    listeners: [{ address: '127.0.0.1', port: 0 }],
    providers: [mockProvider],
    models: [model('cheap', 'cheap-d'), model('big', 'big-d')],
  };

  /**
   * Writes `base` plus `routes`, runs --check-config, and asserts exit 1 with
   * `FILE:LINE:COL: FIELD: ...MESSAGE` where LINE is the last line holding `needle`.
   */
  function expectRejected(routes, { needle, field, message }) {
    const text = toYaml({ ...base, routes });
    const file = writeConfig(text);
    const line = text.split('\n').findLastIndex((l) => l.includes(needle)) + 1;
    assert.ok(line > 0, `"${needle}" is in the file:\n${text}`);
    const r = checkConfig(file);
    assert.equal(r.status, 1, `exit status; stderr: ${r.stderr}`);
    const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    assert.match(r.stderr, new RegExp(`${esc(file)}:${line}:\\d+: ${esc(field)}: `), `file:line:col: field in:\n${r.stderr}\n${text}`);
    if (message) assert.match(r.stderr, message);
    assert.doesNotMatch(r.stderr, /\(yaml\)|terminate called|std::/);
  }

  it('accepts the valid routes', () => {
    const file = writeConfig(
      toYaml({ ...base, routes: [{ name: 'a', match: { model: 'auto' }, when: { hours: '22:00-06:00' }, target: 'cheap' }] }),
    );
    const r = checkConfig(file);
    assert.equal(r.status, 0, r.stderr);
  });

  it('an unknown target', () => {
    expectRejected([{ name: 'ok', target: 'cheap' }, { name: 'bad', match: { model: 'auto' }, target: 'no-such-model' }], {
      needle: 'no-such-model',
      field: 'routes[1].target',
      message: /unknown model "no-such-model"/,
    });
  });

  it('a configured model without override', () => {
    expectRejected([{ name: 'bad', match: { model: 'big' }, target: 'cheap' }], {
      needle: 'model: "big"',
      field: 'routes[0].match.model',
      message: /"big" is a configured model.*add override: true to the route to send its requests to "cheap"/,
    });
  });

  it('bad hours', () => {
    expectRejected([{ name: 'bad', when: { hours: '25:00-26:00' }, target: 'cheap' }], {
      needle: 'hours:',
      field: 'routes[0].when.hours',
      message: /HH:MM-HH:MM/,
    });
  });

  it('a path without a leading slash', () => {
    expectRejected([{ name: 'bad', match: { path: 'v1/chat/completions' }, target: 'cheap' }], {
      needle: 'path:',
      field: 'routes[0].match.path',
      message: /must start with \//,
    });
  });

  it('duplicate route names', () => {
    expectRejected(
      [
        { name: 'same', target: 'cheap' },
        { name: 'same', target: 'big' },
      ],
      { needle: 'name: "same"', field: 'routes[1].name', message: /duplicate route name "same"/ },
    );
  });

  // Gateway bug (kept failing): a route without `name` gets "route-N"; when that collides
  // with an explicit name the loader reports it on the absent `name` node, and yaml-cpp's
  // "invalid node" exception escapes instead: "FILE: (yaml): invalid node; first invalid
  // key: "name"" (no line, no field, a misleading message).
  it('a default route name colliding with an explicit one', () => {
    expectRejected([{ name: 'route-1', target: 'cheap' }, { target: 'big' }], {
      needle: 'target: "big"',
      field: 'routes[1].name',
      message: /duplicate route name "route-1"/,
    });
  });

  // Gateway bug (kept failing): sscanf's %2d reads "-1", so negative hours pass validation.
  // "-1:00-08:00" gives from_minute = -60, which the router reads as "no hours condition":
  // the route applies around the clock. "08:00--1:00" gives to_minute = -60 (08:00 to midnight).
  for (const hours of ['-1:00-08:00', '08:00--1:00']) {
    it(`negative hours "${hours}"`, () => {
      expectRejected([{ name: 'bad', when: { hours }, target: 'cheap' }], {
        needle: 'hours:',
        field: 'routes[0].when.hours',
        message: /HH:MM-HH:MM/,
      });
    });
  }

  it('a typo in a route field', () => {
    expectRejected([{ name: 'bad', wehn: { has_tools: true }, target: 'cheap' }], {
      needle: 'wehn',
      field: 'routes[0].wehn',
      message: /unknown field/,
    });
  });
});
