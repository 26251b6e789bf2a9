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
// alert rules identical to deploy/prometheus/alerts.yaml, the kustomization. tahua's own
// CRDs (crds.yaml) define the kinds and plurals its source watches with structural schemas,
// the service account and Role grant exactly the API requests it makes, and every
// tahua.dev/v1 example of the guides and of the ConfigMap validates against the CRDs'
// openAPIV3Schema. Finally the real binary loads the ConfigMap's files laid out as the
// kubelet mounts them (`tahua --check-config DIR`; skipped without a build).
import { describe, it, before } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  parseManifestText, parseConfigText, documentProblems, adapterExposedName, gatewayRendering,
  checkRollout, checkDrain, checkConfigMount, checkSecretEnv, checkService, checkPodSecurity, checkWrites,
  checkPdb, checkBundledRedis, checkDiscovery, checkHpa, checkIngress, checkHttpRoute, checkMonitoring, checkConfigLoads,
  crdsByKind, checkCrds, crdObjectProblems, crdSchemaProblems, checkKubernetesAccess, markdownResources,
} from './lib/k8s_validate.mjs';
import { REPO_ROOT, TAHUA_BIN } from './lib/tahua.mjs';

const DIR = join(REPO_ROOT, 'deploy', 'kubernetes');
const OBSERVABILITY_DOC = join(REPO_ROOT, 'docs', 'observability.md');
// The guides with tahua.dev/v1 examples, and how many each holds at least (docs/plugins.md's
// Plugin names a .lua file beside it: a config directory's form, not a Kubernetes object).
const GUIDES = [['docs/deploying.md', 4], ['docs/prompt-templates.md', 1]];
// Kinds without a namespace: kustomize's namespace does not apply to them.
const CLUSTER_SCOPED = new Set(['Namespace', 'CustomResourceDefinition']);

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
    // And tahua's CRDs outside their openAPIV3Schema (crdSchemaProblems checks that).
    const crd = structuredClone(manifests.find((x) => x.doc.kind === 'CustomResourceDefinition'));
    crd.doc.spec.versions[0].servd = true;
    crd.doc.spec.versions[0].additionalPrinterColumns[0].jsonpath = '.spec';
    assert.deepEqual(documentProblems(crd).map((p) => p.replace(/.*: /, '')), [
      '/spec/versions/0/additionalPrinterColumns/0/jsonpath is not a field of apiextensions.k8s.io/v1 CustomResourceDefinition',
      '/spec/versions/0/servd is not a field of apiextensions.k8s.io/v1 CustomResourceDefinition',
    ]);

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
      if (CLUSTER_SCOPED.has(m.doc.kind) || m.file === 'prometheus-adapter-rules.yaml') continue;
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

  it('CRDs: one per kind tahua watches, its plural and group, namespaced, one structural version v1', () => {
    const crds = crdsByKind(manifests);
    checkCrds(crds);
    assert.ok(manifests.filter((m) => m.doc.kind === 'CustomResourceDefinition').every((m) => m.file === 'crds.yaml'), 'the CRDs are in crds.yaml');
    // What each kind must hold, from the loaders (src/config/*_section.cpp).
    const spec = (kind) => crds.get(kind).spec.versions[0].schema.openAPIV3Schema.properties.spec;
    assert.deepEqual(spec('ModelRoute').required, ['target']);
    // A ModelRoute's spec is a route's fields but its name (src/config/routes_section.cpp,
    // loadModelRoute): those of the `routes[]` table in the generated reference.
    const reference = readFileSync(join(REPO_ROOT, 'docs', 'configuration.md'), 'utf8');
    const table = /\n#+ `routes\[\]`\n[\s\S]*?\n\|---[^\n]*\n((?:\|[^\n]*\n)+)/.exec(reference);
    assert.ok(table, 'docs/configuration.md has the routes[] table');
    const fields = [...table[1].matchAll(/^\| `([^`]+)`/gm)].map((m) => m[1]).filter((f) => f !== 'name');
    assert.ok(fields.includes('target') && fields.length > 5, `the routes[] fields are read: ${fields}`);
    assert.deepEqual(Object.keys(spec('ModelRoute').properties).sort(), fields.sort(),
      'a ModelRoute from the API takes the fields of a route but its name (docs/configuration.md, routes[])');
    assert.deepEqual(spec('Plugin').required, ['source'], 'a Plugin from the API carries its code');
    assert.equal(spec('Plugin').properties.file, undefined, 'no file: it would read the replica\'s own files');
    assert.deepEqual(spec('GuardrailPolicy').required, ['rules']);
    for (const kind of ['RateLimitPolicy', 'GuardrailPolicy']) assert.equal(spec(kind).properties.name, undefined, `${kind}: the name is metadata.name`);
    const columns = crds.get('ModelRoute').spec.versions[0].additionalPrinterColumns.map((c) => c.jsonPath);
    for (const path of ['.spec.target', '.spec.match.model']) assert.ok(columns.includes(path), `kubectl get modelroutes shows ${path}`);
  });

  it('CRDs: the checker refuses a typo, a wrong type, a missing field and a bad enum; takes the shapes the loaders take', () => {
    const crds = crdsByKind(manifests);
    const route = { apiVersion: 'tahua.dev/v1', kind: 'ModelRoute', metadata: { name: 'r' }, spec: { match: { model: 'auto' }, target: 'gpt-4o' } };
    const problems = (patch) => crdObjectProblems(crds, { ...route, ...patch }, 'x.yaml');
    assert.deepEqual(problems({}), []);
    assert.deepEqual(problems({ spec: { ...route.spec, taget: 'gpt-4o' } }), ['x.yaml (ModelRoute r): /spec/taget is not a field of the schema']);
    assert.deepEqual(problems({ spec: { target: 'gpt-4o', when: { max_prompt_tokens: '1000' } } }), ['x.yaml (ModelRoute r): /spec/when/max_prompt_tokens must be an integer']);
    assert.deepEqual(problems({ spec: { match: { model: 'auto' } } }), ['x.yaml (ModelRoute r): /spec/target is required']);
    assert.deepEqual(problems({ spec: { target: 'gpt-4o', timeouts: { total: '1.5s' } } }), ['x.yaml (ModelRoute r): /spec/timeouts/total must match ^[0-9]+(ms|s|m|h|d)$']);
    assert.match(problems({ metadata: { name: 'support-answer@3' } }).join('\n'), /metadata\.name must be a DNS subdomain name/);
    assert.deepEqual(problems({ spec: undefined }), ['x.yaml (ModelRoute r): /spec must be an object']);
    // A name or a list of names (preserve-unknown-fields), an integer or a string.
    assert.deepEqual(problems({ spec: { match: { model: ['auto', 'auto-*'], tenant: 'acme' }, target: 'gpt-4o' } }), []);
    const prompt = { apiVersion: 'tahua.dev/v1', kind: 'PromptTemplate', metadata: { name: 'p' } };
    assert.deepEqual(crdObjectProblems(crds, { ...prompt, spec: { version: 3, template: 'hi' } }, 'p'), []);
    assert.deepEqual(crdObjectProblems(crds, { ...prompt, spec: { version: 3.5, template: 'hi' } }, 'p'), ['p (PromptTemplate p): /spec/version must be an integer or a string']);
    assert.deepEqual(crdObjectProblems(crds, { ...prompt, spec: { messages: [{ role: 'robot', content: 'x' }] } }, 'p'),
      ['p (PromptTemplate p): /spec/messages/0/role must be one of system, developer, user, assistant']);
    assert.deepEqual(crdObjectProblems(crds, { apiVersion: 'tahua.dev/v1', kind: 'Plugin', metadata: { name: 'p' }, spec: { file: 'p.lua' } }, 'p'),
      ['p (Plugin p): /spec/source is required', 'p (Plugin p): /spec/file is not a field of the schema']);
    assert.match(crdObjectProblems(crds, { apiVersion: 'tahua.dev/v2', kind: 'ModelRoute', metadata: { name: 'r' }, spec: {} }, 'v')[0], /not a served version/);
    // And a schema the API server would not take as structural.
    assert.deepEqual(crdSchemaProblems({ type: 'object', properties: { a: { description: 'no type' }, b: { type: 'array' } } }),
      ['/properties/a: no type (only x-kubernetes-preserve-unknown-fields or -int-or-string may omit it)', '/properties/b: an array needs items']);
    assert.deepEqual(crdSchemaProblems({ type: 'object', additionalProperties: false, 'x-kubernetes-preserve-unknown-fields': true }),
      ['/: additionalProperties must be a schema (false and preserve-unknown-fields contradict; pruning refuses unknown fields anyway)']);
    assert.deepEqual(crdSchemaProblems({ type: 'string', format: 'duration' }), ['/: keyword format is not one the checker knows']);
  });

  it('CRDs: the guides\' tahua.dev/v1 examples and the ConfigMap\'s resources are valid objects of them', () => {
    const crds = crdsByKind(manifests);
    const examples = GUIDES.flatMap(([file, least]) => {
      const found = markdownResources(readFileSync(join(REPO_ROOT, file), 'utf8'), file);
      assert.ok(found.length >= least, `${file}: ${found.length} tahua.dev/v1 examples, expected ${least}`);
      return found;
    });
    const kinds = examples.map((e) => e.doc.kind);
    assert.ok(kinds.filter((k) => k === 'ModelRoute').length >= 2, `the ModelRoute examples of docs/deploying.md are found: ${kinds}`);
    const fromConfigMap = r.tahua.resources.map(({ file, ...doc }) => ({ where: `configmap.yaml ${file}`, doc }));
    assert.ok(fromConfigMap.length > 0);
    const problems = [...examples, ...fromConfigMap].flatMap(({ where, doc }) => crdObjectProblems(crds, doc, where));
    assert.deepEqual(problems, [], `invalid as Kubernetes objects:\n${problems.join('\n')}`);
  });

  it('RBAC: the gateway\'s service account, its token mounted, a Role granting exactly the API calls tahua makes', () => {
    checkKubernetesAccess(r, { resources: true, scale: true });
    assert.equal(r.tahua.config.kubernetes.resources, true, 'the resources are watched: crds.yaml is applied with the rest');
  });

  it('the ConfigMap loads in the real binary, laid out as the kubelet mounts it', { skip: !existsSync(TAHUA_BIN) && `no tahua binary at ${TAHUA_BIN}` }, () => {
    checkConfigLoads(r);
  });
});
