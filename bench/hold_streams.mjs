// Holds N concurrent streaming chat completions open through a gateway and reports the
// gateway's resident memory with them open. Used by `bench/run.sh streams [N]`.
//
// Raw node:net sockets and a hand-written HTTP/1.1 request (no deps, no http.Agent): we
// want exactly one TCP connection per stream and nothing pooled or buffered on our side.
//
// usage: node bench/hold_streams.mjs --port P --n N --pid GATEWAY_PID
//          [--host 127.0.0.1] [--mock-pid PID] [--timeout 120] [--ramp 256] [--hold 6]
//
// Prints a human-readable report and, last, one line `RESULT {json}`.
// Exit status: 0 when all N streams got headers + a first event, 1 otherwise, 2 on bad usage.
import net from 'node:net';
import fs from 'node:fs';

function parseArgs(argv) {
  const opts = { host: '127.0.0.1', port: 0, n: 10000, pid: 0, mockPid: 0, timeout: 120, ramp: 256, hold: 6 };
  const keys = { '--host': 'host', '--port': 'port', '--n': 'n', '--pid': 'pid', '--mock-pid': 'mockPid',
                 '--timeout': 'timeout', '--ramp': 'ramp', '--hold': 'hold' };
  for (let i = 2; i < argv.length; i += 2) {
    const key = keys[argv[i]];
    if (!key || i + 1 >= argv.length) { console.error(`bad argument: ${argv[i]}`); process.exit(2); }
    opts[key] = key === 'host' ? argv[i + 1] : Number(argv[i + 1]);
  }
  if (!opts.port || !opts.pid || !(opts.n > 0)) {
    console.error('usage: node hold_streams.mjs --port P --n N --pid GATEWAY_PID [--mock-pid PID] [--timeout S]');
    process.exit(2);
  }
  return opts;
}

const opts = parseArgs(process.argv);

// VmRSS in KiB (the kernel reports "kB", which is KiB).
function rssKiB(pid) {
  if (!pid) return null;
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;  // process gone: reported as null, and the caller sees the failure count
  }
}

const body = JSON.stringify({ model: 'mock-gpt', stream: true, messages: [{ role: 'user', content: 'hi' }] });
const request = Buffer.from(
  `POST /v1/chat/completions HTTP/1.1\r\nHost: ${opts.host}:${opts.port}\r\n` +
  `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);

const sockets = [];
let opened = 0;        // connect() calls made
let connecting = 0;    // connect() calls not yet connected: bounded by --ramp
let ready = 0;         // streams with a 200, headers and at least one `data:` event
let readyAt = 0;       // ms since start when the last stream became ready
let phase = 'opening'; // opening -> holding -> closing
const failures = new Map();  // reason -> count; anything here is worth a look
const statusSamples = [];    // first few non-200 responses, for the report

function fail(reason) { failures.set(reason, (failures.get(reason) ?? 0) + 1); }

const t0 = Date.now();
const rssIdle = rssKiB(opts.pid);
const mockRssIdle = rssKiB(opts.mockPid);

function openOne() {
  opened++;
  connecting++;
  const s = net.connect({ host: opts.host, port: opts.port });
  sockets.push(s);
  let buf = '';        // response bytes until the first event; dropped afterwards
  let state = 'connecting';
  s.setEncoding('latin1');
  s.on('connect', () => {
    connecting--;
    state = 'sent';
    s.write(request);
    pump();
  });
  s.on('data', (chunk) => {
    if (state === 'ready') return;  // keep reading (as a real client would), keep nothing
    buf += chunk;
    if (state === 'sent') {
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const status = Number(buf.slice(9, 12));
      if (status !== 200) {
        fail(`status ${status}`);
        if (statusSamples.length < 3) statusSamples.push(buf.slice(0, 600));
        state = 'failed';
        s.destroy();
        return;
      }
      state = 'headers';
    }
    // Chunked framing puts a size line before each event; "data:" is enough to know
    // the first SSE event went through the gateway.
    if (state === 'headers' && buf.indexOf('data:') >= 0) {
      state = 'ready';
      buf = '';
      ready++;
      if (ready === opts.n) { readyAt = Date.now() - t0; allReady(); }
    }
  });
  s.on('error', (e) => { fail(`${state}: ${e.code ?? e.message}`); });
  s.on('close', () => {
    if (state === 'connecting') connecting--;
    if (state === 'failed') return;
    if (phase !== 'closing') {
      fail(`closed by peer while ${state} (${phase})`);
      if (state === 'ready') ready--;
    }
    state = 'closed';
    pump();
  });
}

// Open connections while fewer than --ramp are still connecting: bursting 10k SYNs at once
// would overflow the listen backlog and measure SYN retransmits instead of the gateway.
function pump() {
  while (phase === 'opening' && opened < opts.n && connecting < opts.ramp) openOne();
}

let holdTimer = null;
function allReady() {
  const rssReady = rssKiB(opts.pid);
  console.log(`all ${opts.n} streams have headers + first event after ${(readyAt / 1000).toFixed(1)} s; ` +
              `gateway VmRSS ${rssReady} KiB`);
  phase = 'holding';
  // Hold a little longer so every stream relays at least one more chunk (chunk_delay is
  // seconds): the steady state of an idle stream, not just its setup.
  holdTimer = setTimeout(() => finish(true, rssReady), opts.hold * 1000);
}

const deadline = setTimeout(() => {
  console.log(`timeout after ${opts.timeout} s: only ${ready} of ${opts.n} streams ready ` +
              `(opened ${opened}, still connecting ${connecting})`);
  finish(false, rssKiB(opts.pid));
}, opts.timeout * 1000);

function finish(ok, rssReady) {
  clearTimeout(deadline);
  if (holdTimer) clearTimeout(holdTimer);
  const rssHeld = rssKiB(opts.pid);
  const mockRssHeld = rssKiB(opts.mockPid);
  phase = 'closing';
  const streams = ready;  // streams actually open at the final reading
  // Per stream: the larger of the two readings, so a stream's cost is never understated.
  const rssWith = Math.max(rssReady ?? 0, rssHeld ?? 0);
  const perStream = streams > 0 && rssIdle != null ? (rssWith - rssIdle) / streams : null;
  const result = {
    ok: ok && failures.size === 0,
    requested: opts.n, streams, seconds_to_ready: readyAt / 1000,
    rss_idle_kib: rssIdle, rss_ready_kib: rssReady, rss_held_kib: rssHeld,
    kib_per_stream: perStream == null ? null : Number(perStream.toFixed(2)),
    mock_rss_idle_kib: mockRssIdle, mock_rss_held_kib: mockRssHeld,
    failures: Object.fromEntries(failures),
  };
  console.log(`gateway VmRSS: idle ${rssIdle} KiB, with ${streams} streams ${rssWith} KiB ` +
              `(at ready ${rssReady}, after ${opts.hold} s hold ${rssHeld})`);
  if (perStream != null) console.log(`per stream: ${perStream.toFixed(2)} KiB`);
  if (failures.size) console.log('failures:', JSON.stringify(result.failures));
  for (const s of statusSamples) console.log('--- non-200 response sample ---\n' + s);
  console.log('RESULT ' + JSON.stringify(result));
  for (const s of sockets) s.destroy();
  process.exitCode = result.ok ? 0 : 1;
  // Let the destroys flush (FINs) and then leave even if something still holds the loop.
  setTimeout(() => process.exit(), 500).unref();
}

pump();
