// A fake Kubernetes API server for the tests: no API server can run here, so this one
// speaks the parts of the real wire format tahua uses (the one exception to "mocks only
// for the LLM providers"). HTTPS with a test CA, bearer tokens read from a file that the
// test rotates, and for the tahua.dev/v1 kinds:
//   GET  /apis/tahua.dev/v1/namespaces/{ns}/{plural}            a List with metadata.resourceVersion
//   GET  ...?watch=1&resourceVersion=N&timeoutSeconds=S          chunked JSON lines {type, object}:
//        the events after N, then live ones, BOOKMARKs on request; a version older than the
//        kept history answers an ERROR event with a 410 Status (as the real server does
//        once the history is compacted), or an HTTP 410 with `gone: 'status'`
//   GET / PATCH /apis/apps/v1/namespaces/{ns}/deployments/{name}/scale   (merge-patch+json)
// Other paths are 404 with a Status body, like the real server's.
import https from 'node:https';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeCa, issueCert } from './certs.mjs';
import { makeTempDir } from './util.mjs';

const PLURALS = {
  modelroutes: 'ModelRoute',
  ratelimitpolicies: 'RateLimitPolicy',
  prompttemplates: 'PromptTemplate',
  plugins: 'Plugin',
  guardrailpolicies: 'GuardrailPolicy',
};

const status = (code, reason, message) => ({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code });

export class FakeKubeApi {
  constructor({ namespace = 'tahua', token = 'token-1' } = {}) {
    this.namespace = namespace;
    this.dir = makeTempDir('tahua-kube-');
    this.tokenFile = join(this.dir, 'token');
    this.namespaceFile = join(this.dir, 'namespace');
    writeFileSync(this.namespaceFile, `${namespace}\n`);
    this.rotateToken(token);
    this.version = 100;
    this.objects = {}; // plural -> name -> object
    for (const p of Object.keys(PLURALS)) this.objects[p] = new Map();
    this.history = []; // { version, plural, type, object }
    this.compactedBefore = 0; // watches from an older version get 410
    this.watches = new Set(); // { plural, res, from }
    this.deployments = new Map(); // name -> replicas
    this.requests = []; // { method, path, authorized }
    this.patches = []; // { name, body }
    this.gone = 'event';
  }

  /** Writes a new token to the token file; the old one stops working. */
  rotateToken(token) {
    this.token = token;
    writeFileSync(this.tokenFile, `${token}\n`);
  }

