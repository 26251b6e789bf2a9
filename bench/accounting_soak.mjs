// The accounting soak, long: faults (upstream resets mid-stream, 500s, client aborts,
// Redis restarted, a drain at the end) under load for DURATION seconds, then every
// request accounted for (tests/integration/lib/accounting_soak.mjs says how). The CI
// test runs the same for 8 s.
//   DURATION=300 CLIENTS=4 TENANTS=3 SEED=1 node bench/accounting_soak.mjs
// Exit status 0 when records = requests sent (file and Redis stream) and, per tenant,
// record tokens = quota movement; the last line is `RESULT {json}`.
import { runAccountingSoak } from '../tests/integration/lib/accounting_soak.mjs';

const env = process.env;
const r = await runAccountingSoak({
  durationS: Number(env.DURATION ?? 300),
  clientsPerTenant: Number(env.CLIENTS ?? 4),
  tenants: Number(env.TENANTS ?? 3),
  seed: Number(env.SEED ?? 1),
  log: (m) => console.error(m),
});
const ok = r.exit_code === 0 && r.records === r.sent && r.distinct_ids === r.sent && r.redis_stream_distinct_ids === r.sent &&
  r.per_tenant.every((t) => t.billed === t.quota_used);
console.log(JSON.stringify(r, null, 2));
console.log(`RESULT ${JSON.stringify({ ok, sent: r.sent, records: r.records, per_tenant: r.per_tenant })}`);
process.exit(ok ? 0 : 1);
