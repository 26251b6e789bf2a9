// Soak test under upstream faults: the real gateway (build/tahua) in front of an
// OpenAI-format upstream that injects faults on command, driven by keep-alive clients for
// a bounded time. Every request is accounted for at the end.
//
// Each request names its fault in its prompt (`soak:<fault>:<id>`); the gateway passes the
// body through, so the upstream knows what to do and the client knows what it asked for:
//   none     a normal answer (8 pieces, usage chunk when asked, [DONE])
//   reset    a stream reset (TCP RST) after 3 events; non-streaming: after half the body
//   idle     a stream that goes silent after 3 events, past the gateway's idle timeout;
//            non-streaming: half the body, then silence
//   nodone   a stream that ends cleanly (chunked terminator) after 3 events, without a
//            finish_reason or `data: [DONE]`
//   http500  a 500 with an OpenAI error body, before any byte of the answer
//   abort    the client closes the connection after the first event (a client disconnect)
//
// The defect this is built to catch: a request with no answer at all, e.g. a keep-alive
// connection the gateway closes after an interrupted stream while the client's next POST
// is already in flight on it. Node's http client never retries a POST, so such a request
// ends in ECONNRESET / "socket hang up" and is counted as "no answer".
//
// usage: DURATION=60 CLIENTS=16 node bench/soak.mjs
// Environment (all optional):
//   DURATION    seconds of load (60)            CLIENTS     keep-alive clients (16)
//   STREAM_PCT  % streaming requests (70)       IDLE_MS     gateway idle timeout, ms (400)
//   FAULTS      percentages, e.g. "reset=3,idle=2,nodone=3,http500=3,abort=2" (those)
//   WORKERS     gateway worker threads (0 = one per core)
//   SEED        PRNG seed: each client's sequence of requests repeats (random by default)
//   TAHUA_BIN   the binary (build/tahua)        KEEP_TMP    1 keeps the config and the log
//
// Exit status: 0 when every request is accounted for, 1 when not (the report says which
// check failed and by how much), 2 when the setup failed. The last line is `RESULT {json}`.
// Checks: (1) sent = answered + client disconnects, i.e. no request without an answer;
// (2) the gateway's tahua_requests_total for the soak model = answered + client
// disconnects (requests it must have seen); (3) no stream ended silently, without
// `data: [DONE]` and without an error event (docs/errors.md: "never silently truncated").
import http from 'node:http';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const env = process.env;
const DURATION_S = Number(env.DURATION ?? 60);
const CLIENTS = Number(env.CLIENTS ?? 16);
const STREAM_PCT = Number(env.STREAM_PCT ?? 70);
const IDLE_MS = Number(env.IDLE_MS ?? 400);
const WORKERS = Number(env.WORKERS ?? 0);
const TAHUA = env.TAHUA_BIN ?? env.TAHUA ?? path.join(REPO, 'build', 'tahua');
const SEED = Number(env.SEED ?? Math.floor(Math.random() * 2 ** 31));
const FAULTS = parseFaults(env.FAULTS ?? 'reset=3,idle=2,nodone=3,http500=3,abort=2');
const MODEL = 'soak';
const PROVIDER = 'soak-upstream';
const PIECES = ['Soak', ' test', ' answer', ' in', ' eight', ' small', ' pieces', '.'];
const CHUNK_MS = 2;               // upstream pause between stream events
const CLIENT_TIMEOUT_MS = 30_000;  // a request with nothing for this long is "no answer"

function parseFaults(text) {
  const known = ['reset', 'idle', 'nodone', 'http500', 'abort'];
  const out = {};
  for (const part of text.split(',').filter(Boolean)) {
    const [name, pct] = part.split('=');
    if (!known.includes(name) || !(Number(pct) >= 0)) {
      console.error(`FAULTS: bad entry "${part}" (known: ${known.join(', ')})`);
      process.exit(2);
    }
    out[name] = Number(pct);
  }
  if (Object.values(out).reduce((a, b) => a + b, 0) > 100) {
    console.error('FAULTS: the percentages add up to more than 100');
    process.exit(2);
  }
  return out;
}

// mulberry32, one per client (seeded SEED + client number): each client's sequence of
// requests repeats with the same SEED, whatever the timing between clients.
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

function pickFault(rng) {
  let r = rng() * 100;
  for (const [name, pct] of Object.entries(FAULTS)) {
    if (r < pct) return name;
    r -= pct;
  }
  return 'none';
}

const inc = (map, key, n = 1) => map.set(key, (map.get(key) ?? 0) + n);

