// The Helm chart of deploy/helm/tahua/, rendered offline and checked like the plain
// manifests. Helm is not in Debian, so deploy/helm/render (Go text/template + sprig +
// Helm's functions, built here from Debian's Go packages) renders the chart as
// `helm template` does: with the default values, with ci/full-values.yaml (every optional
// part on) and with an in-memory store. Every document of each rendering is validated as
// deploy_manifests.test.mjs validates the plain manifests (lib/k8s_validate.mjs: served
// kinds, schemas, no unknown field) and gets the same property checks; the drain
// arithmetic is checked against the values it is computed from. The default rendering is
// the plain manifests' objects (labels aside), the full one their ingress, HTTPRoute and
// monitoring objects. The Kubernetes API access (service account, Role, the config's
// `kubernetes` section) follows the values; crds/ is an exact copy of the plain manifests'
// CRDs, which Helm installs untemplated (the renderer, like `helm template`, leaves them out),
// and the tahua.dev/v1 resources of the values validate against them. Contradictory values
// fail with the chart's `fail` message, missing ones with its `required` message. The config files each rendering writes load in the
// real binary (`tahua --check-config`; skipped without a build). Without Go the suite fails.
// values.schema.json (what Helm checks the values against before rendering; the renderer
// does not) is checked with ajv: every level closed, the values of each rendering valid, a
// typo refused. The derived and optional pod settings (server.workers from the CPU, the
// spread over zones, the Redis password from a Secret, extra volumes and variables) and
// the chart's kubeVersion have their own tests.
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import Ajv from 'ajv';
import {
  parseManifestText, parseConfigText, documentProblems, gatewayRendering,
  checkRollout, checkDrain, checkConfigMount, checkSecretEnv, checkService, checkPodSecurity, checkWrites,
  checkPdb, checkBundledRedis, checkDiscovery, checkHpa, checkIngress, checkHttpRoute, checkMonitoring, checkConfigLoads,
  crdsByKind, checkCrds, crdObjectProblems, checkKubernetesAccess, selects,
} from './lib/k8s_validate.mjs';
import { REPO_ROOT, TAHUA_BIN } from './lib/tahua.mjs';
import { makeTempDir } from './lib/util.mjs';

const CHART = join(REPO_ROOT, 'deploy', 'helm', 'tahua');
const BUILD_SCRIPT = join(REPO_ROOT, 'deploy', 'helm', 'render', 'build.sh');
const FULL_VALUES = join(CHART, 'ci', 'full-values.yaml');
const PLAIN_DIR = join(REPO_ROOT, 'deploy', 'kubernetes');
const CHART_CRDS = join(CHART, 'crds', 'crds.yaml');
const COPIES = [
  // [the chart's copy, the original]
  [join(CHART, 'files', 'alerts.yaml'), join(REPO_ROOT, 'deploy', 'prometheus', 'alerts.yaml')],
  [join(CHART, 'files', 'tahua.json'), join(REPO_ROOT, 'deploy', 'grafana', 'tahua.json')],
  [CHART_CRDS, join(PLAIN_DIR, 'crds.yaml')],
];
const NO_BINARY = !existsSync(TAHUA_BIN) && `no tahua binary at ${TAHUA_BIN}`;
const RELEASE = 'tahua';

// ------------------------------------------------------------------------ rendering

let renderer;  // the built renderer's path, once for the file
let work;      // temp dir for it and the values files written here
let buildError;

/** Builds deploy/helm/render offline (build.sh: GOPATH mode over /usr/share/gocode), once. */
function ensureRenderer() {
  if (buildError) throw buildError;
  try {
    renderer ??= buildRenderer();
  } catch (err) {
    buildError = err;
    throw err;
  }
}

function buildRenderer() {
  const go = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (go.error || go.status !== 0) {
    throw new Error('go is not installed: this test builds the chart renderer (deploy/helm/render) with Debian\'s Go. ' +
      'Install golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev (scripts/bootstrap.sh --test).');
  }
  work = makeTempDir('tahua-helm-');
  const out = join(work, 'render');
  const build = spawnSync('bash', [BUILD_SCRIPT, out], { encoding: 'utf8', timeout: 600_000, env: { ...process.env, GOFLAGS: '' } });
  assert.ifError(build.error);
  assert.equal(build.status, 0, `building the renderer failed:\n${build.stdout}${build.stderr}`);
  return out;
}

let valuesFileCount = 0;
/** A values object as a file for -f. */
function valuesFile(values) {
  const file = join(work, `values-${++valuesFileCount}.json`);  // JSON is YAML
  writeFileSync(file, JSON.stringify(values));
  return file;
}

/** Runs the renderer: `render -n NS [-f FILE]... [extra] tahua CHART`. */
function render({ files = [], namespace = 'tahua', extra = [] } = {}) {
  const args = ['-n', namespace, ...files.flatMap((f) => ['-f', f]), ...extra, RELEASE, CHART];
  const res = spawnSync(renderer, args, { encoding: 'utf8', timeout: 30_000 });
  assert.ifError(res.error);
  return res;
}

/** Helm's output ("---\n# Source: <template>\n<document>" each) as [{file, index, doc}]. */
function parseRendering(text) {
  const docs = [];
  for (const chunk of text.split(/^---$/m)) {
    if (!chunk.trim()) continue;
    const source = /^# Source: (\S+)$/m.exec(chunk)?.[1];
    assert.ok(source, `every document names its template: ${chunk.slice(0, 200)}`);
    docs.push(...parseManifestText(chunk, source));
  }
  return docs;
}

/** Values as the renderer merges them (maps key by key, anything else replaced, null removes). */
function mergeValues(dst, src) {
  for (const [k, v] of Object.entries(src ?? {})) {
    if (v === null) delete dst[k];
    else if (v && typeof v === 'object' && !Array.isArray(v) && dst[k] && typeof dst[k] === 'object' && !Array.isArray(dst[k])) mergeValues(dst[k], v);
    else dst[k] = v;
  }
  return dst;
}
const readValues = (file) => parseYaml(readFileSync(file, 'utf8'));

/** Drops the Helm release's label from selectors and labels (the plain manifests have none). */
function withoutInstance(node) {
  if (Array.isArray(node)) return node.map(withoutInstance);
  if (node === null || typeof node !== 'object') return node;
  return Object.fromEntries(Object.entries(node).filter(([k]) => k !== 'app.kubernetes.io/instance').map(([k, v]) => [k, withoutInstance(v)]));
}

