// Per-deployment circuit breaker (settings from the provider): opens on a failure rate,
// takes its deployment out of selection, fails fast with 503 circuit_open when no other
// deployment is left (nothing sent upstream), half-opens after open_for, closes on good
// probes.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gatewayWithUpstream, MODEL } from './lib/fixtures.mjs';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { gatewayConfig, openaiProvider } from './lib/tahua.mjs';
import { chatBody, post, request } from './lib/http.mjs';
import { eventually } from './lib/util.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';

describe('circuit breaker', () => {
  it('opens after failures, fails fast, half-opens and closes again', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({
      t,
      provider: { circuit_breaker: { window: 4, min_calls: 4, failure_rate: 50, open_for: '300ms', half_open_probes: 1 } },
    });
    for (let i = 0; i < 4; i++) upstream.next({ mode: 'error', status: 500 });
    for (let i = 0; i < 4; i++) assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 500);

    const fast = await post(gw.url, '/v1/chat/completions', chatBody(MODEL));
    assert.equal(fast.status, 503);
    assert.equal(fast.json.error.code, 'circuit_open');
    assert.ok(Number(fast.headers['retry-after']) >= 1);
    assert.equal(upstream.requests.length, 4, 'an open breaker sends nothing upstream');

    // After open_for the next call is a probe; the upstream is healthy again, so it
    // succeeds and closes the breaker.
    await eventually(async () => (await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status === 200, {
      timeout: 5000,
      interval: 50,
      what: 'a successful half-open probe',
    });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 200);
    const metrics = (await request(gw.url, '/metrics')).text;
    for (const to of ['open', 'half_open', 'closed'])
      assert.match(metrics, new RegExp(`^tahua_circuit_breaker_transitions_total\\{provider="up",deployment="up",to="${to}"\\} 1$`, 'm'));
    assert.ok(gw.stderr.json().some((l) => l.msg === 'circuit breaker' && l.to === 'open'), 'the transition is logged');
  });

  it('readiness that requires a model: 503 while its only deployment is out (breaker open), with each model\'s state', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({
      t,
      server: { readiness: { require_models: [MODEL] } },
      provider: { circuit_breaker: { window: 2, min_calls: 2, failure_rate: 100, open_for: '400ms', half_open_probes: 1 } },
    });
    const ready = await request(gw.url, '/readyz');
    assert.equal(ready.status, 200);
    assert.deepEqual(ready.json, { status: 'ready', models: { [MODEL]: 'ok' } });
    for (let i = 0; i < 2; i++) upstream.next({ mode: 'error', status: 500 });
    for (let i = 0; i < 2; i++) assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 500);
    const out = await request(gw.url, '/readyz');
    assert.equal(out.status, 503);
    assert.deepEqual(out.json, { status: 'not_ready', models: { [MODEL]: 'no_usable_deployment' } });
    // Once open_for passed the deployment may be tried again: ready.
    await eventually(async () => (await request(gw.url, '/readyz')).status === 200, { timeout: 5000, what: 'ready again' });
    // Without require_models the same outage keeps the replica ready (the default:
    // one upstream's outage must not take every replica out of the Service at once).
    const plain = await gatewayWithUpstream({
      t,
      provider: { circuit_breaker: { window: 2, min_calls: 2, failure_rate: 100, open_for: '10s', half_open_probes: 1 } },
    });
    for (let i = 0; i < 2; i++) plain.upstream.next({ mode: 'error', status: 500 });
    for (let i = 0; i < 2; i++) await post(plain.gw.url, '/v1/chat/completions', chatBody(MODEL));
    assert.equal((await post(plain.gw.url, '/v1/chat/completions', chatBody(MODEL))).json.error.code, 'circuit_open');
    const still = await request(plain.gw.url, '/readyz');
    assert.equal(still.status, 200);
    assert.deepEqual(still.json, { status: 'ready' });
  });

  it('a failed probe opens the breaker again', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({
      t,
      provider: { circuit_breaker: { window: 2, min_calls: 2, failure_rate: 100, open_for: '200ms', half_open_probes: 1 } },
    });
    for (let i = 0; i < 3; i++) upstream.next({ mode: 'error', status: 502 });
    for (let i = 0; i < 2; i++) assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 502);
    // Wait for the probe: the first answer that is not circuit_open is the probe's (a 502).
    const probe = await eventually(
      async () => {
        const r = await post(gw.url, '/v1/chat/completions', chatBody(MODEL));
        return r.json?.error?.code !== 'circuit_open' && r;
      },
      { timeout: 5000, interval: 40, what: 'the half-open probe' },
    );
    assert.equal(probe.status, 502);
    const after = await post(gw.url, '/v1/chat/completions', chatBody(MODEL));
    assert.equal(after.json.error.code, 'circuit_open', 'open again after the failed probe');
    assert.equal(upstream.requests.length, 3);
  });

  it('an open breaker takes its deployment out of selection; the others keep serving', async (t) => {
    const bad = await startMockUpstream({ t });
    const config = gatewayConfig({
      server: { deployment_header: true },
      providers: [
        openaiProvider('bad', bad.baseUrl(), {
          circuit_breaker: { window: 4, min_calls: 4, failure_rate: 50, open_for: '30s', half_open_probes: 1 },
        }),
        { name: 'good', type: 'mock' },
      ],
      models: [
        {
          name: 'chat',
          balancing: 'round_robin',
          deployments: [
            { id: 'a', provider: 'bad', upstream_model: 'x' },
            { id: 'b', provider: 'good', upstream_model: 'y' },
          ],
        },
      ],
    });
    config.admin = adminSection();
    const { gw, admin } = await startWithAdmin(t, config);
    for (let i = 0; i < 10; i++) bad.next({ mode: 'error', status: 500 });
    // Round robin alternates a, b: four failures on a open its breaker.
    let failures = 0;
    for (let i = 0; i < 8 && failures < 4; i++) {
      const res = await post(gw.url, '/v1/chat/completions', chatBody('chat'));
      if (res.status === 500) failures += 1;
    }
    assert.equal(failures, 4);
    await eventually(() => gw.stderr.json().some((l) => l.msg === 'circuit breaker' && l.to === 'open' && l.deployment === 'a'), {
      timeout: 5000,
      what: 'the breaker of deployment a to open',
    });
    const seen = bad.requests.length;
    for (let i = 0; i < 10; i++) {
      const res = await post(gw.url, '/v1/chat/completions', chatBody('chat'));
      assert.equal(res.status, 200, 'no 503: the open deployment is skipped');
      assert.equal(res.headers['x-tahua-deployment'], 'b');
    }
    assert.equal(bad.requests.length, seen, 'nothing more reached the open deployment');
    const metrics = (await request(gw.url, '/metrics')).text;
    assert.match(metrics, /^tahua_circuit_breaker_transitions_total\{provider="bad",deployment="a",to="open"\} 1$/m);
    // The admin view shows the breaker per deployment (null where none is configured).
    const view = (await admin('GET', '/admin/v1/deployments')).json;
    const [a, b] = view.models.find((m) => m.name === 'chat').deployments;
    assert.deepEqual(a.breaker, { state: 'open', workers: { closed: 0, open: 1, half_open: 0 } });
    assert.equal(b.breaker, null);
    assert.match(metrics, /^tahua_circuit_breaker_state\{provider="bad",deployment="a",state="open"\} 1$/m);
    assert.match(metrics, /^tahua_circuit_breaker_state\{provider="bad",deployment="a",state="closed"\} 0$/m);
  });

  it('a time-based window judges only the calls of the last window_duration', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({
      t,
      provider: { circuit_breaker: { window_duration: '1s', min_calls: 2, failure_rate: 100, open_for: '30s' } },
    });
    upstream.defaultBehaviour = { mode: 'error', status: 500 };
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 500);
    // The window's length is what is tested: let the first failure age out of it.
    await new Promise((resolve) => setTimeout(resolve, 1300));
    // One failure in the window: fewer than min_calls, still closed (a count window of 2
    // would open here).
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 500);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody(MODEL))).status, 500, 'two in the window: opens now');
    const fast = await post(gw.url, '/v1/chat/completions', chatBody(MODEL));
    assert.equal(fast.json.error.code, 'circuit_open');
    assert.equal(upstream.requests.length, 3);
  });
});
