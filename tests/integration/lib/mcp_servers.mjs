// Upstream MCP servers for the MCP gateway's tests, made with the official TypeScript SDK
// (McpServer over StreamableHTTPServerTransport, one transport per session, as the SDK's
// own examples do). Each records the HTTP requests it got, so a test can check what the
// gateway sent (its credentials, the upstream session, the tool's own name).
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

/**
 * Starts a server on a loopback port. `setup(server, state)` registers its tools,
 * prompts and resources on each session's McpServer; `state` is shared by the sessions
 * (a test changes a tool there, and the next session sees it).
 */
export async function startMcpServer({ t, name, setup }) {
  const state = { requests: [], sessions: new Map(), deleted: [], servers: [] };
  const http = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const text = Buffer.concat(chunks).toString();
    let body;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      res.writeHead(400).end();
      return;
    }
    state.requests.push({ method: req.method, headers: req.headers, body });
    const sid = req.headers['mcp-session-id'];
    let transport = sid ? state.sessions.get(sid) : undefined;
    if (!transport) {
      if (sid || req.method !== 'POST' || !isInitializeRequest(body)) {
        res.writeHead(sid ? 404 : 400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: sid ? 'Session not found' : 'No session' } }));
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => state.sessions.set(id, transport),
      });
      transport.onclose = () => {
        if (transport.sessionId) {
          state.sessions.delete(transport.sessionId);
          state.deleted.push(transport.sessionId);
        }
      };
      const server = new McpServer({ name, version: '1.0.0' });
      setup(server, state);
      state.servers.push(server);
      await server.connect(transport);
    }
    await transport.handleRequest(req, res, body);
  });
  await new Promise((resolve) => http.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${http.address().port}/mcp`;
  const stop = () => new Promise((resolve) => { http.closeAllConnections(); http.close(() => resolve()); });
  if (t) t.after(stop);
  return { url, state, stop, calls: (method) => state.requests.filter((r) => r.body?.method === method) };
}

/** An `mcp` provider entry for the gateway's config. */
export function mcpProvider(name, url, extra = {}) {
  return { name, type: 'mcp', base_url: url, api_key: `sk-${name}-server-key`, timeouts: { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' }, ...extra };
}
