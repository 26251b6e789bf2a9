// The MCP "everything server": every tool, prompt and resource the MCP conformance suite's
// server scenarios (@modelcontextprotocol/conformance 0.1.13) ask for, made with the official
// SDK's low-level Server (McpServer turns tool schemas into zod, and json_schema_2020_12_tool
// needs its JSON Schema listed as written). One StreamableHTTPServerTransport per session,
// each with an event store, so a stream closed mid-call can be resumed with Last-Event-ID.
// test_sampling and test_elicitation ask the client on the session's GET stream, as the
// suite's reference server does (a message sent while there is none is not delivered:
// the tool then fails); the SEP-1034 and SEP-1330 elicitations ask on the call's stream.
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { deflateSync, crc32 } from 'node:zlib';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema, CompleteRequestSchema, CreateMessageResultSchema, ErrorCode, GetPromptRequestSchema,
  isInitializeRequest, ListPromptsRequestSchema, ListResourcesRequestSchema, ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema, LoggingLevelSchema, McpError, ReadResourceRequestSchema, SetLevelRequestSchema,
  SubscribeRequestSchema, UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// How long a request to the client waits for its answer: short, so one lost fails the tool.
const ASK_TIMEOUT_MS = 10_000;
const text = (t) => ({ type: 'text', text: t });

/** A 1x1 red PNG, built here so the bytes are a valid image by construction. */
function redPixelPng() {
  const chunk = (type, data) => {
    const head = Buffer.alloc(8);
    head.writeUInt32BE(data.length, 0);
    head.write(type, 4, 'ascii');
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0);
    return Buffer.concat([head, data, crc]);
  };
  const ihdr = Buffer.from([0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0]); // 1x1, 8-bit RGB
  const pixels = deflateSync(Buffer.from([0, 255, 0, 0])); // filter byte, then R G B
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk('IHDR', ihdr), chunk('IDAT', pixels), chunk('IEND', Buffer.alloc(0))]).toString('base64');
}

/** 20 ms of a 440 Hz tone as 8 kHz mono 16-bit PCM WAV. */
function toneWav() {
  const rate = 8000, samples = 160;
  const wav = Buffer.alloc(44 + samples * 2);
  wav.write('RIFF', 0, 'ascii');
  wav.writeUInt32LE(36 + samples * 2, 4);
  wav.write('WAVEfmt ', 8, 'ascii');
  wav.writeUInt32LE(16, 16);
  wav.writeUInt16LE(1, 20); // PCM
  wav.writeUInt16LE(1, 22); // mono
  wav.writeUInt32LE(rate, 24);
  wav.writeUInt32LE(rate * 2, 28);
  wav.writeUInt16LE(2, 32);
  wav.writeUInt16LE(16, 34);
  wav.write('data', 36, 'ascii');
  wav.writeUInt32LE(samples * 2, 40);
  for (let i = 0; i < samples; i++) wav.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / rate)), 44 + i * 2);
  return wav.toString('base64');
}

const PNG = redPixelPng();
const WAV = toneWav();

/**
 * Keeps a session's SSE events in memory, so a client that lost a stream can GET it
 * again with Last-Event-ID and get what it missed.
 */
class MemoryEventStore {
  constructor() {
    this.events = []; // { id, streamId, message }, in the order they were sent
    this.next = 0;
  }
  async storeEvent(streamId, message) {
    const id = `${streamId}:${++this.next}`;
    this.events.push({ id, streamId, message });
    return id;
  }
  async getStreamIdForEventId(eventId) {
    return this.events.find((e) => e.id === eventId)?.streamId;
  }
  async replayEventsAfter(lastEventId, { send }) {
    const at = this.events.findIndex((e) => e.id === lastEventId);
    if (at < 0) throw new Error(`unknown event id ${lastEventId}`);
    const { streamId } = this.events[at];
    for (const e of this.events.slice(at + 1)) {
      // Priming events are stored as {} only to own an id; they carry no message.
      if (e.streamId === streamId && e.message.jsonrpc) await send(e.id, e.message);
    }
    return streamId;
  }
}

