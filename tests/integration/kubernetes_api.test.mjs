// Resources from the Kubernetes API, and self-healing's scale action, against a fake API
// server (tests/integration/lib/fake_kube_api.mjs: no API server can run here, so this is
// the one mock besides the LLM providers; it speaks the real list / watch / patch wire
// format). What is proven:
// - every kind is listed before /readyz says ready; a ModelRoute applied, changed or
//   deleted in the cluster is in force within one watch event, without a file or restart;
// - a watch that ends resumes from its resourceVersion; a compacted history (410 Gone,
//   as an ERROR event or as an HTTP status) lists again and picks up what changed meanwhile;
// - the token file is read again for every call (a rotated token works at once);
// - an invalid resource is skipped and named, the others apply; the config file wins over
//   the cluster, the cluster over the state store;
// - `scale` patches the Deployment's replicas when GPU memory stays high, within min..max,
//   audited with the replicas before and after, and back down when it is undone.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider } from './lib/tahua.mjs';
import { chatBody, post, request } from './lib/http.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';
import { startFakeKubeApi } from './lib/fake_kube_api.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';

function config(upstream, api, extra = {}) {
  const c = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl())],
    models: [
      { name: 'small', provider: 'up', upstream_model: 'up-small' },
      { name: 'large', provider: 'up', upstream_model: 'up-large' },
    ],
  });
  c.access_log = { enabled: false };
  c.admin = adminSection();
  c.kubernetes = api.configSection(extra.kubernetes);
  Object.assign(c, extra.top ?? {});
  return c;
}

// Which upstream model a request for `model` reached (null: not served).
async function servedAs(gw, upstream, model) {
  const r = await post(gw.url, '/v1/chat/completions', chatBody(model));
  return r.status === 200 ? upstream.requests.at(-1).json.model : null;
}
const until = (fn, what, timeout = 10_000) => eventually(fn, { timeout, interval: 20, what });