// ---- the upstream ---------------------------------------------------------------------

const upstreamSeen = new Set();  // request ids that reached the upstream
const upstreamByFault = new Map();

function chunkEvent(id, delta, finish = null) {
  return `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1_700_000_000, model: MODEL,
                                   choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
}

const USAGE = { prompt_tokens: 11, completion_tokens: PIECES.length, total_tokens: 11 + PIECES.length };

function handleUpstream(req, res, raw) {
  let body;
  try {
    body = JSON.parse(raw);
  } catch {
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: 'not JSON', type: 'invalid_request_error', param: null, code: null } }));
    return;
  }
  const m = /soak:(\w+):(\S+)/.exec(body.messages?.[0]?.content ?? '');
  const fault = m?.[1] ?? 'none';
  if (m) upstreamSeen.add(m[2]);
  inc(upstreamByFault, fault);
  const id = `chatcmpl-${m?.[2] ?? 'x'}`;
  const socket = res.socket;
  if (fault === 'http500') {
    res.writeHead(500, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: 'Injected failure.', type: 'server_error', param: null, code: null } }));
    return;
  }
  if (!body.stream) {
    const json = JSON.stringify({
      id, object: 'chat.completion', created: 1_700_000_000, model: MODEL,
      choices: [{ index: 0, message: { role: 'assistant', content: PIECES.join('') }, finish_reason: 'stop' }],
      usage: USAGE,
    });
    if (fault === 'reset' || fault === 'idle') {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) });
      res.write(json.slice(0, json.length >> 1), () => {
        if (fault === 'reset') socket.resetAndDestroy();
        // idle: nothing more; the gateway's idle timeout ends it and closes the connection.
      });
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(json);
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const events = [chunkEvent(id, { role: 'assistant', content: '' })];
  for (const p of PIECES) events.push(chunkEvent(id, { content: p }));
  events.push(chunkEvent(id, {}, 'stop'));
  if (body.stream_options?.include_usage) {
    events.push(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1_700_000_000, model: MODEL,
                                          choices: [], usage: USAGE })}\n\n`);
  }
  events.push('data: [DONE]\n\n');
  const cutAt = fault === 'reset' || fault === 'idle' || fault === 'nodone' ? 3 : events.length;
  let i = 0;
  let gone = false;
  res.on('close', () => { gone = true; });
  const next = () => {
    if (gone) return;
    if (i === cutAt) {
      if (fault === 'reset') socket.resetAndDestroy();
      else if (fault !== 'idle') res.end();  // the whole answer, or nodone's clean early end
      // idle: silence until the gateway gives up on it
      return;
    }
    res.write(events[i++], () => setTimeout(next, CHUNK_MS));
  };
  next();
}

function startUpstream() {
  const server = http.createServer((req, res) => {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => handleUpstream(req, res, Buffer.concat(parts).toString('utf8')));
    req.on('error', () => {});
    res.on('error', () => {});
  });
  // The gateway pools upstream connections for 60 s: keep them, so pool staleness does
  // not mix into what this run measures.
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 121_000;
  server.requestTimeout = 0;
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

// ---- the gateway ----------------------------------------------------------------------