// ------------------------------------------------------------------------ the renderings

// In-memory store, no HPA, no Kubernetes API: the Redis objects, the HPA, the service
// account and its Role disappear, replicas appears.
const MEMORY_STORE = {
  replicas: 1,
  autoscaling: { enabled: false },
  kubernetes: { resources: false, scaleDeployments: false },
  serviceAccount: { create: false },
  redis: { mode: 'none' },
  config: { files: { 'base.yaml': { usage: { sinks: [{ name: 'file', type: 'file', path: '/var/lib/tahua/usage/records.jsonl' }] } } } },
};

const CASES = [
  { name: 'default values', namespace: 'tahua', files: () => [], overrides: () => [] },
  { name: 'ci/full-values.yaml', namespace: 'llm', files: () => [FULL_VALUES], overrides: () => [readValues(FULL_VALUES)] },
  { name: 'redis.mode none, no HPA', namespace: 'tahua', files: () => [valuesFile(MEMORY_STORE)], overrides: () => [MEMORY_STORE] },
];

// First, so that a missing Go is one failure saying so (the suites below then cannot start).
it('the renderer builds offline from Debian\'s Go packages (deploy/helm/render/build.sh)', () => {
  ensureRenderer();
});

for (const c of CASES) {
  describe(`Helm chart rendered with ${c.name}`, () => {
    let values;     // the merged values
    let manifests;  // [{file, index, doc}]
    let r;          // gatewayRendering
    let all;

    before(() => {
      ensureRenderer();
      values = [readValues(join(CHART, 'values.yaml')), ...c.overrides()].reduce((acc, v) => mergeValues(acc, structuredClone(v)));
      const res = render({ files: c.files(), namespace: c.namespace });
      assert.equal(res.status, 0, `the renderer failed:\n${res.stderr}`);
      manifests = parseRendering(res.stdout);
      r = gatewayRendering(manifests, 'tahua');
      all = r.all;
    });

    it('every document is a served kind, valid against its schema, with no unknown field, in the release namespace', () => {
      assert.ok(manifests.length >= 5, `documents found: ${manifests.length}`);
      const problems = manifests.flatMap(documentProblems);
      assert.deepEqual(problems, [], `invalid documents:\n${problems.join('\n')}`);
      const seen = new Set();
      for (const { file, doc } of manifests) {
        const id = `${doc.kind} ${doc.metadata.name}`;
        assert.ok(!seen.has(id), `${file}: ${id} rendered once`);
        seen.add(id);
        const ns = doc.kind === 'ConfigMap' && doc.metadata.labels?.grafana_dashboard ? (values.dashboard.namespace || c.namespace) : c.namespace;
        assert.equal(doc.metadata.namespace, ns, `${file}: ${id} is in namespace ${ns}`);
        assert.equal(doc.metadata.labels?.['app.kubernetes.io/managed-by'], 'Helm', `${file}: ${id} has the Helm labels`);
      }
    });

    it('Deployment: rolls without losing capacity, probes /readyz and /healthz on the public listener', () => {
      checkRollout(r, { hpaOwnsReplicas: values.autoscaling.enabled });
      if (!values.autoscaling.enabled) assert.equal(r.deployment.spec.replicas, values.replicas, 'replicas from the values without the HPA');
      assert.equal(r.container.image, `${values.image.repository}:${values.image.tag || '0.1.0'}`);
    });

    it('Deployment: grace = preStop + drain_timeout + 5 + margin, computed from the values; drain_timeout written into the config', () => {
      const { grace, sleep, drainS } = checkDrain(r);
      const d = values.drain;
      assert.equal(sleep, d.preStopSleepSeconds, 'the preStop sleep is drain.preStopSleepSeconds');
      assert.equal(r.tahua.config.server.drain_timeout, `${d.timeoutSeconds}s`, 'server.drain_timeout is drain.timeoutSeconds');
      assert.equal(drainS, d.timeoutSeconds);
      assert.equal(grace, d.preStopSleepSeconds + d.timeoutSeconds + 5 + d.marginSeconds,
        `terminationGracePeriodSeconds ${grace} = ${d.preStopSleepSeconds} + ${d.timeoutSeconds} + 5 + ${d.marginSeconds}`);
    });

    it('Deployment: the ConfigMap is the config directory, mounted whole; resources from the values are its files', () => {
      checkConfigMount(r);
      const kinds = { modelRoutes: 'ModelRoute', rateLimitPolicies: 'RateLimitPolicy', promptTemplates: 'PromptTemplate', guardrailPolicies: 'GuardrailPolicy' };
      for (const [key, kind] of Object.entries(kinds)) {
        const want = values.tahuaResources[key] ?? [];
        const got = r.tahua.resources.filter((x) => x.kind === kind);
        assert.deepEqual(got.map((x) => ({ name: x.metadata.name, spec: x.spec })), want.map((x) => ({ name: x.name, spec: x.spec })), `${kind} documents from tahuaResources.${key}`);
        for (const x of got) assert.equal(x.apiVersion, 'tahua.dev/v1');
      }
      // Text files pass through tpl: the namespace is the release's.
      for (const p of r.tahua.config.providers.filter((x) => x.base_url?.includes('.svc.'))) {
        assert.match(p.base_url, new RegExp(`\\.${c.namespace}\\.svc\\.cluster\\.local[:/]`), `${p.name}: in the release namespace`);
      }
    });

    it('Deployment: every *_env the config names comes from the Secret (the Redis passwords from theirs), never a literal', () => {
      const secretName = 'tahua-secrets';
      const e = values.redis.external;
      const others = {};
      if (values.redis.mode === 'external' && e.existingSecret.name) others.TAHUA_REDIS_PASSWORD = e.existingSecret;
      if (values.redis.mode === 'external' && e.sentinel.existingSecret.name) others.TAHUA_REDIS_SENTINEL_PASSWORD = e.sentinel.existingSecret;
      if (values.ledger.enabled && values.ledger.type === 'postgres') others.TAHUA_LEDGER_DSN = values.ledger.postgres.existingSecret;
      const secrets = all('Secret');
      if (values.secrets.create) {
        assert.equal(secrets.length, 1, 'secrets.create makes one Secret');
        const secret = secrets[0];
        assert.equal(secret.metadata.name, secretName);
        assert.deepEqual(Object.keys(secret.stringData).sort(), [...values.secrets.envVars].sort(), 'one key per secrets.envVars');
        for (const [k, v] of Object.entries(values.secrets.values)) assert.equal(secret.stringData[k], v);
        checkSecretEnv(r, { secretName, secretKeys: new Set(Object.keys(secret.stringData)), others });
        assert.match(r.pod.metadata.annotations?.['checksum/secret'] ?? '', /^[0-9a-f]{64}$/, 'a changed Secret rolls the pods (keys are read at start)');
      } else {
        assert.equal(secrets.length, 0, 'no Secret without secrets.create (made outside the chart)');
        checkSecretEnv(r, { secretName, secretKeys: null, others });
      }
      assert.equal(r.pod.metadata.annotations?.['checksum/config'], undefined, 'no config checksum: a ConfigMap update reloads, it does not roll');
    });

    it('Service: exposes the public listener and never the admin port', () => {
      checkService(r);
    });

    it('pods: spread over nodes, non-root, read-only, no capabilities, RuntimeDefault seccomp, resources set', () => {
      checkPodSecurity(r, { workloads: values.redis.mode === 'bundled' ? ['the gateway', 'Redis'] : ['the gateway'] });
    });

    it('pods: tahua writes only to emptyDirs mounted where its config writes', () => {
      checkWrites(r);
    });

    it('PodDisruptionBudget: covers the gateway pods', () => {
      checkPdb(r);
    });

    it(`Redis: ${c.name === 'default values' ? 'the bundled StatefulSet with AOF and noeviction' : 'no Redis object; the store settings come from the values'}`, () => {
      const store = r.tahua.config.store;
      const redisObjects = manifests.filter((m) => /redis/.test(m.doc.metadata.name) && m.doc.kind !== 'ConfigMap');
      if (values.redis.mode === 'bundled') {
        checkBundledRedis(r);
        assert.equal(store.redis.url, `redis://tahua-redis-0.tahua-redis.${c.namespace}.svc.cluster.local:6379`);
        assert.deepEqual(redisObjects.map((m) => m.doc.kind).sort(), ['NetworkPolicy', 'Service', 'StatefulSet']);
      } else {
        assert.deepEqual(redisObjects.map((m) => `${m.doc.kind} ${m.doc.metadata.name}`), [], 'no Redis object');
        assert.equal(all('StatefulSet').length + all('NetworkPolicy').length, 0);
        if (values.redis.mode === 'external') {
          const e = values.redis.external;
          const want = { ...values.redis.settings, url: e.url };
          // The passwords from Secrets: the config names the variables, the url has none.
          const credentials = (block, variable) => (block.existingSecret.name
            ? { password_env: variable, ...(block.username ? { username: block.username } : {}) } : {});
          Object.assign(want, credentials(e, 'TAHUA_REDIS_PASSWORD'));
          if (e.sentinel.addresses.length) {
            want.sentinel = { addresses: e.sentinel.addresses, master: e.sentinel.master, ...credentials(e.sentinel, 'TAHUA_REDIS_SENTINEL_PASSWORD') };
          }
          if (e.cluster.nodes.length) want.cluster = { nodes: e.cluster.nodes };
          assert.deepEqual(store, { type: 'redis', redis: want }, 'store.redis is redis.external (and redis.settings)');
          assert.notEqual(store.redis.require_persistence, false, 'tahua checks the persistence');
        } else {
          // Journaled on an emptyDir of its own (checkWrites: a writable volume, and only that).
          assert.deepEqual(store, { type: 'memory', journal: '/var/lib/tahua/store/journal' });
        }
      }
    });

    it('discovery: each dns deployment resolves a headless Service with the provider\'s port', () => {
      checkDiscovery(r);
    });

    it('HPA: 3 to 20 replicas on CPU 70 % and tahua_active_streams, the behaviour policies; none when autoscaling is off', () => {
      const hpas = all('HorizontalPodAutoscaler');
      if (!values.autoscaling.enabled) {
        assert.equal(hpas.length, 0, 'no HPA when autoscaling is off');
        return;
      }
      const streams = checkHpa(r);
      assert.equal(streams.pods.metric.name, 'tahua_active_streams');
      assert.equal(Number(streams.pods.target.averageValue), values.autoscaling.targetActiveStreams);
      assert.equal(hpas[0].spec.behavior.scaleUp.stabilizationWindowSeconds, 0);
    });

    it('entries: Ingress and HTTPRoute when enabled, with the stream settings', () => {
      if (values.ingress.enabled) {
        checkIngress(r);
        const a = all('Ingress')[0].metadata.annotations;
        const maxBody = r.tahua.config.server.max_body_bytes;
        assert.equal(a['nginx.ingress.kubernetes.io/proxy-body-size'], `${Math.ceil(maxBody / 2 ** 20)}m`, 'proxy-body-size from server.max_body_bytes');
        for (const [k, v] of Object.entries(values.ingress.annotations)) assert.equal(a[k], v, `annotation ${k} from the values`);
        assert.deepEqual(all('Ingress')[0].spec.rules.map((x) => x.host), values.ingress.hosts);
      } else {
        assert.equal(all('Ingress').length, 0);
      }
      if (values.httpRoute.enabled) {
        checkHttpRoute(r);
        assert.deepEqual(all('HTTPRoute')[0].spec.parentRefs, values.httpRoute.parentRefs);
      } else {
        assert.equal(all('HTTPRoute').length, 0);
      }
    });

    it('monitoring: ServiceMonitor, PrometheusRule (alerts.yaml) and the Grafana dashboard when enabled', () => {
      if (values.serviceMonitor.enabled && values.prometheusRule.enabled) {
        checkMonitoring(r);
        for (const kind of ['ServiceMonitor', 'PrometheusRule']) {
          const labels = all(kind)[0].metadata.labels;
          const want = values[kind === 'ServiceMonitor' ? 'serviceMonitor' : 'prometheusRule'].labels;
          for (const [k, v] of Object.entries(want)) assert.equal(labels[k], v, `${kind} label ${k} for the Prometheus selectors`);
        }
      } else {
        assert.equal(all('ServiceMonitor').length + all('PrometheusRule').length, 0);
      }
      const dashboards = all('ConfigMap').filter((m) => m.metadata.labels?.grafana_dashboard === '1');
      if (values.dashboard.enabled) {
        assert.equal(dashboards.length, 1, 'one ConfigMap for the Grafana sidecar (grafana_dashboard: "1")');
        const json = readFileSync(join(REPO_ROOT, 'deploy', 'grafana', 'tahua.json'), 'utf8');
        assert.equal(dashboards[0].data['tahua.json'], json.replace(/\n$/, ''), 'the dashboard is deploy/grafana/tahua.json');
        assert.equal(JSON.parse(dashboards[0].data['tahua.json']).uid, JSON.parse(json).uid);
        for (const [k, v] of Object.entries(values.dashboard.annotations)) assert.equal(dashboards[0].metadata.annotations[k], v);
      } else {
        assert.equal(dashboards.length, 0);
      }
    });

    it('Kubernetes API: the service account, its token and a Role as the values say; the config section from kubernetes.*', () => {
      const k = values.kubernetes;
      const sa = values.serviceAccount;
      checkKubernetesAccess(r, { resources: k.resources, scale: k.scaleDeployments, serviceAccount: sa.create });
      assert.equal(r.pod.spec.serviceAccountName, sa.name || (sa.create ? 'tahua' : 'default'));
      assert.equal(all('ServiceAccount').length, sa.create ? 1 : 0, 'serviceAccount.create makes one');
      for (const [key, value] of Object.entries(sa.annotations ?? {})) assert.equal(all('ServiceAccount')[0].metadata.annotations[key], value);
      if (k.resources || k.scaleDeployments) {
        assert.deepEqual(r.tahua.config.kubernetes, { resources: k.resources, timeout: k.timeout, watch_timeout: k.watchTimeout });
      }
    });

    it('the tahua.dev/v1 resources of the values are valid objects of the chart\'s CRDs', () => {
      const crds = crdsByKind(parseManifestText(readFileSync(CHART_CRDS, 'utf8'), 'crds/crds.yaml'));
      const problems = r.tahua.resources.flatMap(({ file, ...doc }) => crdObjectProblems(crds, doc, `${c.name} ${file}`));
      assert.deepEqual(problems, [], problems.join('\n'));
    });

    it('the ConfigMap loads in the real binary, laid out as the kubelet mounts it', { skip: NO_BINARY }, () => {
      checkConfigLoads(r);
    });
  });
}

