// The Kubernetes manifests of deploy/kubernetes/, checked offline. Every document of every
// *.yaml there is parsed as kubectl parses it (YAML 1.1: an unquoted `yes` or `off` is a
// boolean) and validated against the pinned OpenAPI schemas of kubernetes-models,
// @kubernetes-models/gateway-api and @kubernetes-models/prometheus-operator, with unknown
// fields refused as `kubectl apply` (strict field validation) refuses them; a document of a
// kind no model covers fails. Then the properties the deployment relies on: the rollout
// and drain arithmetic against the config in the ConfigMap, probes, the config directory
// mount that reloads on `kubectl apply`, secrets for every *_env the config names, the
// admin port kept off the Service, the pod security settings and where tahua may write,
// Redis with AOF and noeviction, the headless Service that DNS discovery resolves, the HPA
// and the Prometheus adapter rule it reads, the ingress settings for long streams, the
// alert rules identical to deploy/prometheus/alerts.yaml, the kustomization. Finally the
// real binary loads the ConfigMap's files laid out as the kubelet mounts them
// (`tahua --check-config DIR`; skipped without a build).
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  parseManifestText, parseConfigText, documentProblems, adapterExposedName, gatewayRendering,
  checkRollout, checkDrain, checkConfigMount, checkSecretEnv, checkService, checkPodSecurity, checkWrites,
  checkPdb, checkBundledRedis, checkDiscovery, checkHpa, checkIngress, checkHttpRoute, checkMonitoring, checkConfigLoads,
} from './lib/k8s_validate.mjs';
import { REPO_ROOT, TAHUA_BIN } from './lib/tahua.mjs';

const DIR = join(REPO_ROOT, 'deploy', 'kubernetes');
const OBSERVABILITY_DOC = join(REPO_ROOT, 'docs', 'observability.md');

// Files of deploy/kubernetes/ that kustomization.yaml must not apply (each says why).
const NOT_APPLIED = new Map([
  ['secret.example.yaml', 'its placeholders would overwrite the real keys on every apply'],
  ['prometheus-adapter-rules.yaml', "it is the Prometheus adapter's own config, to be merged into the adapter's"],
]);
const KUSTOMIZATION = 'kustomization.yaml';