function startGateway(upstreamPort, dir) {
  const config = `# written by bench/soak.mjs
server:
  workers: ${WORKERS}
listeners:
  - {address: 127.0.0.1, port: 0}
access_log: {enabled: false}
providers:
  - name: ${PROVIDER}
    type: openai
    base_url: http://127.0.0.1:${upstreamPort}/v1
    timeouts: {connect: 2s, first_byte: 5s, idle: ${IDLE_MS}ms, total: 30s}
models:
  - name: ${MODEL}
    provider: ${PROVIDER}
`;
  const configPath = path.join(dir, 'soak.yaml');
  const logPath = path.join(dir, 'tahua.log');
  fs.writeFileSync(configPath, config);
  const log = fs.openSync(logPath, 'w');
  const child = spawn(TAHUA, ['--config', configPath, '--no-watch'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let port = 0;
  let pending = '';
  return new Promise((resolve, reject) => {
    const fail = (why) => reject(new Error(`${why}; log: ${logPath}`));
    child.on('error', (err) => fail(`cannot start ${TAHUA}: ${err.message}`));
    child.on('exit', (code, signal) => { if (!port) fail(`the gateway exited (${code ?? signal}) before listening`); });
    child.stderr.on('data', (d) => {
      fs.writeSync(log, d);
      if (port) return;
      pending += d.toString('utf8');
      for (const line of pending.split('\n')) {
        try {
          const j = JSON.parse(line);
          if (j.msg === 'listening' && j.port) port = j.port;
        } catch { /* a partial line */ }
      }
      if (port) resolve({ child, port, configPath, logPath });
    });
  });
}

function get(port, urlPath) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: urlPath, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

// Prometheus text -> [{name, labels, value}]
function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m || line.startsWith('#')) continue;
    const labels = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[k] = v;
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

async function scrape(port) {
  const r = await get(port, '/metrics');
  if (r.status !== 200) throw new Error(`/metrics answered ${r.status}`);
  return parseMetrics(r.text);
}

// ---- the clients ----------------------------------------------------------------------

const tally = {
  sent: 0,
  answered: 0,
  clientDisconnects: 0,
  noAnswer: 0,
  byStatus: new Map(),         // status -> answers
  byStreamOutcome: new Map(),  // "complete" | "error event: <code>" | "ended silently" | "body cut"
  noAnswerByReason: new Map(), // error code -> count
  noAnswerAfter: new Map(),    // what the reused connection carried before -> count
  noAnswerReachedUpstream: 0,
  outcomes: new Map(),         // "<fault> <kind>" -> Map(outcome -> count)
  lostIds: [],
};

function record(fault, stream, outcome) {
  const key = `${fault.padEnd(7)} ${stream ? 'stream' : 'plain '}`;
  if (!tally.outcomes.has(key)) tally.outcomes.set(key, new Map());
  inc(tally.outcomes.get(key), outcome);
}

// The last data event of an SSE body: "[DONE]", an error code, or what it was.
function streamOutcome(text) {
  const data = [];
  for (const block of text.split('\n\n')) {
    for (const line of block.split('\n')) if (line.startsWith('data:')) data.push(line.slice(5).trim());
  }
  const last = data.at(-1);
  if (last === '[DONE]') return data.slice(0, -1).some((d) => d.includes('"error"')) ? 'error event then [DONE]' : 'complete';
  try {
    const j = JSON.parse(last ?? '');
    if (j.error) return `error event: ${j.error.code ?? j.error.type}`;
  } catch { /* not JSON */ }
  return 'ended silently';
}

function oneRequest(agent, rng, clientId, n) {
  const fault0 = pickFault(rng);
  // Stream-only faults make a streaming request; the rest follow STREAM_PCT.
  const stream = fault0 === 'nodone' || fault0 === 'abort' || rng() * 100 < STREAM_PCT;
  const fault = fault0;
  const id = `${clientId}-${n}`;
  const body = JSON.stringify({ model: MODEL, stream, messages: [{ role: 'user', content: `soak:${fault}:${id}` }] });
  tally.sent += 1;
  return new Promise((resolve) => {
    let settled = false;
    let timer;
    const settle = (kind, detail) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (kind === 'answer') {
        tally.answered += 1;
        inc(tally.byStatus, detail.status);
        if (detail.streamOutcome) inc(tally.byStreamOutcome, detail.streamOutcome);
        record(fault, stream, detail.streamOutcome ? `${detail.status} ${detail.streamOutcome}` : String(detail.status));
      } else if (kind === 'abort') {
        tally.clientDisconnects += 1;
        record(fault, stream, 'client disconnect');
      } else {
        tally.noAnswer += 1;
        inc(tally.noAnswerByReason, detail.reason);
        if (detail.reused) inc(tally.noAnswerAfter, detail.after ?? '(unknown)');
        else inc(tally.noAnswerAfter, '(a new connection)');
        if (upstreamSeen.has(id)) tally.noAnswerReachedUpstream += 1;
        if (tally.lostIds.length < 20) tally.lostIds.push(`${id} (${fault}, ${stream ? 'stream' : 'plain'}, ${detail.reason})`);
        record(fault, stream, `NO ANSWER (${detail.reason})`);
      }
      resolve();
    };
    const req = http.request({
      agent, host: '127.0.0.1', port: gatewayPort, method: 'POST', path: '/v1/chat/completions',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    });
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        req.destroy();
        settle('none', { reason: `nothing for ${CLIENT_TIMEOUT_MS / 1000} s`, reused: req.reusedSocket });
      }, CLIENT_TIMEOUT_MS);
    };
    arm();
    // The socket remembers what it carried last, so a lost request says what came before.
    let sock;
    req.on('socket', (s) => { sock = s; });
    const after = () => sock?.soakLast;
    req.on('error', (err) => settle('none', { reason: err.code ?? err.message, reused: req.reusedSocket, after: after() }));
    req.on('response', (res) => {
      let text = '';
      let aborted = false;
      res.setEncoding('utf8');
      res.on('data', (d) => {
        arm();
        text += d;
        if (fault === 'abort' && !aborted && text.includes('\n\n')) {
          aborted = true;
          req.destroy();
          settle('abort');
        }
      });
      const done = (complete) => {
        const sse = (res.headers['content-type'] ?? '').startsWith('text/event-stream');
        const outcome = !complete ? 'body cut' : sse ? streamOutcome(text) : null;
        // Whether the gateway announced the close tells a lost next request's story.
        const close = /close/i.test(res.headers.connection ?? '') ? ' (Connection: close)' : '';
        if (sock) sock.soakLast = `${fault} ${stream ? 'stream' : 'plain'} -> ${res.statusCode}${outcome ? ` ${outcome}` : ''}${close}`;
        settle('answer', { status: res.statusCode, streamOutcome: outcome });
      };
      res.on('end', () => done(true));
      res.on('error', () => done(false));
      res.on('close', () => { if (!res.complete) done(false); });  // the connection ended mid-body
    });
    req.end(body);
  });
}

