// MCP gateway benchmark (issue 25), run on demand (not in CI). See docs/benchmarks.md,
// "MCP tools/call (issue 25)".
//
//   node bench/mcp.mjs            (from the repository root; needs tests/node_modules)
//
// What a tools/call costs through tahua's /mcp (access rules, the tool's pin, its
// arguments checked against its schema, the call routed to its server, the answer's
// event stream relayed) against nginx proxying the same calls to the same server (a
// plain reverse proxy: what "calling the server directly" costs behind any proxy), in
// the same run, one worker each pinned to PROXY_CPU (0). The server is an SDK McpServer
// (Streamable HTTP, one session, answering each call with an event stream) on
// LOAD_CPU (1) with the clients; "alone" is the clients straight at it. CLIENTS (16)
// keep-alive connections make CALLS (4,000) calls in all; then one connection makes
// SEQUENTIAL (500) calls one after another for the latency each proxy adds. TOOLS (0) more
// tools on the server: a call's cost must not grow with how many tools are pinned.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer, Agent, request } from 'node:http';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { HZ, sleep, cpuTicks, startTahua, startNginx } from './lib.mjs';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(ROOT, 'tests', 'package.json'));
const { McpServer } = require('@modelcontextprotocol/sdk/server/mcp.js');
const { StreamableHTTPServerTransport } = require('@modelcontextprotocol/sdk/server/streamableHttp.js');
const { isInitializeRequest } = require('@modelcontextprotocol/sdk/types.js');
const { z } = require('zod');

const env = (k, d) => Number(process.env[k] ?? d);
const PROXY_CPU = env('PROXY_CPU', 0);
const LOAD_CPU = env('LOAD_CPU', 1);
const CLIENTS = env('CLIENTS', 16);
const CALLS = env('CALLS', 4000);
const SEQUENTIAL = env('SEQUENTIAL', 500);
const TOOLS = env('TOOLS', 0);  // more tools on the server (each pinned): a call's cost must not grow with them
const ROUNDS = env('ROUNDS', 3);
const TAHUA = process.env.TAHUA ?? join(ROOT, 'build', 'tahua');
const KEY = 'tk-bench-mcp-0123456789';
const tmp = mkdtempSync(join(tmpdir(), 'tahua-mcp-bench-'));
const children = [];


// The server: this process, pinned to LOAD_CPU with the clients.
execFileSync('taskset', ['-pc', String(LOAD_CPU), String(process.pid)]);
const sessions = new Map();
const http = createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
  let transport = sessions.get(req.headers['mcp-session-id']);
  if (!transport && req.method === 'POST' && isInitializeRequest(body)) {
    transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(), onsessioninitialized: (id) => sessions.set(id, transport) });
    const server = new McpServer({ name: 'bench', version: '1.0.0' });
    for (let i = 0; i < TOOLS; i++)
      server.registerTool(`tool_${i}`, { description: `Tool ${i} of many: ${'a longer description of what it does. '.repeat(8)}`, inputSchema: { q: z.string() } },
        async () => ({ content: [{ type: 'text', text: 'ok' }] }));
    server.registerTool('lookup', { description: 'Looks a customer up.', inputSchema: { id: z.string().min(1), fields: z.array(z.string()).optional() } },
      async ({ id }) => ({ content: [{ type: 'text', text: `customer ${id}: ok` }] }));
    await server.connect(transport);
  }
  if (!transport) return res.writeHead(404).end();
  await transport.handleRequest(req, res, body);
});
await new Promise((r) => http.listen(0, '127.0.0.1', r));
const upPort = http.address().port;

// tahua in front of it.
const tahuaPort = upPort + 1;
const sha = execFileSync('sh', ['-c', `printf %s ${KEY} | sha256sum`]).toString().split(' ')[0];
const tahua = await startTahua({ bin: TAHUA, port: tahuaPort, cpu: PROXY_CPU, tmp, children, yaml: `listeners: [{address: 127.0.0.1, port: ${tahuaPort}}]
server: {workers: 1}
access_log: {enabled: false}
providers: [{name: crm, type: mcp, base_url: "http://127.0.0.1:${upPort}/mcp", api_key: sk-bench}]
tenants: [{name: bench}]
keys: [{name: k, tenant: bench, sha256: ${sha}}]
mcp: {access: [{tenants: [bench], allow: ["crm__*"]}]}
` });

