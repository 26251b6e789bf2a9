// A tiny HTTP proxy on 127.0.0.1:0 that records every CONNECT target (HTTPS_PROXY)
// and every absolute-form request (HTTP_PROXY). It only reaches loopback targets.
import http from 'node:http';
import net from 'node:net';

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

export class ConnectProxy {
  constructor(server) {
    this.server = server;
    this.connects = []; // "host:port" as sent in the CONNECT request line
    this.requests = []; // non-CONNECT (absolute-form) request targets
    this.sockets = new Set();
    server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    server.on('connect', (req, client, head) => this.onConnect(req, client, head));
    server.on('request', (req, res) => this.onRequest(req, res));
  }

  get port() {
    return this.server.address().port;
  }

  get url() {
    return `http://127.0.0.1:${this.port}`;
  }

  // Forwards an absolute-form request ("POST http://host:port/path") to a loopback host.
  onRequest(req, res) {
    this.requests.push(req.url);
    let target;
    try {
      target = new URL(req.url);
    } catch {
      res.writeHead(400).end('absolute-form request expected\n');
      return;
    }
    if (target.protocol !== 'http:' || !LOOPBACK.has(target.hostname)) {
      res.writeHead(403).end('loopback http targets only\n');
      return;
    }
    const upstream = http.request(
      { host: '127.0.0.1', port: target.port, method: req.method, path: target.pathname + target.search, headers: req.headers },
      (upRes) => {
        res.writeHead(upRes.statusCode, upRes.headers);
        upRes.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  }

  onConnect(req, client, head) {
    this.connects.push(req.url);
    const idx = req.url.lastIndexOf(':');
    const host = req.url.slice(0, idx);
    const port = Number(req.url.slice(idx + 1));
    if (!LOOPBACK.has(host) || !port) {
      client.end('HTTP/1.1 403 Forbidden\r\n\r\n');
      return;
    }
    const upstream = net.connect({ host: '127.0.0.1', port }, () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    this.sockets.add(upstream);
    upstream.on('close', () => this.sockets.delete(upstream));
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
  }

  async close() {
    for (const s of this.sockets) s.destroy();
    await new Promise((resolve) => this.server.close(() => resolve()));
  }
}

export async function startConnectProxy({ t } = {}) {
  const proxy = new ConnectProxy(http.createServer());
  await new Promise((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
  if (t) t.after(() => proxy.close());
  return proxy;
}
