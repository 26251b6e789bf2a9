// The accounting soak, long: faults (upstream resets mid-stream, 500s, client aborts,
// Redis restarted, a drain at the end) under load for DURATION seconds, then every
// request accounted for (tests/integration/lib/accounting_soak.mjs says how). The CI
// test runs the same for 8 s with seed 7.
//   DURATION=300 CLIENTS=4 TENANTS=3 SEED=1 node bench/accounting_soak.mjs
// SEEDS=1-12 runs one soak per seed, one after another (a fault that needs a rare
// interleaving shows in one seed of many; run it pinned, `taskset -c 0`, as a slow CI
// machine would, and under TAHUA_BIN=build-sanitize/tahua).
// Exit status 0 when, in every run, records = requests sent (file and Redis stream) and,
// per tenant, record tokens = quota movement; the last line is `RESULT {json}`.
import { runAccountingSoak } from '../tests/integration/lib/accounting_soak.mjs';

const env = process.env;
function seeds() {
  const spec = env.SEEDS ?? env.SEED ?? '1';
  const m = /^(\d+)-(\d+)$/.exec(spec);
  if (!m) return spec.split(',').map(Number);
  const out = [];
  for (let s = Number(m[1]); s <= Number(m[2]); s += 1) out.push(s);
  return out;
}

const runs = [];
for (const seed of seeds()) {
  const r = await runAccountingSoak({
    durationS: Number(env.DURATION ?? 300),
    clientsPerTenant: Number(env.CLIENTS ?? 4),
    tenants: Number(env.TENANTS ?? 3),
    seed,
    log: (m) => console.error(m),
  });
  const ok = r.exit_code === 0 && r.records === r.sent && r.distinct_ids === r.sent && r.redis_stream_distinct_ids === r.sent &&
    r.per_tenant.every((t) => t.billed === t.quota_used);
  if (!ok) console.log(JSON.stringify(r, null, 2));
  console.error(`seed ${seed}: ${ok ? 'ok' : 'FAILED'} (${r.sent} requests)`);
  runs.push({ seed, ok, sent: r.sent, records: r.records, per_tenant: r.per_tenant });
}
const ok = runs.every((r) => r.ok);
console.log(`RESULT ${JSON.stringify({ ok, failed: runs.filter((r) => !r.ok).map((r) => r.seed), runs })}`);
process.exit(ok ? 0 : 1);
