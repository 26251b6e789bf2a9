// The accounting soak: keep-alive clients of several tenants send a mix of requests for
// a bounded time through a gateway on Redis while faults happen (upstream resets
// mid-stream, 500s, client aborts, Redis restarted, and at the end a drain that cuts the
// streams still open), then every request is accounted for:
//   - the usage records (file sink) hold exactly one distinct record id per request sent;
//   - so does the Redis stream sink, once its spill (Redis was down) has been replayed;
//   - per tenant, the tokens in the records equal what the tenant's token quota moved
//     in Redis (read back by a fresh gateway on the same Redis).
// Used by tests/integration/accounting_soak.test.mjs (short, in CI) and
// bench/accounting_soak.mjs (long). Returns a report; throws when the setup fails.
import http from 'node:http';
import { createHash } from 'node:crypto';
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { startRedis } from './redis.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './tahua.mjs';
import { adminSection, startWithAdmin } from './admin.mjs';
import { makeTempDir, eventually } from './util.mjs';
import { parseMetrics } from './metrics.mjs';
import { request } from './http.mjs';

const MODEL = 'soak';
const PIECES = ['Soak', ' answer', ' in', ' eight', ' small', ' pieces', ' of', ' text.'];
const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const FAULTS = [['reset', 8], ['http500', 5], ['abort', 8]];  // percentages; the rest: none

function makeRng(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function startUpstream() {
  const chunk = (id, delta, finish = null) => `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model: MODEL,
    choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  const usage = { prompt_tokens: 20, completion_tokens: PIECES.length, total_tokens: 20 + PIECES.length };
  const server = http.createServer((req, res) => {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(parts).toString('utf8'));
      const fault = /soak:(\w+)/.exec(body.messages[0].content)?.[1] ?? 'none';
      res.on('error', () => {});
      if (fault === 'http500') {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'injected', type: 'server_error', param: null, code: null } }));
        return;
      }
      const id = 'chatcmpl-soak';
      if (!body.stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id, object: 'chat.completion', created: 1, model: MODEL, usage,
          choices: [{ index: 0, message: { role: 'assistant', content: PIECES.join('') }, finish_reason: 'stop' }] }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const events = [chunk(id, { role: 'assistant', content: '' }), ...PIECES.map((p) => chunk(id, { content: p })), chunk(id, {}, 'stop')];
      if (body.stream_options?.include_usage) events.push(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model: MODEL, choices: [], usage })}\n\n`);
      events.push('data: [DONE]\n\n');
      // slow: the drain's victims, still streaming when the gateway is told to stop.
      const gap = fault === 'slow' ? 200 : 1;
      let i = 0;
      let gone = false;
      res.on('close', () => { gone = true; });
      const next = () => {
        if (gone) return;
        if (fault === 'reset' && i === 3) return res.socket.resetAndDestroy();
        if (i === events.length) return res.end();
        res.write(events[i++], () => setTimeout(next, gap));
      };
      next();
    });
  });
  server.keepAliveTimeout = 120_000;
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

// One request to its end (an answer, an abort, an error): it counts as sent either way.
function oneRequest(port, agent, key, fault, stream) {
  const body = JSON.stringify({ model: MODEL, stream, messages: [{ role: 'user', content: `soak:${fault} ${'x'.repeat(40)}` }] });
  return new Promise((resolve) => {
    const req = http.request({ agent, host: '127.0.0.1', port, method: 'POST', path: '/v1/chat/completions',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'content-length': Buffer.byteLength(body) } });
    const timer = setTimeout(() => req.destroy(), 20_000);
    const done = (outcome) => {
      clearTimeout(timer);
      resolve(outcome);
    };
    req.on('error', (err) => done(`error ${err.code ?? err.message}`));
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => {
        text += d;
        if (fault === 'abort' && text.includes('"content":"Soak"')) {
          req.destroy();
          done('aborted');
        }
      });
      res.on('end', () => done(`${res.statusCode}${/"reconnect":true|gateway_draining/.test(text) ? ' drained' : ''}`));
      res.on('error', () => done('cut'));
    });
    req.end(body);
  });
}

