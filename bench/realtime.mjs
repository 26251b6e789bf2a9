// Realtime benchmark (issue 25), run on demand (not in CI). See docs/benchmarks.md,
// "Realtime (issue 25)".
//
//   node bench/realtime.mjs            (from the repository root; needs tests/node_modules)
//
// WebSocket frames relayed per second and the proxy's CPU per 1,000 frames, tahua against
// nginx (proxying the WebSocket as bytes, which parses no frame) in the same run, one
// worker each pinned to PROXY_CPU (0). CLIENTS (16) sockets each keep WINDOW (8) frames of
// FRAME_BYTES (1,024: an input_audio_buffer.append of ~20 ms of audio) in flight and send
// FRAMES (20,000) in all; the upstream (a `ws` server on LOAD_CPU, 1) answers every frame
// with one of the same size, so every frame crosses the proxy twice (both counted).
// "alone" is the client straight at the upstream: its rate is the most any proxy run can
// show (client and upstream share LOAD_CPU), which is why the figure compared is the
// proxy's CPU per frame, not the rate.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { HZ, sleep, cpuTicks, startTahua, startNginx } from './lib.mjs';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(ROOT, 'tests', 'package.json'));
const { WebSocketServer, WebSocket } = require('ws');

const env = (k, d) => Number(process.env[k] ?? d);
const PROXY_CPU = env('PROXY_CPU', 0);
const LOAD_CPU = env('LOAD_CPU', 1);
const CLIENTS = env('CLIENTS', 16);
const WINDOW = env('WINDOW', 8);
const FRAME_BYTES = env('FRAME_BYTES', 1024);
const FRAMES = env('FRAMES', 20000);
const ROUNDS = env('ROUNDS', 3);
const TAHUA = process.env.TAHUA ?? join(ROOT, 'build', 'tahua');
const tmp = mkdtempSync(join(tmpdir(), 'tahua-rt-bench-'));
const children = [];


// The upstream: this process, pinned to LOAD_CPU with the clients.
execFileSync('taskset', ['-pc', String(LOAD_CPU), String(process.pid)]);
const payload = Buffer.alloc(FRAME_BYTES, 'a').toString();
const frame = JSON.stringify({ type: 'input_audio_buffer.append', audio: payload }).slice(0, FRAME_BYTES);
const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
wss.on('connection', (ws) => ws.on('message', (m) => ws.send(m, { binary: false })));
await new Promise((r) => wss.on('listening', r));
const upPort = wss.address().port;

// tahua in front of it.
const tahuaPort = upPort + 1;
const tahua = await startTahua({ bin: TAHUA, port: tahuaPort, cpu: PROXY_CPU, tmp, children, yaml: `listeners: [{address: 127.0.0.1, port: ${tahuaPort}}]
server: {workers: 1}
access_log: {enabled: false}
providers: [{name: up, type: openai, base_url: "http://127.0.0.1:${upPort}/v1", api_key: sk-bench}]
models: [{name: rt, provider: up}]
` });

// nginx in front of it: WebSocket proxying as nginx documents it.
const nginxPort = upPort + 2;
const nginxWorker = await startNginx({ port: nginxPort, cpu: PROXY_CPU, tmp, children,
  location: `proxy_pass http://127.0.0.1:${upPort}; proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection "upgrade"; proxy_read_timeout 1h;` });

// CLIENTS sockets, FRAMES frames in all with WINDOW in flight each; resolves with frames/s.
async function run(url) {
  const per = Math.ceil(FRAMES / CLIENTS);
  const sockets = await Promise.all(Array.from({ length: CLIENTS }, () => new Promise((res, rej) => {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    ws.once('open', () => res(ws));
    ws.once('error', rej);
  })));
  const t0 = process.hrtime.bigint();
  await Promise.all(sockets.map((ws) => new Promise((res) => {
    let sent = 0;
    let got = 0;
    const send = () => { while (sent < per && sent - got < WINDOW) { ws.send(frame); ++sent; } };
    ws.on('message', () => { if (++got === per) res(); else send(); });
    send();
  })));
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  for (const ws of sockets) ws.close();
  return (2 * per * CLIENTS) / seconds;
}

async function measure(name, url, pid) {
  const c0 = pid ? cpuTicks(pid) : 0;
  const rate = await run(url);
  const c1 = pid ? cpuTicks(pid) : 0;
  const framesTotal = 2 * Math.ceil(FRAMES / CLIENTS) * CLIENTS;
  const cpuPer1k = pid ? ((c1 - c0) / HZ) * 1000 / (framesTotal / 1000) : NaN;
  console.log(`${name.padEnd(6)} ${rate.toFixed(0).padStart(8)} frames/s  ${pid ? cpuPer1k.toFixed(2).padStart(6) + ' ms CPU per 1k frames' : ''}`);
  return cpuPer1k;
}

console.log(`date: ${new Date().toISOString()}; ${CLIENTS} sockets x ${WINDOW} in flight, ${FRAMES} frames of ${FRAME_BYTES} B each way`);
await run(`ws://127.0.0.1:${upPort}/v1/realtime?model=rt`); // warm-up
await measure('alone', `ws://127.0.0.1:${upPort}/v1/realtime?model=rt`, 0);
const results = { nginx: [], tahua: [] };
for (let r = 0; r < ROUNDS; ++r) {
  results.nginx.push(await measure('nginx', `ws://127.0.0.1:${nginxPort}/v1/realtime?model=rt`, nginxWorker));
  results.tahua.push(await measure('tahua', `ws://127.0.0.1:${tahuaPort}/v1/realtime?model=rt`, tahua.pid));
}
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
console.log(`median CPU per 1k frames: nginx ${median(results.nginx).toFixed(2)} ms, tahua ${median(results.tahua).toFixed(2)} ms; ` +
  `tahua/nginx ${(median(results.tahua) / median(results.nginx)).toFixed(2)}`);
for (const c of children) c.kill('SIGTERM');
wss.close();
await sleep(300);
rmSync(tmp, { recursive: true, force: true });
process.exit(0);
