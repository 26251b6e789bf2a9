// The MCP gateway (issue 25, item 3): /mcp in front of two MCP servers made with the
// official TypeScript SDK, used by the SDK's own client as an agent would. Tools and
// prompts of both servers are merged under "<server>__<name>"; a call goes to its
// server with the gateway's credentials and the upstream session, its progress
// notifications relayed as they come; the session lives in the state store, so a client
// whose replica dies goes on through another. Access rules hide tools (a hidden tool
// answers as an unknown one), a changed tool definition is held until an admin approves
// it, arguments are checked against the tool's schema before the call, and every call is
// counted and logged.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { gatewayConfig, openaiProvider, startTahua } from './lib/tahua.mjs';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { startMcpServer, mcpProvider } from './lib/mcp_servers.mjs';
import { startRedis } from './lib/redis.mjs';
import { scrape, sum } from './lib/metrics.mjs';
import { adminSection, TOKEN } from './lib/admin.mjs';
import { request } from './lib/http.mjs';

const sha256 = (b) => createHash('sha256').update(b).digest('hex');
const A = 'tk-mcp-team-a-0123456789';
const B = 'tk-mcp-team-b-0123456789';

// github: issues (with progress), and a tool only some may see.
function github(server, state) {
  server.registerTool('create_issue', {
    description: state.issueDescription ?? 'Opens an issue.',
    inputSchema: { title: z.string().min(3), labels: z.array(z.string()).optional() },
  }, async ({ title, labels }) => ({ content: [{ type: 'text', text: `opened "${title}"${labels ? ' ' + labels.join(',') : ''}` }] }));
  server.registerTool('count', {
    description: 'Counts to n, telling its progress.',
    inputSchema: { n: z.number().int().min(1).max(10) },
  }, async ({ n }, extra) => {
    const token = extra._meta?.progressToken;
    for (let i = 1; i <= n; i++)
      if (token !== undefined) await extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: n } });
    return { content: [{ type: 'text', text: `counted to ${n}` }] };
  });
  server.registerTool('delete_repo', { description: 'Deletes a repository.', inputSchema: { repo: z.string() } },
    async ({ repo }) => ({ content: [{ type: 'text', text: `deleted ${repo}` }] }));
  server.registerTool('fail', { description: 'Always fails.', inputSchema: {} },
    async () => ({ isError: true, content: [{ type: 'text', text: 'it failed' }] }));
}