describe('Helm chart: the objects of deploy/kubernetes', () => {
  let plain;      // gatewayRendering of the plain manifests
  let byDefault;  // of the chart with its defaults
  let full;       // with ci/full-values.yaml (namespace llm)

  before(() => {
    ensureRenderer();
    const files = readdirSync(PLAIN_DIR).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    plain = gatewayRendering(files.flatMap((f) => parseManifestText(readFileSync(join(PLAIN_DIR, f), 'utf8'), f)), 'tahua');
    const d = render();
    assert.equal(d.status, 0, d.stderr);
    byDefault = gatewayRendering(parseRendering(d.stdout), 'tahua');
    const f = render({ files: [FULL_VALUES], namespace: 'llm' });
    assert.equal(f.status, 0, f.stderr);
    full = gatewayRendering(parseRendering(f.stdout), 'tahua');
  });

  it('files/ and crds/ hold exact copies of alerts.yaml, the Grafana dashboard and deploy/kubernetes/crds.yaml', () => {
    for (const [copy, original] of COPIES) {
      assert.ok(readFileSync(copy).equals(readFileSync(original)), `${copy} differs from ${original}: cp ${original} ${copy}`);
    }
    assert.deepEqual(readdirSync(join(CHART, 'crds')), ['crds.yaml'], 'crds/ holds the CRDs only');
  });

  it('crds/: valid CustomResourceDefinitions of the kinds tahua watches, left out of the rendering as Helm does', () => {
    const crds = parseManifestText(readFileSync(CHART_CRDS, 'utf8'), 'crds/crds.yaml');
    const problems = crds.flatMap(documentProblems);
    assert.deepEqual(problems, [], problems.join('\n'));
    checkCrds(crdsByKind(crds));
    assert.equal(byDefault.manifests.filter((m) => m.doc.kind === 'CustomResourceDefinition').length, 0, 'not templated');
  });

  it('the defaults render the plain manifests\' gateway, Redis and discovery objects (Helm labels aside) and the same config', () => {
    const same = [
      ['Deployment', 'tahua'], ['Service', 'tahua'], ['PodDisruptionBudget', 'tahua'], ['HorizontalPodAutoscaler', 'tahua'],
      ['StatefulSet', 'tahua-redis'], ['Service', 'tahua-redis'], ['NetworkPolicy', 'tahua-redis'], ['Service', 'vllm-llama'],
    ];
    for (const [kind, name] of same) {
      assert.deepEqual(withoutInstance(byDefault.only(kind, name).spec), plain.only(kind, name).spec, `${kind} ${name}: the chart's spec is the plain manifest's`);
    }
    // The objects without a spec: the service account and its Role.
    const rbac = [['ServiceAccount', 'tahua', ['automountServiceAccountToken']], ['Role', 'tahua', ['rules']], ['RoleBinding', 'tahua', ['roleRef', 'subjects']]];
    for (const [kind, name, fields] of rbac) {
      for (const f of fields) assert.deepEqual(byDefault.only(kind, name)[f], plain.only(kind, name)[f], `${kind} ${name}: the chart's ${f} is the plain manifest's`);
    }
    same.push(...rbac.map(([kind, name]) => [kind, name]));
    assert.deepEqual(byDefault.tahua.config, plain.tahua.config, 'the config sections');
    const res = (t) => t.resources.map(({ file, ...doc }) => doc);
    assert.deepEqual(res(byDefault.tahua), res(plain.tahua), 'the resources');
    // Nothing else but the ConfigMap: the CRD-based and public objects are off by default.
    const kinds = byDefault.manifests.map((m) => m.doc.kind).sort();
    assert.deepEqual(kinds, ['ConfigMap', ...same.map(([k]) => k)].sort());
  });

  it('full values: the plain manifests\' Ingress, HTTPRoute, ServiceMonitor and PrometheusRule', () => {
    for (const kind of ['Ingress', 'HTTPRoute', 'ServiceMonitor', 'PrometheusRule']) {
      assert.deepEqual(withoutInstance(full.only(kind, 'tahua').spec), plain.only(kind, 'tahua').spec, `${kind}: the chart's spec is the plain manifest's`);
    }
    const [a, b] = [full.only('Ingress', 'tahua').metadata.annotations, plain.only('Ingress', 'tahua').metadata.annotations];
    for (const [k, v] of Object.entries(b)) {
      if (k.endsWith('/proxy-body-size')) continue;  // computed from server.max_body_bytes (32 MiB in the full values)
      assert.equal(a[k], v, `Ingress annotation ${k}`);
    }
  });
});