// nginx in front of it, as a reverse proxy for an event stream is configured.
const nginxPort = upPort + 2;
const nginxWorker = await startNginx({ port: nginxPort, cpu: PROXY_CPU, tmp, children,
  upstream: `upstream mcp { server 127.0.0.1:${upPort}; keepalive 32; }`,
  location: 'proxy_pass http://mcp; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off;' });

const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });
function post(port, path, headers, body) {
  return new Promise((res, rej) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'POST', agent, headers: {
      'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${KEY}`, ...headers } }, (r) => {
      const chunks = [];
      r.on('data', (c) => chunks.push(c));
      r.on('end', () => res({ status: r.statusCode, headers: r.headers, text: Buffer.concat(chunks).toString() }));
    });
    req.on('error', rej);
    req.end(JSON.stringify(body));
  });
}

// A session at `path` (the server's own, or tahua's); returns the headers a call carries.
async function open(port, path) {
  const init = await post(port, path, {}, { jsonrpc: '2.0', id: 0, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bench', version: '1' } } });
  const headers = { 'mcp-session-id': init.headers['mcp-session-id'], 'mcp-protocol-version': '2025-06-18' };
  await post(port, path, headers, { jsonrpc: '2.0', method: 'notifications/initialized' });
  return headers;
}

async function call(port, path, headers, id, name) {
  const r = await post(port, path, headers, { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: { id: `c-${id}` } } });
  if (r.status !== 200 || !r.text.includes(`customer c-${id}: ok`)) throw new Error(`call ${id} on ${port}${path}: ${r.status} ${r.text.slice(0, 200)}`);
}

async function run(port, path, name) {
  const headers = await open(port, path);
  // As an agent does: the list first (tahua: every tool pinned), then the first call
  // (tahua: the upstream session, the catalog).
  await post(port, path, headers, { jsonrpc: '2.0', id: 0, method: 'tools/list' });
  await call(port, path, headers, 1, name);
  let next = 2;
  const t0 = process.hrtime.bigint();
  await Promise.all(Array.from({ length: CLIENTS }, async () => {
    while (next < CALLS + 2) await call(port, path, headers, next++, name);
  }));
  const rate = CALLS / (Number(process.hrtime.bigint() - t0) / 1e9);
  const lat = [];
  for (let i = 0; i < SEQUENTIAL; ++i) {
    const s = process.hrtime.bigint();
    await call(port, path, headers, next++, name);
    lat.push(Number(process.hrtime.bigint() - s) / 1e6);
  }
  lat.sort((a, b) => a - b);
  return { rate, p50: lat[Math.floor(lat.length / 2)] };
}

async function measure(label, port, path, name, pid) {
  const c0 = pid ? cpuTicks(pid) : 0;
  const r = await run(port, path, name);
  const cpu = pid ? ((cpuTicks(pid) - c0) / HZ) * 1e6 / (CALLS + SEQUENTIAL + 1) : NaN;
  console.log(`${label.padEnd(6)} ${r.rate.toFixed(0).padStart(6)} calls/s  p50 ${r.p50.toFixed(3)} ms sequential` +
    (pid ? `  ${cpu.toFixed(1)} µs CPU per call` : ''));
  return { ...r, cpu };
}

console.log(`date: ${new Date().toISOString()}; ${CLIENTS} connections, ${CALLS} calls, then ${SEQUENTIAL} one at a time`);
await run(upPort, '/mcp', 'lookup');  // warm-up
const alone = await measure('alone', upPort, '/mcp', 'lookup', 0);
const results = { nginx: [], tahua: [] };
for (let r = 0; r < ROUNDS; ++r) {
  results.nginx.push(await measure('nginx', nginxPort, '/mcp', 'lookup', nginxWorker));
  results.tahua.push(await measure('tahua', tahuaPort, '/mcp', 'crm__lookup', tahua.pid));
}
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
const m = (k, f) => median(results[k].map(f));
console.log(`median CPU per call: nginx ${m('nginx', (x) => x.cpu).toFixed(1)} µs, tahua ${m('tahua', (x) => x.cpu).toFixed(1)} µs; ` +
  `tahua/nginx ${(m('tahua', (x) => x.cpu) / m('nginx', (x) => x.cpu)).toFixed(2)}`);
console.log(`median p50 added over alone (${alone.p50.toFixed(3)} ms): nginx ${(m('nginx', (x) => x.p50) - alone.p50).toFixed(3)} ms, ` +
  `tahua ${(m('tahua', (x) => x.p50) - alone.p50).toFixed(3)} ms`);
for (const c of children) c.kill('SIGTERM');
http.closeAllConnections();
http.close();
await sleep(300);
rmSync(tmp, { recursive: true, force: true });
process.exit(0);