const TOOLS = [
  { name: 'test_simple_text', description: 'Returns a simple text content block', inputSchema: { type: 'object', properties: {} } },
  { name: 'test_image_content', description: 'Returns a 1x1 red PNG image', inputSchema: { type: 'object', properties: {} } },
  { name: 'test_audio_content', description: 'Returns a short WAV tone', inputSchema: { type: 'object', properties: {} } },
  { name: 'test_embedded_resource', description: 'Returns an embedded text resource', inputSchema: { type: 'object', properties: {} } },
  { name: 'test_multiple_content_types', description: 'Returns text, image and resource content together', inputSchema: { type: 'object', properties: {} } },
  { name: 'test_tool_with_logging', description: 'Sends three info log messages while it runs', inputSchema: { type: 'object', properties: {} } },
  { name: 'test_tool_with_progress', description: 'Reports progress 0, 50 and 100 of 100', inputSchema: { type: 'object', properties: {} } },
  { name: 'test_error_handling', description: 'Always fails with isError: true', inputSchema: { type: 'object', properties: {} } },
  {
    name: 'test_sampling', description: 'Asks the client for an LLM completion of the prompt',
    inputSchema: { type: 'object', properties: { prompt: { type: 'string', description: 'The prompt to send to the LLM' } }, required: ['prompt'] },
  },
  {
    name: 'test_elicitation', description: 'Asks the user, through the client, for a username and email',
    inputSchema: { type: 'object', properties: { message: { type: 'string', description: 'The message to show the user' } }, required: ['message'] },
  },
  { name: 'test_elicitation_sep1034_defaults', description: 'Elicits a form whose primitive fields have defaults (SEP-1034)', inputSchema: { type: 'object', properties: {} } },
  { name: 'test_elicitation_sep1330_enums', description: 'Elicits a form with every enum variant (SEP-1330)', inputSchema: { type: 'object', properties: {} } },
  {
    name: 'json_schema_2020_12_tool', description: 'Tool with JSON Schema 2020-12 features',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: { address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
      properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
      additionalProperties: false,
    },
  },
  { name: 'test_reconnection', description: 'Closes its SSE stream mid-call, so the client must resume to get the result', inputSchema: { type: 'object', properties: {} } },
];

const RESOURCES = {
  'test://static-text': { name: 'static-text', description: 'A static text resource', mimeType: 'text/plain', text: 'This is the content of the static text resource.' },
  'test://static-binary': { name: 'static-binary', description: 'A static binary resource (a PNG)', mimeType: 'image/png', blob: PNG },
  'test://watched-resource': { name: 'watched-resource', description: 'A resource to subscribe to', mimeType: 'text/plain', text: 'Watched resource content.' },
};
const TEMPLATE = /^test:\/\/template\/([^/]+)\/data$/;

const PROMPTS = [
  { name: 'test_simple_prompt', description: 'A prompt without arguments' },
  {
    name: 'test_prompt_with_arguments', description: 'A prompt that fills in two arguments',
    arguments: [{ name: 'arg1', description: 'First test argument', required: true }, { name: 'arg2', description: 'Second test argument', required: true }],
  },
  {
    name: 'test_prompt_with_embedded_resource', description: 'A prompt that embeds a resource',
    arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }],
  },
  { name: 'test_prompt_with_image', description: 'A prompt with an image' },
];

// Completion candidates for the prompt arguments; a client's partial value filters them.
const COMPLETIONS = { arg1: ['paris', 'park', 'party', 'test', 'testing'], arg2: ['hello', 'help', 'world'] };

const LEVELS = LoggingLevelSchema.options; // least to most severe