// docs: a tool with the same name as github's (no shadowing), a prompt and a resource.
function docs(server) {
  server.registerTool('create_issue', { description: 'Files a docs bug.', inputSchema: { title: z.string() } },
    async ({ title }) => ({ content: [{ type: 'text', text: `docs bug "${title}"` }] }));
  server.registerTool('search', { description: 'Searches the docs.', inputSchema: { query: z.string() } },
    async ({ query }) => ({ content: [{ type: 'text', text: `results for ${query}` }] }));
  server.registerPrompt('summarize', { description: 'Summarizes a page.', argsSchema: { page: z.string() } },
    ({ page }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Summarize ${page}` } }] }));
  server.registerResource('readme', 'docs://readme', { mimeType: 'text/plain' },
    async (uri) => ({ contents: [{ uri: uri.href, text: 'the readme' }] }));
}

async function start(t, { mcp, store, servers } = {}) {
  const gh = servers?.gh ?? await startMcpServer({ t, name: 'github', setup: github });
  const dc = servers?.dc ?? await startMcpServer({ t, name: 'docs', setup: docs });
  const upstream = await startMockUpstream({ t });
  const config = gatewayConfig({
    providers: [openaiProvider('up', upstream.baseUrl()), mcpProvider('github', gh.url), mcpProvider('docs', dc.url)],
    models: [{ name: 'fast', provider: 'up' }],
  });
  config.tenants = [{ name: 'team-a' }, { name: 'team-b' }];
  config.keys = [
    { name: 'a', tenant: 'team-a', sha256: sha256(A), models: ['fast'] },
    { name: 'b', tenant: 'team-b', sha256: sha256(B) },
  ];
  config.admin = adminSection();
  if (mcp) config.mcp = mcp;
  if (store) config.store = store;
  const gw = await startTahua({ t, config });
  return { gw, gh, dc };
}

// The SDK's client through the gateway, with a caller's key. `to()` says where each
// request goes (a load balancer in front of replicas, in the failover test).
async function connect(t, to, key) {
  const where = typeof to === 'function' ? to : () => to;
  const transport = new StreamableHTTPClientTransport(new URL('http://placeholder/mcp'), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
    fetch: (url, init) => fetch(String(url).replace('http://placeholder', where()), init),
  });
  const client = new Client({ name: 'mcp-gateway-test', version: '1.0.0' });
  await client.connect(transport);
  t.after(() => client.close().catch(() => {}));
  return { client, transport };
}

const text = (result) => result.content.map((c) => c.text).join('');

describe('MCP gateway', () => {
  it('merges both servers\' tools, prompts and resources under server__name, and routes calls with the gateway\'s credentials', async (t) => {
    const { gw, gh, dc } = await start(t);
    const { client, transport } = await connect(t, gw.url, A);
    assert.equal(transport.protocolVersion, '2025-11-25', 'the revision the SDK negotiates');
    assert.equal(client.getServerVersion().name, 'tahua');

    const { tools } = await client.listTools();
    const names = tools.map((x) => x.name).sort();
    assert.deepEqual(names, ['docs__create_issue', 'docs__search', 'github__count', 'github__create_issue', 'github__delete_repo', 'github__fail']);
    assert.equal(tools.find((x) => x.name === 'github__create_issue').description, 'Opens an issue.');
    assert.equal(tools.find((x) => x.name === 'docs__create_issue').description, 'Files a docs bug.');

    // Same tool name on two servers: each call reaches its own.
    assert.equal(text(await client.callTool({ name: 'github__create_issue', arguments: { title: 'crash' } })), 'opened "crash"');
    assert.equal(text(await client.callTool({ name: 'docs__create_issue', arguments: { title: 'typo' } })), 'docs bug "typo"');
    const call = gh.calls('tools/call').at(-1);
    assert.equal(call.body.params.name, 'create_issue', 'the server gets its own tool name');
    assert.equal(call.headers.authorization, 'Bearer sk-github-server-key', 'the gateway\'s credentials, never the caller\'s key');
    assert.ok(gh.state.sessions.has(call.headers['mcp-session-id']), 'the call runs in the upstream session the gateway opened');
    assert.ok(!JSON.stringify(dc.state.requests).includes(A), 'the caller\'s key reaches no server');

    const { prompts } = await client.listPrompts();
    assert.deepEqual(prompts.map((p) => p.name), ['docs__summarize']);
    const prompt = await client.getPrompt({ name: 'docs__summarize', arguments: { page: 'intro' } });
    assert.equal(prompt.messages[0].content.text, 'Summarize intro');
    const { resources } = await client.listResources();
    assert.deepEqual(resources.map((r) => r.uri), ['docs://readme']);
    const read = await client.readResource({ uri: 'docs://readme' });
    assert.equal(read.contents[0].text, 'the readme');

    // A tool's own error is the tool's answer; an unknown tool is a JSON-RPC error.
    const failed = await client.callTool({ name: 'github__fail', arguments: {} });
    assert.equal(failed.isError, true);
    await assert.rejects(client.callTool({ name: 'github__nope', arguments: {} }), /Unknown tool: github__nope/);
    await assert.rejects(client.callTool({ name: 'nope', arguments: {} }), /Unknown tool: nope/);

    const m = await scrape(gw.url);
    assert.equal(sum(m, 'tahua_mcp_tool_calls_total', { server: 'github', tool: 'create_issue', outcome: 'ok' }), 1);
    assert.equal(sum(m, 'tahua_mcp_tool_calls_total', { server: 'github', tool: 'fail', outcome: 'tool_error' }), 1);
    assert.equal(sum(m, 'tahua_mcp_tool_calls_total', { server: '', tool: '', outcome: 'unknown_tool' }), 2);
    assert.equal(sum(m, 'tahua_mcp_sessions_total'), 1);
    // The audit trail: the access log line of each call names tenant, key, tool, outcome, duration; never the arguments.
    const lines = await gw.waitForAccessLog((l) => l.mcp_method === 'tools/call', { count: 5 });
    const ok = lines.find((l) => l.mcp_tool === 'github__create_issue');
    assert.equal(ok.tenant, 'team-a');
    assert.equal(ok.key, 'a');
    assert.equal(ok.mcp_outcome, 'ok');
    assert.equal(typeof ok.duration_ms, 'number');
    assert.ok(!JSON.stringify(lines).includes('crash'), 'arguments are not logged unless mcp.audit_arguments');
  });

  it('relays a tool\'s progress notifications as they come', async (t) => {
    const { gw } = await start(t);
    const { client } = await connect(t, gw.url, A);
    const progress = [];
    const result = await client.callTool({ name: 'github__count', arguments: { n: 4 } }, undefined, { onprogress: (p) => progress.push(p) });
    assert.equal(text(result), 'counted to 4');
    assert.deepEqual(progress.map((p) => [p.progress, p.total]), [[1, 4], [2, 4], [3, 4], [4, 4]]);
  });
});