describe('Helm chart: values refused', () => {
  before(() => {
    ensureRenderer();
  });

  const external = { mode: 'external', external: { url: 'redis://redis.example.internal:6379' } };
  const refused = [
    // [what, values, the message]
    ['redis.mode bundled with an external url (fail)', { redis: { external: { url: 'redis://redis.example.internal:6379' } } },
      /execution error at \(tahua\/templates\/[^)]+\): redis\.mode bundled with redis\.external settings/],
    ['redis.mode external without a url (required)', { redis: { mode: 'external' } },
      /execution error at \(tahua\/templates\/[^)]+\): redis\.external\.url is required with redis\.mode external/],
    ['Sentinel addresses without a master (required)', { redis: { ...external, external: { ...external.external, sentinel: { addresses: ['s-0:26379'] } } } },
      /redis\.external\.sentinel\.master is required with sentinel addresses/],
    ['Sentinel and Cluster at once', { redis: { ...external, external: { ...external.external, sentinel: { addresses: ['s:26379'], master: 'm' }, cluster: { nodes: ['n:6379'] } } } },
      /redis\.external: sentinel or cluster, not both/],
    ['an unknown redis.mode', { redis: { mode: 'sentinel' } }, /redis\.mode "sentinel": bundled, external or none/],
    ['redis.mode none with a redis_stream usage sink', { redis: { mode: 'none' } }, /usage sink redis is a redis_stream without url/],
    ['secrets.create with secrets.existingSecret', { secrets: { create: true, existingSecret: 'mine' } }, /secrets\.create with secrets\.existingSecret/],
    ['a secret value no variable reads', { secrets: { create: true, values: { MISTRAL_API_KEY: 'x' } } }, /secrets\.values\.MISTRAL_API_KEY: not in secrets\.envVars/],
    ['server.drain_timeout in the config', { config: { files: { 'base.yaml': { server: { drain_timeout: '30s' } } } } },
      /set drain\.timeoutSeconds instead/],
    ['a store section in the config', { config: { files: { 'base.yaml': { store: { type: 'memory' } } } } }, /set redis\.\* instead/],
    ['a server section outside base.yaml', { config: { files: { 'extra.yaml': 'server:\n  workers: 4\n' } } }, /config\.files\.extra\.yaml: the server and store sections belong in base\.yaml/],
    ['a key variable not in secrets.envVars', { config: { files: { 'mistral.yaml': 'providers:\n  - {name: mistral, type: openai, base_url: "https://api.mistral.ai/v1", api_key_env: MISTRAL_API_KEY}\n' } } },
      /the config reads MISTRAL_API_KEY \(api_key_env: MISTRAL_API_KEY\) but secrets\.envVars does not list it/],
    ['a listener port other than containerPort', { containerPort: 9000 }, /listeners\[0\]\.port 8080 differs from containerPort 9000/],
    ['a spill_dir other than the emptyDir', { usageSpill: { mountPath: '/spill' } }, /usage\.spill_dir \/var\/lib\/tahua\/usage differs from usageSpill\.mountPath \/spill/],
    ['no margin in the grace period', { drain: { marginSeconds: 0 } }, /drain\.marginSeconds must be at least 1/],
    ['a PDB that blocks node drains', { podDisruptionBudget: { maxUnavailable: 0 } }, /podDisruptionBudget\.maxUnavailable 0 would block every node drain/],
    ['minReplicas above maxReplicas', { autoscaling: { minReplicas: 5, maxReplicas: 4 } }, /autoscaling: minReplicas 5, maxReplicas 4/],
    ['an ingress without hosts (required)', { ingress: { enabled: true } }, /ingress\.hosts: at least one host name is required/],
    ['an HTTPRoute without parentRefs (required)', { httpRoute: { enabled: true } }, /httpRoute\.parentRefs: the Gateway to attach to is required/],
    ['a resource without a spec (required)', { tahuaResources: { modelRoutes: [{ name: 'x' }] } }, /tahuaResources\.modelRoutes\[0\]\.spec is required/],
    ['a kubernetes section in the config', { config: { files: { 'base.yaml': { kubernetes: { resources: true } } } } }, /config\.files\.base\.yaml\.kubernetes: set kubernetes\.\* instead/],
    ['a kubernetes section outside base.yaml', { config: { files: { 'k8s.yaml': 'kubernetes:\n  resources: true\n' } } }, /config\.files\.k8s\.yaml\.kubernetes: set kubernetes\.\* instead/],
    ['a Role for the namespace\'s default account', { serviceAccount: { create: false } }, /rbac\.create with serviceAccount\.create false needs serviceAccount\.name/],
  ];
  for (const [what, values, message] of refused) {
    it(`refuses ${what}`, () => {
      const res = render({ files: [valuesFile(values)] });
      assert.notEqual(res.status, 0, `rendered although ${what}`);
      assert.equal(res.stdout, '', 'nothing rendered');
      assert.match(res.stderr, message);
    });
  }

  it('the renderer: NOTES.txt renders, later -f files win, null removes a default, -a adds API versions', () => {
    const notes = render({ extra: ['--notes'] });
    assert.equal(notes.status, 0, notes.stderr);
    assert.match(notes.stdout, /\nNOTES:\n[^]*terminationGracePeriodSeconds 75 = preStop 5 \+ drain_timeout 60 \+ 5 \+ 5/);
    assert.match(notes.stdout, /\(kubectl -n tahua get tahua\)/, 'how to see the watched resources');

    const a = valuesFile({ drain: { timeoutSeconds: 30 }, podDisruptionBudget: { enabled: false } });
    const b = valuesFile({ drain: { timeoutSeconds: 90 }, discovery: { services: null } });
    const both = render({ files: [a, b] });
    assert.equal(both.status, 0, both.stderr);
    const docs = parseRendering(both.stdout).map((m) => m.doc);
    assert.equal(docs.find((d) => d.kind === 'Deployment').spec.template.spec.terminationGracePeriodSeconds, 5 + 90 + 5 + 5, 'the later file wins');
    assert.ok(!docs.some((d) => d.kind === 'PodDisruptionBudget'), 'the earlier file still applies where the later is silent');
    assert.ok(!docs.some((d) => d.metadata.name === 'vllm-llama'), 'null removes the default list');

    // .Capabilities.APIVersions: the HPA requires autoscaling/v2, which a 1.31 server serves.
    const tpl = valuesFile({ config: { files: { 'caps.yaml': '# {{ .Capabilities.APIVersions.Has "autoscaling/v2" }} {{ .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }} {{ .Capabilities.APIVersions.Has "apps/v1/Deployment" }}\n' } } });
    const caps = (extra) => {
      const res = render({ files: [tpl], extra });
      assert.equal(res.status, 0, res.stderr);
      const cm = parseRendering(res.stdout).find((m) => m.doc.kind === 'ConfigMap').doc;
      return cm.data['caps.yaml'].trim();
    };
    assert.equal(caps([]), '# true false true');
    assert.equal(caps(['-a', 'monitoring.coreos.com/v1']), '# true true true');
  });

  it('the config files parse as tahua reads them (YAML 1.2)', () => {
    const res = render({ files: [FULL_VALUES], namespace: 'llm' });
    const cm = parseRendering(res.stdout).find((m) => m.doc.kind === 'ConfigMap' && m.doc.metadata.name === 'tahua-config').doc;
    for (const [name, text] of Object.entries(cm.data)) assert.ok(parseConfigText(text, name).length > 0, name);
    // The PromptTemplate's own {{variables}} are not taken for chart templates.
    assert.match(cm.data['prompttemplates.yaml'], /\{\{customer\}\} \(\{\{tier\}\} tier\)/);
  });
});