describe('deploy/kubernetes manifests', () => {
  let files;       // *.yaml file names
  let manifests;   // [{file, index, doc}] of every file but the kustomization
  let kustomization;
  let namespace;
  let r;           // the gateway's rendering (lib/k8s_validate.mjs gatewayRendering)
  let deployment;  // the gateway

  const only = (kind, name) => r.only(kind, name);

  before(() => {
    files = readdirSync(DIR).filter((f) => f.endsWith('.yaml')).sort();
    assert.ok(files.includes(KUSTOMIZATION), 'deploy/kubernetes/kustomization.yaml exists');
    manifests = files
      .filter((f) => f !== KUSTOMIZATION)
      .flatMap((f) => parseManifestText(readFileSync(join(DIR, f), 'utf8'), f));
    const k = parseManifestText(readFileSync(join(DIR, KUSTOMIZATION), 'utf8'), KUSTOMIZATION);
    assert.equal(k.length, 1, 'kustomization.yaml holds one document');
    kustomization = k[0].doc;
    namespace = kustomization.namespace;

    r = gatewayRendering(manifests, 'tahua');
    deployment = r.deployment;
  });

  it('every document is a served kind, valid against its schema, with no unknown field', () => {
    assert.ok(manifests.length >= 10, `documents found: ${manifests.length}`);
    const problems = manifests.flatMap(documentProblems);
    assert.deepEqual(problems, [], `invalid documents:\n${problems.join('\n')}`);
  });

  it('the checks themselves catch a bad type, an unknown field, an unknown kind and a YAML 1.1 boolean', () => {
    const base = manifests.find((m) => m.doc === deployment);
    const badType = structuredClone(base);
    badType.doc.spec.template.spec.containers[0].image = 3;
    assert.match(documentProblems(badType).join('\n'), /containers\/0\/image must be string/);

    const typo = structuredClone(base);
    typo.doc.spec.template.spec.terminationGracePeriodSecond = 75;
    assert.deepEqual(documentProblems(typo), [
      `${base.file} document ${base.index} (Deployment tahua): /spec/template/spec/terminationGracePeriodSecond is not a field of apps/v1 Deployment`,
    ]);

    // The CRD models too (the gateway-api models validate with ajv at run time).
    for (const kind of ['HTTPRoute', 'PrometheusRule', 'ServiceMonitor']) {
      const m = structuredClone(manifests.find((x) => x.doc.kind === kind));
      m.doc.spec.typoField = 'x';
      assert.match(documentProblems(m).join('\n'), /\/spec\/typoField is not a field/, kind);
    }

    const removed = structuredClone(base);
    removed.doc.apiVersion = 'extensions/v1beta1';
    assert.match(documentProblems(removed).join('\n'), /unknown kind extensions\/v1beta1 Deployment/);
    assert.match(documentProblems({ file: 'x.yaml', index: 0, doc: { apiVersion: 'tahua.dev/v1', kind: 'ModelRoute' } })[0], /unknown kind/);

    // kubectl's YAML 1.1: an unquoted yes is a boolean, which a string list refuses.
    const [yes] = parseManifestText('apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    - name: r\n      image: redis\n      args: [--appendonly, yes]\n', 'p.yaml');
    assert.match(documentProblems(yes).join('\n'), /args\/1 must be string/);
  });

  it('kustomization.yaml applies every manifest but the examples, in one namespace, without generators', () => {
    assert.equal(kustomization.apiVersion, 'kustomize.config.k8s.io/v1beta1');
    assert.equal(kustomization.kind, 'Kustomization');
    const listed = kustomization.resources ?? [];
    for (const r of listed) assert.ok(files.includes(r), `kustomization resource ${r} is a file of deploy/kubernetes/`);
    assert.equal(new Set(listed).size, listed.length, 'no resource listed twice');
    const expected = files.filter((f) => f !== KUSTOMIZATION && !NOT_APPLIED.has(f));
    assert.deepEqual([...listed].sort(), expected, 'kustomization resources = the manifests');
    for (const [f, why] of NOT_APPLIED) {
      assert.ok(files.includes(f), `${f} exists`);
      assert.ok(!listed.includes(f), `${f} is not applied: ${why}`);
    }
    // A generated ConfigMap gets a hash suffix: an edit would roll the pods instead of reloading.
    assert.equal(kustomization.configMapGenerator, undefined, 'no configMapGenerator');
    assert.equal(kustomization.secretGenerator, undefined, 'no secretGenerator (the Secret is made outside git)');

    assert.ok(namespace, 'kustomization.yaml sets the namespace');
    assert.equal(only('Namespace', namespace).metadata.name, namespace);
    for (const m of manifests) {
      if (m.doc.kind === 'Namespace' || m.file === 'prometheus-adapter-rules.yaml') continue;
      assert.equal(m.doc.metadata?.namespace, namespace, `${m.file}: ${m.doc.kind} ${m.doc.metadata?.name} is in namespace ${namespace}`);
    }
  });

  it('Deployment: rolls without losing capacity, probes /readyz and /healthz on the public listener', () => {
    checkRollout(r, { hpaOwnsReplicas: true });
  });

  it('Deployment: terminationGracePeriodSeconds > preStop sleep + drain_timeout + 5 s', () => {
    checkDrain(r);
  });

  it('Deployment: the ConfigMap is the config directory, mounted whole so that kubectl apply reloads it', () => {
    checkConfigMount(r);
  });

  it('Deployment: every *_env the config names comes from the Secret, never a literal', () => {
    const secret = only('Secret', 'tahua-secrets');
    const secretKeys = new Set([...Object.keys(secret.stringData ?? {}), ...Object.keys(secret.data ?? {})]);
    checkSecretEnv(r, { secretName: secret.metadata.name, secretKeys, keysFrom: 'secret.example.yaml' });
  });

  it('Service: exposes the public listener and never the admin port', () => {
    checkService(r);
  });

  it('pods: spread over nodes, non-root, read-only, no capabilities, RuntimeDefault seccomp, resources set', () => {
    assert.equal(only('Namespace', namespace).metadata.labels?.['pod-security.kubernetes.io/enforce'], 'restricted');
    checkPodSecurity(r, { workloads: ['the gateway', 'Redis'] });
  });

  it('pods: tahua writes only to emptyDirs mounted where its config writes', () => {
    checkWrites(r);
  });

  it('PodDisruptionBudget: covers the gateway pods', () => {
    checkPdb(r);
  });

  it('Redis: a StatefulSet with AOF, noeviction, a volume per pod, behind the headless Service store.redis.url names', () => {
    checkBundledRedis(r);
  });

  it('discovery: each dns deployment resolves a headless Service with the provider\'s port', () => {
    checkDiscovery(r);
  });

  it('HPA: 3 to 20 replicas on CPU 70 % and on tahua_active_streams through the Prometheus adapter rule', () => {
    const streams = checkHpa(r);

    // The adapter rule: the series tahua exports, mapped to pods, exposed under the HPA's name.
    const series = 'tahua_active_streams';
    assert.match(readFileSync(OBSERVABILITY_DOC, 'utf8'), new RegExp(`\`${series}\``), `${series} is a metric tahua exports`);
    const adapter = only('ConfigMap', 'prometheus-adapter-tahua');
    const [adapterConfig] = parseConfigText(adapter.data['config.yaml'], 'config.yaml');
    const rules = (adapterConfig.rules ?? []).filter((r) => new RegExp(`(^|[{,\\s"])${series}([{\\s]|$)`).test(r.seriesQuery));
    assert.equal(rules.length, 1, `one adapter rule discovers ${series}`);
    const rule = rules[0];
    assert.deepEqual(rule.resources?.overrides?.namespace, { resource: 'namespace' });
    assert.match(rule.resources?.overrides?.pod?.resource ?? '', /^pods?$/);
    for (const part of ['<<.Series>>', '<<.LabelMatchers>>', '<<.GroupBy>>']) assert.ok(rule.metricsQuery.includes(part), `metricsQuery uses ${part}`);
    assert.ok(!/\brate\(|\bincrease\(/.test(rule.metricsQuery), `${series} is a gauge: no rate()`);
    assert.equal(streams.pods.metric.name, adapterExposedName(rule, series), 'the HPA asks for the name the adapter exposes');
  });

  it('Ingress: ingress-nginx settings for SSE streams, only /v1 routed', () => {
    checkIngress(r);
  });

  it('HTTPRoute: Gateway API v1 with timeouts for long streams, only /v1 routed', () => {
    checkHttpRoute(r);
  });

  it('monitoring: the ServiceMonitor scrapes /metrics of the gateway Service; the PrometheusRule is alerts.yaml', () => {
    checkMonitoring(r);
  });

  it('the ConfigMap loads in the real binary, laid out as the kubelet mounts it', { skip: !existsSync(TAHUA_BIN) && `no tahua binary at ${TAHUA_BIN}` }, () => {
    checkConfigLoads(r);
  });
});