export async function runAccountingSoak({ durationS = 10, clientsPerTenant = 2, tenants = 3, seed = 1, streamPct = 70, restartRedis = true, log = () => {} } = {}) {
  const cleanup = [];
  try {
    const redis = await startRedis();
    cleanup.push(() => redis.stop());
    const upstream = await startUpstream();
    cleanup.push(() => new Promise((r) => { upstream.closeAllConnections(); upstream.close(r); }));
    const dir = makeTempDir('tahua-soak-');
    const keys = Array.from({ length: tenants }, (_, i) => `tk-soak-tenant-${i}-0123456789abcdef`);
    const config = gatewayConfig({
      server: { workers: 2, drain_timeout: '1s' },
      accessLog: { enabled: false },
      providers: [openaiProvider('up', `http://127.0.0.1:${upstream.address().port}/v1`, { timeouts: { connect: '2s', first_byte: '5s', idle: '5s', total: '60s' } })],
      models: [{ name: MODEL, provider: 'up' }],
    });
    config.tenants = keys.map((_, i) => ({ name: `tenant-${i}`, limits: { tokens_per_day: 1_000_000_000 } }));
    config.keys = keys.map((k, i) => ({ name: `key-${i}`, tenant: `tenant-${i}`, sha256: sha256(k) }));
    config.store = { type: 'redis', redis: { url: redis.url, command_timeout: '200ms' } };
    config.usage = {
      spill_dir: join(dir, 'spill'),
      retry_backoff: '100ms',
      sinks: [{ name: 'file', type: 'file', path: join(dir, 'usage.jsonl') }, { name: 'redis', type: 'redis_stream', timeout: '300ms' }],
    };
    const gw = await startTahua({ config });
    cleanup.push(() => gw.kill());

    const sent = new Map();  // tenant -> requests
    const outcomes = new Map();
    const deadline = Date.now() + durationS * 1000;
    const rngs = [];
    const client = async (tenant, c) => {
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      const rng = makeRng(seed * 1000 + tenant * 10 + c);
      rngs.push(rng);
      while (Date.now() < deadline) {
        let r = rng() * 100;
        let fault = 'none';
        for (const [name, pct] of FAULTS) {
          if (r < pct) { fault = name; break; }
          r -= pct;
        }
        const stream = fault !== 'none' && fault !== 'http500' ? true : rng() * 100 < streamPct;
        sent.set(tenant, (sent.get(tenant) ?? 0) + 1);
        const outcome = await oneRequest(gw.port, agent, keys[tenant], fault, stream);
        outcomes.set(`${fault} ${stream ? 'stream' : 'plain'} ${outcome}`, (outcomes.get(`${fault} ${stream ? 'stream' : 'plain'} ${outcome}`) ?? 0) + 1);
      }
      agent.destroy();
    };
    // Redis is restarted (cleanly) in the middle of the load.
    const restart = (async () => {
      if (!restartRedis) return;
      await new Promise((r) => setTimeout(r, durationS * 400));
      log('redis: shutdown');
      await redis.shutdown();
      await new Promise((r) => setTimeout(r, 700));
      await redis.start();
      log('redis: back');
    })();
    const clients = [];
    for (let tnt = 0; tnt < tenants; tnt++) for (let c = 0; c < clientsPerTenant; c++) clients.push(client(tnt, c));
    await Promise.all([...clients, restart]);
    // The drain: streams still open when SIGTERM comes are ended by the drain deadline
    // with a reconnect event (they count as sent too).
    const slow = [];
    for (let tnt = 0; tnt < tenants; tnt++) {
      sent.set(tnt, sent.get(tnt) + 1);
      slow.push(oneRequest(gw.port, false, keys[tnt], 'slow', true));
    }
    await new Promise((r) => setTimeout(r, 300));
    const store = Object.fromEntries(parseMetrics((await request(gw.url, '/metrics')).text).samples
      .filter((m) => /^tahua_(store|redis)_/.test(m.name) && !m.name.includes('bucket')).map((m) => [m.name, m.value]));
    const code = await gw.stop('SIGTERM', 15_000);
    for (const o of await Promise.all(slow)) outcomes.set(`slow stream ${o}`, (outcomes.get(`slow stream ${o}`) ?? 0) + 1);

    // What the gateway warned of (counted by message): a failure's first clue.
    const warnings = {};
    for (const l of gw.stderr.json()) if (l.level === 'error' || l.level === 'warn') warnings[l.msg] = (warnings[l.msg] ?? 0) + 1;
    const total = [...sent.values()].reduce((a, b) => a + b, 0);
    const lines = existsSync(join(dir, 'usage.jsonl')) ? readFileSync(join(dir, 'usage.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : [];
    const ids = new Set(lines.map((r) => r.record_id));
    // A fresh gateway on the same Redis and spill directory: it replays what the Redis
    // sink still had spilled, and its admin API reads each tenant's quota.
    config.admin = adminSection();
    const { gw: reader, admin } = await startWithAdmin(undefined, config);
    cleanup.push(() => reader.kill());
    const streamIds = await eventually(() => {
      const out = redis.cli('XRANGE', 'tahua:usage', '-', '+').split('\n').filter((l) => /^[0-9a-f-]{36}$/.test(l.trim()));
      return new Set(out).size >= ids.size && new Set(out);
    }, { timeout: 10_000, what: 'the Redis stream complete' }).catch(() => new Set());
    const perTenant = [];
    for (let tnt = 0; tnt < tenants; tnt++) {
      const name = `tenant-${tnt}`;
      const records = lines.filter((r) => r.tenant === name);
      const billed = records.reduce((a, r) => a + r.total_tokens, 0);
      const res = await admin('GET', `/admin/v1/tenants/${name}`);
      const used = res.json.usage.find((u) => u.limit === 'tokens_per_day')?.used;
      perTenant.push({ tenant: name, sent: sent.get(tnt), records: records.length, billed, quota_used: used });
    }
    const estimated = lines.filter((r) => r.usage_source === 'estimate').length;
    return {
      exit_code: code,
      store,
      sent: total,
      records: lines.length,
      distinct_ids: ids.size,
      redis_stream_distinct_ids: streamIds.size,
      redis_stream_matches: [...ids].every((id) => streamIds.has(id)),
      estimated_records: estimated,
      end_reasons: lines.reduce((m, r) => ({ ...m, [r.end_reason]: (m[r.end_reason] ?? 0) + 1 }), {}),
      per_tenant: perTenant,
      warnings,
      outcomes: Object.fromEntries([...outcomes.entries()].sort()),
    };
  } finally {
    for (const f of cleanup.reverse()) await f();
  }
}