async function client(clientId, deadline) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const rng = makeRng(SEED + clientId);
  let n = 0;
  while (Date.now() < deadline) await oneRequest(agent, rng, clientId, n++);
  agent.destroy();
}

// ---- the run --------------------------------------------------------------------------

let gatewayPort = 0;

function fmtMap(map) {
  return [...map.entries()].sort((a, b) => String(a[0]).localeCompare(String(b[0])))
    .map(([k, v]) => `    ${String(k).padEnd(48)} ${v}`).join('\n') || '    (none)';
}

async function main() {
  if (!fs.existsSync(TAHUA)) {
    console.error(`no gateway binary at ${TAHUA} (scripts/build.sh, or set TAHUA_BIN)`);
    process.exit(2);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tahua-soak-'));
  const upstream = await startUpstream();
  let gw;
  try {
    gw = await startGateway(upstream.address().port, dir);
  } catch (err) {
    console.error(err.message);
    upstream.close();
    process.exit(2);
  }
  gatewayPort = gw.port;
  let gatewayExit = null;
  gw.child.on('exit', (code, signal) => { gatewayExit = { code, signal }; });
  const stop = () => { if (!gatewayExit) gw.child.kill('SIGTERM'); };
  process.on('SIGINT', () => { stop(); process.exit(130); });

  const before = await scrape(gatewayPort);
  const count = (metrics) => metrics.filter((s) => s.name === 'tahua_requests_total' && s.labels.model === MODEL)
    .reduce((a, s) => a + s.value, 0);
  const startCount = count(before);

  console.log(`soak: ${DURATION_S} s, ${CLIENTS} keep-alive clients, ${STREAM_PCT}% streaming, faults ${JSON.stringify(FAULTS)}, ` +
              `idle timeout ${IDLE_MS} ms, seed ${SEED}`);
  console.log(`gateway ${TAHUA} (pid ${gw.child.pid}) on 127.0.0.1:${gatewayPort}, upstream on ${upstream.address().port}`);
  const t0 = Date.now();
  const deadline = t0 + DURATION_S * 1000;
  const progress = setInterval(() => {
    console.log(`  ${Math.round((Date.now() - t0) / 1000)} s: sent ${tally.sent}, answered ${tally.answered}, ` +
                `client disconnects ${tally.clientDisconnects}, no answer ${tally.noAnswer}`);
  }, 10_000);
  await Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(i, deadline)));
  clearInterval(progress);
  const elapsed = (Date.now() - t0) / 1000;

  // The gateway counts a request when it completes, which for a client that left can be
  // a moment after the client saw its end: wait until it has no stream and no client
  // connection other than the scrape's own (bounded; polled, the process has no event to await).
  let after = await scrape(gatewayPort);
  const gauge = (metrics, name) => metrics.find((s) => s.name === name)?.value ?? NaN;
  for (let i = 0; i < 200 && (gauge(after, 'tahua_active_streams') > 0 || gauge(after, 'tahua_active_connections') > 1); i++) {
    await new Promise((r) => setTimeout(r, 50));
    after = await scrape(gatewayPort);
  }
  const gatewayCount = count(after) - startCount;
  const gatewayByStatus = new Map();
  for (const s of after) {
    if (s.name !== 'tahua_requests_total' || s.labels.model !== MODEL) continue;
    const b = before.find((x) => x.name === s.name && x.labels.model === MODEL && x.labels.status === s.labels.status)?.value ?? 0;
    if (s.value - b) gatewayByStatus.set(s.labels.status, s.value - b);
  }
  const upstreamErrors = new Map();
  for (const s of after) if (s.name === 'tahua_upstream_errors_total' && s.value) upstreamErrors.set(s.labels.kind, s.value);

  const diedEarly = gatewayExit !== null;
  stop();
  const exited = gatewayExit ?? await new Promise((r) => gw.child.once('exit', (code, signal) => r({ code, signal })));
  upstream.close();
  upstream.closeAllConnections?.();

  const received = tally.answered + tally.clientDisconnects;
  const silent = tally.byStreamOutcome.get('ended silently') ?? 0;
  const failures = [];
  if (tally.sent !== received) {
    failures.push(`sent ${tally.sent} != answered ${tally.answered} + client disconnects ${tally.clientDisconnects}: ` +
                  `${tally.sent - received} request(s) got no answer`);
  }
  if (gatewayCount !== received) {
    failures.push(`tahua_requests_total{model="${MODEL}"} counted ${gatewayCount}, the clients account for ${received} ` +
                  `(difference ${gatewayCount - received})`);
  }
  if (silent) failures.push(`${silent} stream(s) ended without data: [DONE] and without an error event`);

  console.log(`\nafter ${elapsed.toFixed(1)} s:`);
  console.log(`  requests sent                 ${tally.sent} (${(tally.sent / elapsed).toFixed(0)}/s)`);
  console.log(`  answered                      ${tally.answered}`);
  console.log(`  client disconnects (aborts)   ${tally.clientDisconnects}`);
  console.log(`  NO ANSWER AT ALL              ${tally.noAnswer}` +
              (tally.noAnswer ? ` (of which the upstream received ${tally.noAnswerReachedUpstream})` : ''));
  console.log(`  gateway tahua_requests_total  ${gatewayCount} (model "${MODEL}", this run)`);
  console.log(`  upstream received             ${[...upstreamByFault.values()].reduce((a, b) => a + b, 0)}`);
  console.log('  answers by status (clients):');
  console.log(fmtMap(tally.byStatus));
  console.log('  tahua_requests_total by status (gateway):');
  console.log(fmtMap(gatewayByStatus));
  console.log('  streamed answers by how they ended:');
  console.log(fmtMap(tally.byStreamOutcome));
  console.log('  tahua_upstream_errors_total by kind:');
  console.log(fmtMap(upstreamErrors));
  if (tally.noAnswer) {
    console.log('  no answer, by client error:');
    console.log(fmtMap(tally.noAnswerByReason));
    console.log('  no answer, by what the reused connection carried just before:');
    console.log(fmtMap(tally.noAnswerAfter));
    console.log(`  first lost requests: ${tally.lostIds.join('; ')}`);
  }
  console.log('  outcome by injected fault:');
  for (const [key, m] of [...tally.outcomes.entries()].sort()) {
    console.log(`    ${key}  ${[...m.entries()].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k}: ${v}`).join(', ')}`);
  }
  console.log(`  gateway exit: ${exited.code ?? exited.signal}${diedEarly ? ' (before the end of the run)' : ' (SIGTERM at the end)'}`);
  if (diedEarly) failures.push(`the gateway exited during the run (${exited.code ?? exited.signal})`);
  else if (exited.code !== 0) failures.push(`the gateway exited with ${exited.code ?? exited.signal} on SIGTERM`);
  console.log(failures.length ? `\nFAILED:\n  ${failures.join('\n  ')}` : '\nOK: every request is accounted for');
  if (env.KEEP_TMP === '1') console.log(`config and gateway log kept in ${dir}`);
  else fs.rmSync(dir, { recursive: true, force: true });
  console.log(`RESULT ${JSON.stringify({
    duration_s: Number(elapsed.toFixed(1)), seed: SEED, sent: tally.sent, answered: tally.answered,
    client_disconnects: tally.clientDisconnects, no_answer: tally.noAnswer, gateway_requests_total: gatewayCount,
    by_status: Object.fromEntries(tally.byStatus), stream_outcomes: Object.fromEntries(tally.byStreamOutcome),
    no_answer_reasons: Object.fromEntries(tally.noAnswerByReason), ok: failures.length === 0,
  })}`);
  process.exit(failures.length ? 1 : 0);
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