  async start() {
    const ca = makeCa('fake kube CA');
    const cert = issueCert(ca, ['DNS:localhost', 'IP:127.0.0.1']);
    this.caFile = ca.caFile;
    this.server = https.createServer({ cert: cert.cert, key: cert.key }, (req, res) => this.handle(req, res));
    // Every socket, so close() ends them all (tahua reconnects its watches at once).
    this.sockets = new Set();
    this.server.on('connection', (s) => {
      if (this.closing) return s.destroy();
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `https://127.0.0.1:${this.server.address().port}`;
    return this;
  }

  async close() {
    this.closing = true;
    const closed = new Promise((resolve) => this.server.close(resolve));
    for (const s of this.sockets) s.destroy();
    await closed;
  }

  /** The `kubernetes` config section for tahua. */
  configSection(extra = {}) {
    return { resources: true, api_server: this.url, namespace: this.namespace, token_file: this.tokenFile, ca_file: this.caFile, ...extra };
  }

  /** kubectl apply: creates or replaces an object of `kind` (plural) and tells the watches. */
  apply(plural, name, spec) {
    const map = this.objects[plural];
    const type = map.has(name) ? 'MODIFIED' : 'ADDED';
    this.version += 1;
    const object = {
      apiVersion: 'tahua.dev/v1',
      kind: PLURALS[plural],
      metadata: { name, namespace: this.namespace, resourceVersion: String(this.version), uid: `uid-${plural}-${name}` },
      spec,
    };
    map.set(name, object);
    this.event(plural, type, object);
    return object;
  }

  /** kubectl delete. */
  remove(plural, name) {
    const object = this.objects[plural].get(name);
    if (!object) return;
    this.objects[plural].delete(name);
    this.version += 1;
    this.event(plural, 'DELETED', { ...object, metadata: { ...object.metadata, resourceVersion: String(this.version) } });
  }

  event(plural, type, object) {
    this.history.push({ version: this.version, plural, type, object });
    for (const w of this.watches) if (w.plural === plural) w.res.write(`${JSON.stringify({ type, object })}\n`);
  }

  /** Forgets the history (etcd compaction): a watch from an older version is gone. */
  compact() {
    this.compactedBefore = this.version;
    this.history = [];
  }

  /** Ends every open watch (as the server does at timeoutSeconds, or on a restart). */
  endWatches() {
    for (const w of this.watches) w.res.end();
    this.watches.clear();
  }

  /** Sends a BOOKMARK with the current version to every watch. */
  bookmark() {
    for (const w of this.watches)
      w.res.write(`${JSON.stringify({ type: 'BOOKMARK', object: { kind: PLURALS[w.plural], apiVersion: 'tahua.dev/v1', metadata: { resourceVersion: String(this.version) } } })}\n`);
  }

  openWatches(plural) {
    return [...this.watches].filter((w) => !plural || w.plural === plural).length;
  }

  json(res, code, body) {
    res.writeHead(code, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  }

  handle(req, res) {
    const url = new URL(req.url, 'https://fake');
    const authorized = req.headers.authorization === `Bearer ${this.token}`;
    this.requests.push({ method: req.method, path: url.pathname, query: url.search, authorized });
    if (!authorized) return this.json(res, 401, status(401, 'Unauthorized', 'Unauthorized'));
    const parts = url.pathname.split('/').filter(Boolean);
    // /apis/tahua.dev/v1/namespaces/{ns}/{plural}
    if (parts.length === 6 && parts[0] === 'apis' && parts[1] === 'tahua.dev' && parts[2] === 'v1' && parts[3] === 'namespaces') {
      const [, , , , ns, plural] = parts;
      if (ns !== this.namespace || !PLURALS[plural]) return this.json(res, 404, status(404, 'NotFound', 'the server could not find the requested resource'));
      if (req.method !== 'GET') return this.json(res, 405, status(405, 'MethodNotAllowed', 'method not allowed'));
      if (url.searchParams.get('watch') === '1' || url.searchParams.get('watch') === 'true') return this.watch(req, res, plural, url);
      return this.json(res, 200, {
        apiVersion: 'tahua.dev/v1',
        kind: `${PLURALS[plural]}List`,
        metadata: { resourceVersion: String(this.version) },
        items: [...this.objects[plural].values()],
      });
    }
    // /apis/apps/v1/namespaces/{ns}/deployments/{name}/scale
    if (parts.length === 8 && parts[0] === 'apis' && parts[1] === 'apps' && parts[5] === 'deployments' && parts[7] === 'scale') {
      const name = parts[6];
      if (parts[4] !== this.namespace || !this.deployments.has(name))
        return this.json(res, 404, status(404, 'NotFound', `deployments.apps "${name}" not found`));
      const scale = () => ({
        kind: 'Scale',
        apiVersion: 'autoscaling/v1',
        metadata: { name, namespace: this.namespace },
        spec: { replicas: this.deployments.get(name) },
        status: { replicas: this.deployments.get(name) },
      });
      if (req.method === 'GET') return this.json(res, 200, scale());
      if (req.method === 'PATCH') {
        if (req.headers['content-type'] !== 'application/merge-patch+json')
          return this.json(res, 415, status(415, 'UnsupportedMediaType', `the body of the request was in an unknown format`));
        let body = '';
        req.on('data', (c) => (body += c));
        req.on('end', () => {
          let patch;
          try {
            patch = JSON.parse(body);
          } catch {
            return this.json(res, 400, status(400, 'BadRequest', 'invalid JSON'));
          }
          const replicas = patch?.spec?.replicas;
          if (!Number.isInteger(replicas) || replicas < 0) return this.json(res, 422, status(422, 'Invalid', 'spec.replicas: Invalid value'));
          this.patches.push({ name, body: patch });
          this.deployments.set(name, replicas);
          this.json(res, 200, scale());
        });
        return undefined;
      }
      return this.json(res, 405, status(405, 'MethodNotAllowed', 'method not allowed'));
    }
    return this.json(res, 404, status(404, 'NotFound', 'the server could not find the requested resource'));
  }

  watch(req, res, plural, url) {
    const from = Number(url.searchParams.get('resourceVersion') || 0);
    if (from < this.compactedBefore) {
      const gone = status(410, 'Expired', `too old resource version: ${from} (${this.compactedBefore})`);
      if (this.gone === 'status') return this.json(res, 410, gone);
      res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
      res.end(`${JSON.stringify({ type: 'ERROR', object: gone })}\n`);
      return undefined;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    res.flushHeaders();
    for (const h of this.history)
      if (h.plural === plural && h.version > from) res.write(`${JSON.stringify({ type: h.type, object: h.object })}\n`);
    const w = { plural, res, from };
    this.watches.add(w);
    const seconds = Number(url.searchParams.get('timeoutSeconds') || 0);
    const timer = seconds > 0 ? setTimeout(() => res.end(), seconds * 1000) : null;
    const done = () => {
      if (timer) clearTimeout(timer);
      this.watches.delete(w);
    };
    res.on('close', done);
    req.on('close', done);
    return undefined;
  }
}

export async function startFakeKubeApi(options) {
  return new FakeKubeApi(options).start();
}

export function readToken(api) {
  return readFileSync(api.tokenFile, 'utf8').trim();
}