/** Registers the handlers on one session's Server; `session` holds its log level and subscriptions. */
function setup(server, session, state) {
  // Sent on the call's own stream (not the standalone GET one), filtered by the session's level.
  const log = async (extra, level, data) => {
    if (session.logLevel && LEVELS.indexOf(level) < LEVELS.indexOf(session.logLevel)) return;
    await extra.sendNotification({ method: 'notifications/message', params: { level, logger: 'everything', data } });
  };

  server.setRequestHandler(SetLevelRequestSchema, async (req) => {
    session.logLevel = req.params.level;
    return {};
  });

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));

  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const args = req.params.arguments ?? {};
    state.calls.push({ session: session.id, name: req.params.name, arguments: args });
    switch (req.params.name) {
      case 'test_simple_text':
        return { content: [text('This is a simple text response for testing.')] };
      case 'test_image_content':
        return { content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] };
      case 'test_audio_content':
        return { content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] };
      case 'test_embedded_resource':
        return { content: [{ type: 'resource', resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } }] };
      case 'test_multiple_content_types':
        return {
          content: [
            text('Multiple content types test:'),
            { type: 'image', data: PNG, mimeType: 'image/png' },
            { type: 'resource', resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: JSON.stringify({ test: 'data', value: 123 }) } },
          ],
        };
      case 'test_tool_with_logging':
        // The delays make the client take the messages one by one, mid-call.
        await log(extra, 'info', 'Tool execution started');
        await sleep(50);
        await log(extra, 'info', 'Tool processing data');
        await sleep(50);
        await log(extra, 'info', 'Tool execution completed');
        return { content: [text('Tool with logging executed successfully')] };
      case 'test_tool_with_progress': {
        const progressToken = req.params._meta?.progressToken;
        for (const progress of [0, 50, 100]) {
          if (progress) await sleep(50);
          if (progressToken !== undefined) {
            await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress, total: 100, message: `Completed step ${progress / 50 + 1} of 3` } });
          }
        }
        return { content: [text('Tool with progress executed successfully')] };
      }
      case 'test_error_handling':
        return { isError: true, content: [text('This tool intentionally returns an error for testing')] };
      case 'test_sampling': {
        if (!server.getClientCapabilities()?.sampling) return { isError: true, content: [text('The client does not support sampling')] };
        // Not related to the call: on the GET stream.
        const result = await server.request({
          method: 'sampling/createMessage',
          params: { messages: [{ role: 'user', content: text(String(args.prompt ?? '')) }], maxTokens: 100 },
        }, CreateMessageResultSchema, { timeout: ASK_TIMEOUT_MS });
        const reply = result.content?.type === 'text' ? result.content.text : JSON.stringify(result.content);
        return { content: [text(`LLM response: ${reply}`)] };
      }
      case 'test_elicitation':
        return elicit(server, undefined, 'User response', {
          message: String(args.message ?? ''),
          requestedSchema: {
            type: 'object',
            properties: { username: { type: 'string', description: "User's response" }, email: { type: 'string', description: "User's email address" } },
            required: ['username', 'email'],
          },
        });
      case 'test_elicitation_sep1034_defaults':
        return elicit(server, extra, 'Elicitation completed', {
          message: 'Please review and update the form fields with defaults',
          requestedSchema: {
            type: 'object',
            properties: {
              name: { type: 'string', description: 'User name', default: 'John Doe' },
              age: { type: 'integer', description: 'User age', default: 30 },
              score: { type: 'number', description: 'User score', default: 95.5 },
              status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
              verified: { type: 'boolean', description: 'Verification status', default: true },
            },
            required: [],
          },
        });
      case 'test_elicitation_sep1330_enums':
        return elicit(server, extra, 'Elicitation completed', {
          message: 'Please pick from each kind of enum',
          requestedSchema: {
            type: 'object',
            properties: {
              untitledSingle: { type: 'string', description: 'Untitled single-select', enum: ['option1', 'option2', 'option3'] },
              titledSingle: {
                type: 'string', description: 'Titled single-select',
                oneOf: [{ const: 'value1', title: 'First Option' }, { const: 'value2', title: 'Second Option' }, { const: 'value3', title: 'Third Option' }],
              },
              legacyEnum: { type: 'string', description: 'Legacy titled enum', enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'] },
              untitledMulti: { type: 'array', description: 'Untitled multi-select', items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
              titledMulti: {
                type: 'array', description: 'Titled multi-select',
                items: { anyOf: [{ const: 'value1', title: 'First Choice' }, { const: 'value2', title: 'Second Choice' }, { const: 'value3', title: 'Third Choice' }] },
              },
            },
            required: [],
          },
        });
      case 'json_schema_2020_12_tool':
        return { content: [text(`Received: ${JSON.stringify(args)}`)] };
      case 'test_reconnection':
        // closeSSEStream exists only for clients that can resume (an event store here, and
        // protocol 2025-11-25 or later); the result then waits in the event store.
        if (extra.closeSSEStream) {
          await sleep(50);
          extra.closeSSEStream();
          state.reconnections.push(session.id);
          await sleep(100);
        }
        return { content: [text('Reconnection test completed successfully')] };
      default:
        throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${req.params.name}`);
    }
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: Object.entries(RESOURCES).map(([uri, r]) => ({ uri, name: r.name, description: r.description, mimeType: r.mimeType })),
  }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [{ uriTemplate: 'test://template/{id}/data', name: 'template-data', description: 'Data for the given id', mimeType: 'application/json' }],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => {
    const { uri } = req.params;
    const r = RESOURCES[uri];
    if (r) return { contents: [{ uri, mimeType: r.mimeType, ...(r.blob ? { blob: r.blob } : { text: r.text }) }] };
    const m = TEMPLATE.exec(uri);
    if (m) {
      const id = decodeURIComponent(m[1]);
      return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }] };
    }
    throw new McpError(-32002, `Resource not found: ${uri}`, { uri });
  });
  server.setRequestHandler(SubscribeRequestSchema, async (req) => {
    session.subscriptions.add(req.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
    session.subscriptions.delete(req.params.uri);
    return {};
  });

  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts: PROMPTS }));
  server.setRequestHandler(GetPromptRequestSchema, async (req) => {
    const { name } = req.params;
    const args = req.params.arguments ?? {};
    const prompt = PROMPTS.find((p) => p.name === name);
    if (!prompt) throw new McpError(ErrorCode.InvalidParams, `Unknown prompt: ${name}`);
    const missing = (prompt.arguments ?? []).filter((a) => a.required && args[a.name] === undefined).map((a) => a.name);
    if (missing.length) throw new McpError(ErrorCode.InvalidParams, `Missing required arguments: ${missing.join(', ')}`);
    switch (name) {
      case 'test_simple_prompt':
        return { messages: [{ role: 'user', content: text('This is a simple prompt for testing.') }] };
      case 'test_prompt_with_arguments':
        return { messages: [{ role: 'user', content: text(`Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'`) }] };
      case 'test_prompt_with_embedded_resource':
        return {
          messages: [
            { role: 'user', content: { type: 'resource', resource: { uri: args.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
            { role: 'user', content: text('Please process the embedded resource above.') },
          ],
        };
      default: // test_prompt_with_image
        return {
          messages: [
            { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
            { role: 'user', content: text('Please analyze the image above.') },
          ],
        };
    }
  });

  server.setRequestHandler(CompleteRequestSchema, async (req) => {
    const { ref, argument } = req.params;
    const pool = ref.type === 'ref/prompt' && ref.name === 'test_prompt_with_arguments' ? COMPLETIONS[argument.name] ?? [] : [];
    const values = pool.filter((v) => v.startsWith(argument.value));
    return { completion: { values, total: values.length, hasMore: false } };
  });
}

/**
 * Elicits on the call's own stream (`extra` given) or on the GET stream; the SDK checks an
 * accepted answer against the schema.
 */
async function elicit(server, extra, label, params) {
  if (!server.getClientCapabilities()?.elicitation) return { isError: true, content: [text('The client does not support elicitation')] };
  const result = await server.elicitInput(params, { relatedRequestId: extra?.requestId, timeout: ASK_TIMEOUT_MS });
  return { content: [text(`${label}: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`)] };
}

const LOOPBACK = ['localhost', '127.0.0.1', '[::1]'];

/** DNS rebinding protection: Host, and Origin when sent, must name this machine. */
function trustedHost(req, allowed) {
  const hostname = (value) => {
    try {
      return new URL(value).hostname.toLowerCase();
    } catch {
      return undefined;
    }
  };
  if (!allowed.includes(hostname(`http://${req.headers.host ?? ''}`))) return false;
  return req.headers.origin === undefined || allowed.includes(hostname(req.headers.origin));
}

/**
 * Starts the everything server on a loopback port. `allowedHosts` adds host names (no port)
 * to the loopback ones that Host and Origin may carry. `state.streamDelayMs` (0) holds
 * each GET that long before it is served: its stream opens after a call made with it, as
 * when the GET comes the longer way (a gateway opening a connection for it).
 */
export async function startEverythingServer({ t, port = 0, allowedHosts = [] } = {}) {
  const allowed = [...LOOPBACK, ...allowedHosts.map((h) => h.toLowerCase())];
  // sessions: id -> { id, transport, server, logLevel, subscriptions }
  const state = { requests: [], sessions: new Map(), deleted: [], calls: [], reconnections: [], rejected: [], streamDelayMs: 0 };
  const http = createServer(async (req, res) => {
    const reply = (status, message) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message } }));
    };
    if (!trustedHost(req, allowed)) {
      state.rejected.push({ host: req.headers.host, origin: req.headers.origin });
      reply(403, 'Forbidden: untrusted Host or Origin');
      return;
    }
    if (new URL(req.url, 'http://x').pathname !== '/mcp') {
      reply(404, 'Not found');
      return;
    }
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks).toString();
    let body;
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }));
      return;
    }
    state.requests.push({ method: req.method, headers: req.headers, body });
    if (req.method === 'GET' && state.streamDelayMs > 0) await sleep(state.streamDelayMs);
    const sid = req.headers['mcp-session-id'];
    let transport = sid ? state.sessions.get(sid)?.transport : undefined;
    if (!transport) {
      if (sid || req.method !== 'POST' || !isInitializeRequest(body)) {
        reply(sid ? 404 : 400, sid ? 'Session not found' : 'No session');
        return;
      }
      const session = { id: undefined, transport: undefined, server: undefined, logLevel: undefined, subscriptions: new Set() };
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: new MemoryEventStore(),
        retryInterval: 200, // short, so a resuming client comes back quickly
        onsessioninitialized: (id) => {
          session.id = id;
          state.sessions.set(id, session);
        },
      });
      transport.onclose = () => {
        if (session.id && state.sessions.delete(session.id)) state.deleted.push(session.id);
      };
      const server = new Server(
        { name: 'tahua-everything-server', version: '1.0.0' },
        { capabilities: { tools: {}, prompts: {}, resources: { subscribe: true }, logging: {}, completions: {} } },
      );
      Object.assign(session, { transport, server });
      setup(server, session, state);
      await server.connect(transport);
    }
    await transport.handleRequest(req, res, body);
  });
  await new Promise((resolve) => http.listen(port, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${http.address().port}/mcp`;
  const stop = async () => {
    // Closing the servers ends their open SSE streams, so close() does not wait on them.
    await Promise.allSettled([...state.sessions.values()].map((s) => s.server.close()));
    http.closeAllConnections();
    await new Promise((resolve) => http.close(() => resolve()));
  };
  if (t) t.after(stop);
  return { url, stop, state };
}