describe('resources from the Kubernetes API', () => {
  it('lists every kind before ready, and applies, changes and deletes a ModelRoute live', async (t) => {
    const upstream = await startMockUpstream({ t });
    const api = await startFakeKubeApi();
    t.after(() => api.close());
    api.apply('modelroutes', 'auto', { match: { model: 'auto' }, target: 'small' });
    const { gw } = await startWithAdmin(t, config(upstream, api));

    await until(async () => (await request(gw.url, '/readyz')).status === 200, '/readyz 200');
    for (const plural of ['modelroutes', 'ratelimitpolicies', 'prompttemplates', 'plugins', 'guardrailpolicies'])
      assert.ok(api.requests.some((r) => r.method === 'GET' && r.path.endsWith(`/namespaces/tahua/${plural}`) && r.query === ''),
        `${plural} listed`);
    assert.ok(api.requests.every((r) => r.authorized), 'every call carries the token');
    assert.equal(await servedAs(gw, upstream, 'auto'), 'up-small', 'the listed route is in force once ready');

    // Watches are open from the list's version; a change is one event away.
    await until(() => api.openWatches() === 5, 'five watches');
    api.apply('modelroutes', 'auto', { match: { model: 'auto' }, target: 'large' });
    await until(async () => (await servedAs(gw, upstream, 'auto')) === 'up-large', 'the modified route');
    api.apply('modelroutes', 'extra', { match: { model: 'extra' }, target: 'small' });
    await until(async () => (await servedAs(gw, upstream, 'extra')) === 'up-small', 'the added route');
    api.remove('modelroutes', 'auto');
    await until(async () => (await servedAs(gw, upstream, 'auto')) === null, 'the deleted route gone');

    // A RateLimitPolicy from the cluster applies too.
    api.apply('ratelimitpolicies', 'small-cap', { match: { model: 'small' }, per: 'all', requests_per_minute: 1 });
    await until(async () => (await post(gw.url, '/v1/chat/completions', chatBody('small'))).status === 429, 'the policy in force');

    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_kubernetes_resources_listed'), 1);
    assert.equal(sum(m, 'tahua_kubernetes_resources'), 2, 'the route "extra" and the policy');
    assert.ok(sum(m, 'tahua_kubernetes_watch_events_total') >= 4);
  });

  it('resumes a watch from its version, lists again after 410 Gone, and reads a rotated token', async (t) => {
    const upstream = await startMockUpstream({ t });
    const api = await startFakeKubeApi();
    t.after(() => api.close());
    api.apply('modelroutes', 'auto', { match: { model: 'auto' }, target: 'small' });
    const { gw } = await startWithAdmin(t, config(upstream, api));
    await until(() => api.openWatches() === 5, 'five watches');
    const lists = () => api.requests.filter((r) => r.path.endsWith('/modelroutes') && r.query === '').length;
    const watchesFrom = () => api.requests.filter((r) => r.path.endsWith('/modelroutes') && r.query.includes('watch=1'));
    assert.equal(lists(), 1);

    // The watch ends (its timeoutSeconds, or an API server restart): resumed from the
    // version it had, with no new list, and what changed meanwhile arrives.
    api.bookmark();
    api.endWatches();
    api.apply('modelroutes', 'auto', { match: { model: 'auto' }, target: 'large' });
    await until(async () => (await servedAs(gw, upstream, 'auto')) === 'up-large', 'the change made while no watch was open');
    assert.equal(lists(), 1, 'resumed, not listed again');
    assert.match(watchesFrom().at(-1).query, new RegExp(`resourceVersion=${api.version - 1}\\b`), 'resumed from the bookmark');

    // The history is compacted while no watch is open: 410 Gone as an ERROR event → a new list.
    api.endWatches();
    api.compact();
    api.apply('modelroutes', 'auto', { match: { model: 'auto' }, target: 'small' });
    api.compact();
    await until(async () => (await servedAs(gw, upstream, 'auto')) === 'up-small', 'the change after 410 Gone');
    assert.equal(lists(), 2, 'listed again once');

    // The same as an HTTP 410.
    api.gone = 'status';
    api.endWatches();
    api.apply('modelroutes', 'auto', { match: { model: 'auto' }, target: 'large' });
    api.compact();
    await until(async () => (await servedAs(gw, upstream, 'auto')) === 'up-large', 'the change after an HTTP 410');
    assert.equal(lists(), 3);

    // The token rotates (a projected service-account token): the next call reads the new one.
    await until(() => api.openWatches() === 5, 'five watches again');
    api.rotateToken('token-2');
    api.endWatches();
    await until(() => api.openWatches() === 5, 'watches with the new token');
    const since = api.requests.length;
    api.apply('modelroutes', 'auto', { match: { model: 'auto' }, target: 'small' });
    await until(async () => (await servedAs(gw, upstream, 'auto')) === 'up-small', 'a change after the rotation');
    assert.ok(api.requests.slice(since).every((r) => r.authorized), 'no call with the old token after the rotation');
    const m = await scrape(gw.url);
    assert.ok(sum(m, 'tahua_kubernetes_lists_total') >= 5 + 2, 'the relists counted');
  });

  it('skips an invalid resource naming it, the file wins over the cluster, the cluster over the store', async (t) => {
    const upstream = await startMockUpstream({ t });
    const api = await startFakeKubeApi();
    t.after(() => api.close());
    api.apply('modelroutes', 'bad', { match: { model: 'bad' }, target: 'nosuch' });
    api.apply('modelroutes', 'good', { match: { model: 'good' }, target: 'large' });
    api.apply('modelroutes', 'filed', { match: { model: 'filed' }, target: 'large' });
    api.apply('modelroutes', 'shared', { match: { model: 'shared' }, target: 'large' });
    const c = config(upstream, api, { top: { routes: [{ name: 'filed', match: { model: 'filed' }, target: 'small' }] } });
    const { gw, admin } = await startWithAdmin(t, c);
    await until(async () => (await request(gw.url, '/readyz')).status === 200, '/readyz 200');
    assert.equal(await servedAs(gw, upstream, 'good'), 'up-large', 'the valid one applies');
    assert.equal(await servedAs(gw, upstream, 'bad'), null);
    assert.equal(await servedAs(gw, upstream, 'filed'), 'up-small', 'the file wins');
    const logged = await gw.stderr.waitUntil(
      () => gw.stderr.json().find((l) => l.resource === 'ModelRoute/bad'), 5000, 'the invalid resource logged');
    assert.match(logged.error, /kubernetes ModelRoute\/bad.*target.*nosuch/);
    assert.ok(gw.stderr.json().some((l) => /kubernetes ModelRoute\/filed is not applied: the config file declares/.test(l.msg)));

    // A store resource of the same Kind/name as a cluster one is not applied.
    const put = await admin('PUT', '/admin/v1/resources/ModelRoute/shared', { json: { match: { model: 'shared' }, target: 'small' } });
    assert.equal(put.status, 200, put.text);
    await gw.stderr.waitUntil(() => gw.stderr.json().some((l) => /store resource ModelRoute\/shared is not applied: a Kubernetes resource/.test(l.msg)),
      5000, 'the shadowed store resource logged');
    assert.equal(await servedAs(gw, upstream, 'shared'), 'up-large', 'the cluster wins over the store');
  });

  it('is not ready while the API refuses the token, and becomes ready once it is right', async (t) => {
    const upstream = await startMockUpstream({ t });
    const api = await startFakeKubeApi();
    t.after(() => api.close());
    api.rotateToken('token-1');
    api.token = 'another'; // the server expects a token the file does not hold
    const { gw } = await startWithAdmin(t, config(upstream, api));
    await until(() => api.requests.filter((r) => !r.authorized).length >= 5, 'refused lists');
    const r = await request(gw.url, '/readyz');
    assert.equal(r.status, 503);
    assert.equal(r.json.kubernetes_resources, 'not_listed');
    await gw.stderr.waitUntil(() => gw.stderr.json().find((l) => /kubernetes: GET .*: 401/.test(l.msg)), 5000, 'the refusal logged');
    assert.doesNotMatch(gw.output(), /token-1/, 'the token is never logged');
    api.rotateToken('another');
    await until(async () => (await request(gw.url, '/readyz')).status === 200, '/readyz 200 once the token is right', 15_000);
  });
});

