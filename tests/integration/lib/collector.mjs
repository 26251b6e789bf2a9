// A scriptable HTTP receiver for what the gateway exports: OTLP/HTTP traces (POST
// /v1/traces), protobuf (decoded by otlp_protobuf.mjs into the JSON mapping's shape) or
// JSON, and usage webhooks (POST /hook). Keeps every body it accepted;
// `failWith(status)` makes it answer an error (a collector that is down) until `recover()`.
// With `tls` (a certificate from certs.mjs) it is an https:// receiver; `connections`
// counts the connections the gateway opened to it.
import { createServer } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { eventually } from './util.mjs';
import { decodeTraceExport } from './otlp_protobuf.mjs';

export class Collector {
  constructor({ tls } = {}) {
    this.bodies = [];     // accepted bodies as JSON, in order: { path, contentType, json }
    this.requests = [];   // every request: { path, headers, status }
    this.failStatus = 0;
    this.connections = 0;
    this.tls = tls;
    const create = tls ? (handler) => createTlsServer({ cert: tls.cert, key: tls.key }, handler) : createServer;
    this.server = create((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const status = this.failStatus || 200;
        this.requests.push({ path: req.url, headers: req.headers, status });
        const contentType = req.headers['content-type'] ?? '';
        const protobuf = contentType === 'application/x-protobuf';
        if (status === 200) {
          const body = Buffer.concat(chunks);
          this.bodies.push({ path: req.url, contentType, json: protobuf ? decodeTraceExport(body) : JSON.parse(body.toString('utf8')) });
        }
        // An empty ExportTraceServiceResponse is zero bytes.
        res.writeHead(status, { 'content-type': protobuf ? 'application/x-protobuf' : 'application/json' });
        res.end(protobuf ? '' : '{}');
      });
    });
    this.server.on('connection', () => this.connections++);
  }

  async start() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return this;
  }

  get url() {
    return this.tls ? `https://localhost:${this.server.address().port}` : `http://127.0.0.1:${this.server.address().port}`;
  }

  failWith(status) {
    this.failStatus = status;
  }

  recover() {
    this.failStatus = 0;
  }

  /** Every span received (in the OTLP JSON shape), flattened, with hex ids. */
  spans() {
    const out = [];
    for (const { json } of this.bodies)
      for (const rs of json.resourceSpans ?? [])
        for (const ss of rs.scopeSpans ?? []) for (const span of ss.spans ?? []) out.push({ ...span, resource: rs.resource });
    return out;
  }

  /** Every usage record received by the webhook. */
  records() {
    return this.bodies.filter((b) => b.path === '/hook').flatMap((b) => b.json);
  }

  async waitFor(fn, what, timeout = 5000) {
    return eventually(() => fn(this), { timeout, what });
  }

  async close() {
    this.server.closeAllConnections?.();
    await new Promise((resolve) => this.server.close(() => resolve()));
  }
}

export async function startCollector({ t, tls } = {}) {
  const c = await new Collector({ tls }).start();
  if (t) t.after(() => c.close());
  return c;
}

/** A span's attributes as a plain object ({ key: value }, ints as numbers). */
export function attributes(span) {
  const out = {};
  for (const { key, value } of span.attributes ?? []) {
    if ('stringValue' in value) out[key] = value.stringValue;
    else if ('intValue' in value) out[key] = Number(value.intValue);
    else if ('doubleValue' in value) out[key] = value.doubleValue;
    else if ('boolValue' in value) out[key] = value.boolValue;
    else if ('arrayValue' in value) out[key] = value.arrayValue.values.map((v) => v.stringValue);
  }
  return out;
}