describe('Helm chart: values.schema.json', () => {
  const SCHEMA = join(CHART, 'values.schema.json');
  let validate;
  let defaults;

  before(() => {
    const ajv = new Ajv({ strict: true, allowUnionTypes: true, allErrors: true });
    validate = ajv.compile(JSON.parse(readFileSync(SCHEMA, 'utf8')));
    defaults = readValues(join(CHART, 'values.yaml'));
  });

  const merged = (...overrides) => [structuredClone(defaults), ...overrides].reduce((acc, v) => mergeValues(acc, structuredClone(v)));
  const problems = () => (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message} ${JSON.stringify(e.params)}`);

  it('closes every level: each object takes only the keys it lists, or is a map of values, or is passed through (Kubernetes\' or tahua\'s own)', () => {
    const open = [];
    const walk = (node, at) => {
      if (Array.isArray(node)) return node.forEach((n, i) => walk(n, `${at}[${i}]`));
      if (node === null || typeof node !== 'object') return;
      if (node.type === 'object' || (Array.isArray(node.type) && node.type.includes('object'))) {
        const closed = node.additionalProperties === false;
        const map = typeof node.additionalProperties === 'object' && !node.properties;
        const passed = /^passed through: /.test(node.$comment ?? '');
        if (!closed && !map && !passed) open.push(at);
      }
      for (const [k, v] of Object.entries(node)) walk(v, `${at}.${k}`);
    };
    walk(JSON.parse(readFileSync(SCHEMA, 'utf8')), '$');
    assert.deepEqual(open, [], `objects that would take any key: ${open.join(', ')}`);
  });

  it('the values of every rendering here are valid: the defaults, ci/full-values.yaml, the in-memory store', () => {
    for (const c of CASES) {
      assert.ok(validate(merged(...c.overrides())), `${c.name}: ${problems().join('\n')}`);
    }
  });

  const refused = [
    // [what, values, the path, the unknown key or the message]
    ['a typo at the top (replica: for replicas:)', { replica: 3 }, '', 'replica'],
    ['a typo one level down', { redis: { external: { existingSecrett: { name: 'x' } } } }, '/redis/external', 'existingSecrett'],
    ['a typo in the Secret reference', { redis: { external: { existingSecret: { nmae: 'x' } } } }, '/redis/external/existingSecret', 'nmae'],
    ['the url in redis.settings', { redis: { settings: { url: 'redis://h' } } }, '/redis/settings', 'url'],
    ['a typo in a spread constraint', { topologySpreadConstraints: [{ maxSkew: 1, topologyKey: 'k', whenUnsatisfiable: 'ScheduleAnyway', topologykey: 'x' }] },
      '/topologySpreadConstraints/0', 'topologykey'],
    ['a typo in a volume mount', { extraVolumeMounts: [{ name: 'ca', mountPath: '/ca', readonly: true }] }, '/extraVolumeMounts/0', 'readonly'],
    ['a non-string annotation', { podAnnotations: { a: { b: 1 } } }, '/podAnnotations/a', null],
    ['an unknown redis.mode', { redis: { mode: 'sentinel' } }, '/redis/mode', null],
    ['an unknown ledger.type', { ledger: { type: 'mysql' } }, '/ledger/type', null],
    ['a typo in the ledger\'s Secret', { ledger: { postgres: { existingSecret: { nmae: 'x' } } } }, '/ledger/postgres/existingSecret', 'nmae'],
  ];
  for (const [what, values, path, key] of refused) {
    it(`refuses ${what}`, () => {
      assert.equal(validate(merged(values)), false, `accepted although ${what}`);
      const hit = validate.errors.filter((e) => e.instancePath === path);
      assert.ok(hit.length > 0, `an error at ${path || '/'}: ${problems().join('\n')}`);
      if (key) assert.ok(hit.some((e) => e.keyword === 'additionalProperties' && e.params.additionalProperty === key), problems().join('\n'));
    });
  }
});

describe('Helm chart: the pod as the values shape it', () => {
  before(() => {
    ensureRenderer();
  });

  const rendered = (values, extra = []) => {
    const res = render({ files: [valuesFile(values)], extra });
    assert.equal(res.status, 0, res.stderr);
    return gatewayRendering(parseRendering(res.stdout), 'tahua');
  };
  const workersOf = (values) => rendered(values).tahua.config.server.workers;

  it('Chart.yaml: kubeVersion >=1.30.0-0 (the preStop sleep action); older clusters are refused as Helm refuses them', () => {
    const chart = parseYaml(readFileSync(join(CHART, 'Chart.yaml'), 'utf8'));
    assert.equal(chart.kubeVersion, '>=1.30.0-0');
    const old = render({ extra: ['--kube-version', 'v1.29.9'] });
    assert.notEqual(old.status, 0, 'rendered for Kubernetes 1.29');
    assert.match(old.stderr, /chart requires kubeVersion: >=1\.30\.0-0 which is incompatible with Kubernetes v1\.29\.9/);
    for (const v of ['v1.30.0', 'v1.30.4-eks-a737599', 'v1.33.1']) {
      const res = render({ extra: ['--kube-version', v] });
      assert.equal(res.status, 0, `${v}: ${res.stderr}`);
    }
  });

  it('server.workers: the CPU limit rounded up (the request without a limit), at least 1; a workers in the config wins', () => {
    assert.equal(workersOf({}), 2, 'limits.cpu "2"');
    assert.equal(workersOf({ resources: { limits: { cpu: '2500m' } } }), 3, '2500m rounds up');
    assert.equal(workersOf({ resources: { limits: { cpu: 1.2 } } }), 2, 'a number rounds up');
    assert.equal(workersOf({ resources: { limits: { cpu: '100m' } } }), 1, 'at least 1');
    assert.equal(workersOf({ resources: { limits: { cpu: null }, requests: { cpu: '1500m' } } }), 2, 'the request without a limit');
    assert.equal(workersOf({ resources: { limits: { cpu: '4' } }, config: { files: { 'base.yaml': { server: { workers: 7 } } } } }), 7, 'explicit wins');
    assert.equal(workersOf({ resources: { limits: { cpu: null }, requests: { cpu: null } } }), undefined, 'no CPU figure: tahua\'s default');
  });

  it('topology spread: over zones, ScheduleAnyway (a one-zone cluster still schedules), of the gateway pods; [] removes it, a selector given is kept', () => {
    const { pod } = rendered({});
    const [spread, ...more] = pod.spec.topologySpreadConstraints ?? [];
    assert.equal(more.length, 0);
    assert.equal(spread.topologyKey, 'topology.kubernetes.io/zone');
    assert.equal(spread.whenUnsatisfiable, 'ScheduleAnyway', 'a preference, not a requirement');
    assert.equal(spread.maxSkew, 1);
    assert.ok(selects(spread.labelSelector, pod.metadata.labels), 'selects the gateway pods');
    assert.deepEqual(spread.labelSelector.matchLabels, { 'app.kubernetes.io/name': 'tahua', 'app.kubernetes.io/instance': 'tahua', 'app.kubernetes.io/component': 'gateway' },
      'this release\'s gateway pods only (not the bundled Redis)');

    assert.equal(rendered({ topologySpreadConstraints: [] }).pod.spec.topologySpreadConstraints, undefined);
    const own = { maxSkew: 2, topologyKey: 'kubernetes.io/hostname', whenUnsatisfiable: 'DoNotSchedule', labelSelector: { matchLabels: { team: 'llm' } } };
    assert.deepEqual(rendered({ topologySpreadConstraints: [own] }).pod.spec.topologySpreadConstraints, [own]);
  });

  it('redis.external.existingSecret: the key as TAHUA_REDIS_PASSWORD, named by store.redis.password_env; the ConfigMap holds no password', () => {
    const r = rendered({ redis: { mode: 'external', external: { url: 'redis://redis.example:6379/1', existingSecret: { name: 'redis-auth', key: 'pw' }, username: 'tahua' } } });
    const store = r.tahua.config.store.redis;
    assert.equal(store.url, 'redis://redis.example:6379/1');
    assert.equal(store.password_env, 'TAHUA_REDIS_PASSWORD');
    assert.equal(store.username, 'tahua');
    const env = r.container.env.filter((e) => e.name === 'TAHUA_REDIS_PASSWORD');
    assert.deepEqual(env, [{ name: 'TAHUA_REDIS_PASSWORD', valueFrom: { secretKeyRef: { name: 'redis-auth', key: 'pw' } } }]);
    assert.ok(!r.container.env.some((e) => e.name === 'TAHUA_REDIS_SENTINEL_PASSWORD'), 'no sentinel password without its Secret');
    // The usage sink without a url uses the store's Redis, and so its credentials.
    assert.equal(r.tahua.config.usage.sinks[0].url, undefined);
    // Without the Secret: no variable, no password_env.
    const plain = rendered({ redis: { mode: 'external', external: { url: 'redis://redis.example:6379' } } });
    assert.equal(plain.tahua.config.store.redis.password_env, undefined);
    assert.ok(!plain.container.env.some((e) => e.name.startsWith('TAHUA_REDIS_')));
  });

  it('extraVolumes, extraVolumeMounts, extraEnv and podAnnotations reach the pod', () => {
    const { pod, container } = rendered({
      extraVolumes: [{ name: 'ca', configMap: { name: 'corp-ca' } }],
      extraVolumeMounts: [{ name: 'ca', mountPath: '/etc/tahua-ca', readOnly: true }],
      extraEnv: [{ name: 'TZ', value: 'UTC' }],
      podAnnotations: { 'example.com/owner': 'platform' },
    });
    assert.deepEqual(pod.spec.volumes.find((v) => v.name === 'ca'), { name: 'ca', configMap: { name: 'corp-ca' } });
    assert.deepEqual(container.volumeMounts.find((m) => m.name === 'ca'), { name: 'ca', mountPath: '/etc/tahua-ca', readOnly: true });
    assert.ok(container.volumeMounts.some((m) => m.mountPath === '/etc/tahua'), 'the config mount stays');
    assert.deepEqual(container.env.find((e) => e.name === 'TZ'), { name: 'TZ', value: 'UTC' });
    assert.equal(pod.metadata.annotations['example.com/owner'], 'platform');
  });

  it('ledger postgres: the sink in base.yaml reads its whole connection string from the Secret; several replicas, rolled', () => {
    // A second sink spills up to spill_max_bytes too: the emptyDir is raised for it (checkWrites).
    const r = rendered({ usageSpill: { sizeLimit: '2Gi' }, ledger: { enabled: true, postgres: { existingSecret: { name: 'tahua-ledger' } } } });
    const sink = r.tahua.config.usage.sinks.find((s) => s.type === 'postgres');
    assert.deepEqual(sink, { name: 'ledger', type: 'postgres', dsn_env: 'TAHUA_LEDGER_DSN', batch: 500, timeout: '5s', retention: '400d', query_max_range: '366d' });
    assert.deepEqual(r.container.env.filter((e) => e.name === 'TAHUA_LEDGER_DSN'),
      [{ name: 'TAHUA_LEDGER_DSN', valueFrom: { secretKeyRef: { name: 'tahua-ledger', key: 'dsn' } } }]);
    assert.ok(!JSON.stringify(r.configMap.data).includes('postgresql://'), 'no connection string in the ConfigMap');
    assert.equal(r.deployment.spec.strategy.type, 'RollingUpdate');
    assert.equal(r.all('PersistentVolumeClaim').length, 0, 'no volume: the database is elsewhere');
    checkWrites(r);
    checkSecretEnv(r, { secretName: 'tahua-secrets', secretKeys: null, others: { TAHUA_LEDGER_DSN: { name: 'tahua-ledger', key: 'dsn' } } });
    if (!NO_BINARY) checkConfigLoads(r);
  });

  it('ledger sqlite: one replica, its file on a PersistentVolumeClaim (kept on uninstall), recreated rather than rolled', () => {
    const values = { replicas: 1, autoscaling: { enabled: false }, usageSpill: { sizeLimit: '2Gi' }, ledger: { enabled: true, type: 'sqlite', retention: '90d', sqlite: { size: '20Gi', maxBytes: 10737418240 } } };
    const r = rendered(values);
    const sink = r.tahua.config.usage.sinks.find((s) => s.type === 'sqlite');
    assert.deepEqual(sink, { name: 'ledger', type: 'sqlite', path: '/var/lib/tahua/ledger/ledger.db', retention: '90d', query_max_range: '366d', max_bytes: 10737418240 });
    const [claim, ...more] = r.all('PersistentVolumeClaim');
    assert.equal(more.length, 0);
    assert.equal(claim.metadata.name, 'tahua-ledger');
    assert.equal(claim.metadata.annotations['helm.sh/resource-policy'], 'keep');
    assert.deepEqual(claim.spec.accessModes, ['ReadWriteOnce']);
    assert.equal(claim.spec.resources.requests.storage, '20Gi');
    assert.equal(r.pod.spec.volumes.find((v) => v.name === 'ledger').persistentVolumeClaim.claimName, 'tahua-ledger');
    assert.equal(r.deployment.spec.replicas, 1);
    assert.deepEqual(r.deployment.spec.strategy, { type: 'Recreate' }, 'the old pod closes the file before the new one opens it');
    assert.equal(r.container.securityContext.readOnlyRootFilesystem, true, 'the root stays read-only: the file is on the volume');
    checkWrites(r);
    if (!NO_BINARY) checkConfigLoads(r);
    // A claim of one's own: mounted, none made.
    const own = rendered({ ...values, ledger: { ...values.ledger, sqlite: { existingClaim: 'ledger-data' } } });
    assert.equal(own.all('PersistentVolumeClaim').length, 0);
    assert.equal(own.pod.spec.volumes.find((v) => v.name === 'ledger').persistentVolumeClaim.claimName, 'ledger-data');
  });

  const ledgerRefused = [
    ['a SQLite ledger with several replicas', { autoscaling: { enabled: false }, replicas: 3, ledger: { enabled: true, type: 'sqlite' } },
      /ledger\.type sqlite needs a single replica \(one file on one volume, one writer\), not replicas 3: set replicas 1, or use ledger\.type postgres/],
    ['a SQLite ledger with the HPA', { replicas: 1, ledger: { enabled: true, type: 'sqlite' } },
      /ledger\.type sqlite needs a single replica .*autoscaling\.enabled would add more/],
    ['a PostgreSQL ledger without its Secret', { ledger: { enabled: true } }, /ledger\.postgres\.existingSecret\.name is required with ledger\.type postgres/],
    ['a ledger sink written into base.yaml besides ledger.*', {
      ledger: { enabled: true, postgres: { existingSecret: { name: 's' } } },
      config: { files: { 'base.yaml': { usage: { spill_dir: '/var/lib/tahua/usage', sinks: [{ name: 'db', type: 'postgres', dsn_env: 'X' }] } } } },
    }, /config\.files\.base\.yaml\.usage\.sinks: db is a postgres ledger; set ledger\.\* instead/],
  ];
  for (const [what, values, message] of ledgerRefused) {
    it(`refuses ${what}`, () => {
      const res = render({ files: [valuesFile(values)] });
      assert.notEqual(res.status, 0, `rendered although ${what}`);
      assert.equal(res.stdout, '', 'nothing rendered');
      assert.match(res.stderr, message);
    });
  }

  const external = { mode: 'external', external: { url: 'redis://redis.example:6379' } };
  const refused = [
    ['a password in the url and existingSecret', { redis: { ...external, external: { url: 'redis://:pw@redis.example:6379', existingSecret: { name: 's', key: 'k' } } } },
      /redis\.external\.url has credentials and redis\.external\.existingSecret is set/],
    ['a username without existingSecret', { redis: { ...external, external: { ...external.external, username: 'u' } } },
      /redis\.external\.username without redis\.external\.existingSecret/],
    ['a sentinel username without its existingSecret', { redis: { ...external, external: { ...external.external, sentinel: { addresses: ['s:26379'], master: 'm', username: 'u' } } } },
      /redis\.external\.sentinel\.username without redis\.external\.sentinel\.existingSecret/],
    ['existingSecret with the bundled Redis', { redis: { external: { existingSecret: { name: 's' } } } }, /redis\.mode bundled with redis\.external settings/],
    ['password_env in redis.settings', { redis: { ...external, settings: { password_env: 'X' } } }, /redis\.settings\.password_env: give the Secret as redis\.external\.existingSecret/],
  ];
  for (const [what, values, message] of refused) {
    it(`refuses ${what}`, () => {
      const res = render({ files: [valuesFile(values)] });
      assert.notEqual(res.status, 0, `rendered although ${what}`);
      assert.match(res.stderr, message);
    });
  }
});