describe('self-healing scale action', () => {
  it('scales the Deployment up when GPU memory stays high, audits it, and back down when it is undone', async (t) => {
    const upstream = await startMockUpstream({ t });
    const api = await startFakeKubeApi();
    t.after(() => api.close());
    api.deployments.set('vllm-llama', 1);
    const audit = join(makeTempDir(), 'healing.jsonl');
    const c = gatewayConfig({
      providers: [openaiProvider('up', upstream.baseUrl())],
      models: [{ name: 'llama', deployments: [{ id: 'pod-a', provider: 'up', node: 'gpu-a' }] }],
    });
    c.access_log = { enabled: false };
    c.admin = adminSection();
    c.kubernetes = api.configSection({ resources: false });
    c.healing = {
      interval: '100ms',
      audit_log: audit,
      rules: [{
        name: 'scale-on-memory',
        model: 'llama',
        when: { metric: 'gpu_memory', above: 90, for: '300ms' },
        action: 'scale',
        scale: { deployment: 'vllm-llama', replicas: 3, min: 1, max: 5, cooldown: '1s' },
        restore_after: '300ms',
      }],
    };
    const { gw, admin } = await startWithAdmin(t, c);
    const report = (gpu_memory) => admin('PUT', '/admin/v1/nodes/gpu-a/status', { json: { state: 'HEALTHY', gpu_util: 0.5, gpu_memory } });

    assert.equal((await report(0.95)).status, 200);
    const up = await until(async () => {
      const h = (await admin('GET', '/admin/v1/healing')).json;
      return h.audit.find((r) => r.action === 'scale');
    }, 'the scale audit record');
    assert.equal(up.rule, 'scale-on-memory');
    assert.equal(up.metric, 'gpu_memory');
    assert.ok(up.value > 90, `value ${up.value}`);
    assert.equal(up.kubernetes_deployment, 'vllm-llama');
    assert.deepEqual([up.replicas_from, up.replicas_to], [1, 3]);
    assert.equal(api.deployments.get('vllm-llama'), 3);
    assert.deepEqual(api.patches, [{ name: 'vllm-llama', body: { spec: { replicas: 3 } } }]);

    // Memory goes down: undone after restore_after and the cool-down, back to 1.
    assert.equal((await report(0.4)).status, 200);
    const down = await until(async () => {
      const h = (await admin('GET', '/admin/v1/healing')).json;
      return h.audit.find((r) => r.action === 'restore');
    }, 'the restore audit record');
    assert.equal(down.undoes, 'scale');
    assert.deepEqual([down.replicas_from, down.replicas_to], [3, 1]);
    assert.equal(api.deployments.get('vllm-llama'), 1);
    assert.equal(api.patches.length, 2);
    // The cool-down: the two patches are at least 1 s apart.
    assert.ok(Date.parse(down.ts) - Date.parse(up.ts) >= 1000, `${up.ts} → ${down.ts}`);
    const lines = readFileSync(audit, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((l) => l.action), ['scale', 'restore']);

    // A Deployment the API does not know: the action is audited with the error.
    api.deployments.delete('vllm-llama');
    assert.equal((await report(0.97)).status, 200);
    const failed = await until(async () => {
      const h = (await admin('GET', '/admin/v1/healing')).json;
      return h.audit.filter((r) => r.action === 'scale')[1];
    }, 'the failed scale audit record');
    assert.match(failed.error, /404/);
  });
});

describe('ModelRoute policyRef', () => {
  it('limits the requests the route chose with the RateLimitPolicy it names, and not the others', async (t) => {
    const upstream = await startMockUpstream({ t });
    const api = await startFakeKubeApi();
    t.after(() => api.close());
    api.apply('ratelimitpolicies', 'cheap-cap', { per: 'all', requests_per_minute: 2 });
    api.apply('modelroutes', 'cheap', { match: { model: 'cheap' }, target: 'small', policyRef: 'cheap-cap' });
    api.apply('modelroutes', 'broken', { match: { model: 'broken' }, target: 'small', policyRef: 'nosuch' });
    const { gw } = await startWithAdmin(t, config(upstream, api));
    await until(async () => (await request(gw.url, '/readyz')).status === 200, '/readyz 200');
    const status = async (model) => (await post(gw.url, '/v1/chat/completions', chatBody(model))).status;
    assert.deepEqual([await status('cheap'), await status('cheap'), await status('cheap')], [200, 200, 429]);
    // The same model asked for by name did not go through the route: not limited.
    assert.deepEqual([await status('small'), await status('small'), await status('small')], [200, 200, 200]);
    // A route naming no policy is not applied (never unlimited by mistake), and says why.
    assert.equal(await status('broken'), 404);
    const logged = gw.stderr.json().find((l) => l.resource === 'ModelRoute/broken');
    assert.match(logged.error, /ModelRoute\/broken\.spec\.policyRef: unknown RateLimitPolicy "nosuch"/);
  });
});
