// Accounting under faults, the short CI run (the long one: bench/accounting_soak.mjs):
// upstream resets mid-stream, 500s, client aborts, Redis restarted, a drain at the end;
// every request sent has exactly one usage record, in the file and in the Redis stream,
// and each tenant's records sum to what its token quota moved.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { runAccountingSoak } from './lib/accounting_soak.mjs';

describe('accounting under faults', () => {
  it('one record per request sent; record tokens = quota movement per tenant', { timeout: 60_000 }, async () => {
    const r = await runAccountingSoak({ durationS: 8, clientsPerTenant: 2, tenants: 3, seed: 7 });
    // What a failure needs first (CI shows the head of a long message): the per-tenant
    // sums and the outcomes, then the store's counters.
    const { per_tenant, warnings, outcomes, end_reasons, ...rest } = r;
    const report = JSON.stringify({ per_tenant, warnings, outcomes, end_reasons, ...rest });
    assert.equal(r.exit_code, 0, report);
    assert.ok(r.sent > 100, `enough traffic: ${report}`);
    assert.equal(r.records, r.sent, `one record per request: ${report}`);
    assert.equal(r.distinct_ids, r.sent, report);
    assert.equal(r.redis_stream_distinct_ids, r.sent, `the Redis stream, its spill replayed: ${report}`);
    assert.ok(r.redis_stream_matches, report);
    assert.ok(r.end_reasons.client_gone > 0 && r.end_reasons.upstream_error > 0 && r.end_reasons.drain > 0, `every fault happened: ${report}`);
    for (const t of r.per_tenant) assert.equal(t.billed, t.quota_used, `${t.tenant}: record tokens = quota movement: ${report}`);
  });
});
