// Self-healing rules through the real binary: a deployment whose error rate crosses the
// rule's threshold for its duration is ejected (the audit record, the metrics and the
// admin view say so, and traffic goes to the healthy deployment), and is restored after
// restore_after, with a second audit record; both records are in the audit_log file.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gatewayConfig, openaiProvider } from './lib/tahua.mjs';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { chatBody, post } from './lib/http.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { eventually, makeTempDir } from './lib/util.mjs';
import { adminSection, startWithAdmin } from './lib/admin.mjs';

describe('self-healing', () => {
  it('ejects a failing deployment, audits it, and restores it when restore_after passed', async (t) => {
    const upA = await startMockUpstream({ t });
    const upB = await startMockUpstream({ t });
    const auditFile = join(makeTempDir(), 'healing-audit.jsonl');
    const config = gatewayConfig({
      server: { deployment_header: true },
      providers: [openaiProvider('up-a', upA.baseUrl()), openaiProvider('up-b', upB.baseUrl())],
      models: [
        {
          name: 'm',
          outlier: { consecutive_failures: 0 }, // only the rule ejects here
          deployments: [
            { id: 'a', provider: 'up-a' },
            { id: 'b', provider: 'up-b' },
          ],
        },
      ],
    });
    config.admin = adminSection();
    config.healing = {
      interval: '100ms',
      audit_log: auditFile,
      rules: [
        {
          name: 'eject-failing',
          model: 'm',
          deployment: '*',
          when: { metric: 'error_rate', above: 50, for: '200ms', min_requests: 3 },
          action: 'eject',
          restore_after: '600ms',
        },
      ],
    };
    const { gw, admin } = await startWithAdmin(t, config);
    const healing = async () => (await admin('GET', '/admin/v1/healing')).json;

    // Deployment a answers every request with a 500.
    upA.defaultBehaviour = { mode: 'error', status: 500 };
    const eject = await eventually(
      async () => {
        for (let i = 0; i < 10; i += 1) await post(gw.url, '/v1/chat/completions', chatBody('m'));
        return (await healing()).audit.find((r) => r.action === 'eject');
      },
      { timeout: 10_000, interval: 50, what: 'the eject audit record' },
    );
    assert.equal(eject.rule, 'eject-failing');
    assert.equal(eject.model, 'm');
    assert.equal(eject.deployment, 'a');
    assert.equal(eject.metric, 'error_rate');
    assert.ok(eject.value > 50, `error rate ${eject.value}`);
    assert.equal(eject.threshold, 50);
    assert.match(eject.ts, /^\d{4}-\d\d-\d\dT/);
    const view = await healing();
    assert.deepEqual(
      view.targets.map((x) => [x.deployment, x.active]),
      [['a', true], ['b', false]],
    );
    let metrics = await scrape(gw.url);
    assert.equal(sum(metrics, 'tahua_healing_actions_total', { rule: 'eject-failing', action: 'eject' }), 1);
    assert.equal(sum(metrics, 'tahua_healing_active', { deployment: 'a' }), 1);
    // The deployments' view and their state metric say it is out, and why (not "active"
    // with a weight of 0).
    const deployments = async () => (await admin('GET', '/admin/v1/deployments')).json.models.find((m) => m.name === 'm').deployments;
    const [outA, inB] = await deployments();
    assert.deepEqual([outA.id, outA.state, outA.ejected, outA.ejected_by], ['a', 'ejected', true, 'self_healing']);
    assert.deepEqual([inB.id, inB.state, inB.ejected, inB.ejected_by], ['b', 'active', false, undefined]);
    assert.equal(sum(metrics, 'tahua_deployment_state', { deployment: 'a', state: 'ejected' }), 1);
    assert.equal(sum(metrics, 'tahua_deployment_state', { deployment: 'b', state: 'active' }), 1);

    // While a is out, every request is served by b.
    const seen = new Set();
    for (let i = 0; i < 20; i += 1) {
      const res = await post(gw.url, '/v1/chat/completions', chatBody('m'));
      assert.equal(res.status, 200);
      seen.add(res.headers['x-tahua-deployment']);
    }
    assert.deepEqual([...seen], ['b']);

    // a recovers; restore_after later the rule gives it back its traffic.
    upA.defaultBehaviour = undefined;
    const restore = await eventually(async () => (await healing()).audit.find((r) => r.action === 'restore'), {
      timeout: 10_000,
      interval: 50,
      what: 'the restore audit record',
    });
    assert.equal(restore.deployment, 'a');
    assert.equal(restore.undoes, 'eject');
    await eventually(
      async () => {
        const res = await post(gw.url, '/v1/chat/completions', chatBody('m'));
        assert.equal(res.status, 200);
        return res.headers['x-tahua-deployment'] === 'a';
      },
      { timeout: 5000, interval: 10, what: 'deployment a serving again' },
    );
    metrics = await scrape(gw.url);
    assert.equal(sum(metrics, 'tahua_healing_actions_total', { rule: 'eject-failing', action: 'restore' }), 1);
    assert.equal(sum(metrics, 'tahua_healing_active', { deployment: 'a' }), 0);
    assert.equal(sum(metrics, 'tahua_deployment_state', { deployment: 'a', state: 'active' }), 1);
    assert.equal((await deployments())[0].state, 'active');

    // The audit file holds both records, in order; the log has them too.
    const lines = readFileSync(auditFile, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(
      lines.map((l) => [l.action, l.deployment]),
      [['eject', 'a'], ['restore', 'a']],
    );
    assert.equal(gw.stderr.json().filter((l) => l.msg === 'self-healing').length, 2);
  });

  it('shifts a slow model to its fallback on ttft_p99 and back after restore_after', async (t) => {
    const upA = await startMockUpstream({ t });
    const upB = await startMockUpstream({ t });
    const config = gatewayConfig({
      providers: [openaiProvider('up-a', upA.baseUrl()), openaiProvider('up-b', upB.baseUrl())],
      models: [
        { name: 'm', provider: 'up-a', fallbacks: ['backup'] },
        { name: 'backup', provider: 'up-b' },
      ],
    });
    config.admin = adminSection();
    config.healing = {
      interval: '100ms',
      rules: [
        {
          name: 'm-slow',
          model: 'm',
          when: { metric: 'ttft_p99', above: '100ms', for: '0s', min_requests: 2 },
          action: 'shift_to_fallback',
          percent: 100,
          restore_after: '500ms',
        },
      ],
    };
    const { gw, admin } = await startWithAdmin(t, config);
    const audit = async () => (await admin('GET', '/admin/v1/healing')).json.audit;

    upA.defaultBehaviour = { delayMs: 300 };
    const shift = await eventually(
      async () => {
        await Promise.all([1, 2, 3].map(() => post(gw.url, '/v1/chat/completions', chatBody('m'))));
        return (await audit()).find((r) => r.action === 'shift_to_fallback');
      },
      { timeout: 10_000, interval: 50, what: 'the shift audit record' },
    );
    assert.equal(shift.model, 'm');
    assert.equal(shift.percent, 100);
    assert.ok(shift.value > 100, `p99 ${shift.value} ms`);

    // Shifted: the fallback answers, and says so.
    const before = upA.requests.length;
    const res = await post(gw.url, '/v1/chat/completions', chatBody('m'));
    assert.equal(res.status, 200);
    assert.equal(res.headers['x-tahua-model'], 'backup');
    assert.equal(upA.requests.length, before, 'the slow model got no request');
    const [logLine] = await gw.waitForAccessLog((l) => l.request_id === res.headers['x-request-id']).catch((e) => {
      console.log(JSON.stringify(gw.accessLog().slice(-3)), res.headers);
      throw e;
    });
    assert.equal(logLine.fallback, 'shift');

    // Idle while shifted: restored after restore_after; m answers again.
    upA.defaultBehaviour = undefined;
    await eventually(async () => (await audit()).some((r) => r.action === 'restore'), { timeout: 10_000, interval: 50, what: 'the restore record' });
    const back = await post(gw.url, '/v1/chat/completions', chatBody('m'));
    assert.equal(back.status, 200);
    assert.equal(back.headers['x-tahua-model'], 'm');
  });
});
