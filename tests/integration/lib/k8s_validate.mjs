// Offline checks of Kubernetes manifests, shared by deploy_manifests.test.mjs (the plain
// manifests of deploy/kubernetes/) and deploy_helm.test.mjs (the Helm chart's renderings).
// Documents are parsed as kubectl parses them (YAML 1.1: an unquoted `yes` or `off` is a
// boolean) and validated against the pinned OpenAPI schemas of kubernetes-models,
// @kubernetes-models/gateway-api and @kubernetes-models/prometheus-operator, with unknown
// fields refused as `kubectl apply` (strict field validation) refuses them; a document of a
// kind no model covers fails. Then the properties the gateway's deployment relies on, each a
// check* function over a rendering (gatewayRendering): the rollout and drain arithmetic
// against the config in the ConfigMap, probes, the config directory mount, secrets for every
// *_env, the admin port kept off the Service, pod security and where tahua may write, Redis
// with AOF and noeviction, DNS discovery, the HPA, the ingress and HTTPRoute settings for long
// streams, monitoring, the Kubernetes API access (service account, Role, the config's
// `kubernetes` section); and the ConfigMap's config loaded by the real binary. tahua's own
// CustomResourceDefinitions are checked against the kinds its source watches, and tahua.dev/v1
// objects against their openAPIV3Schema (crdSchemaProblems, crdObjectProblems: the subset of
// OpenAPI v3 the CRDs use, with unknown fields refused as kubectl apply refuses them).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { parseAllDocuments, parseDocument } from 'yaml';
import * as coreV1 from 'kubernetes-models/v1';
import * as appsV1 from 'kubernetes-models/apps/v1';
import * as batchV1 from 'kubernetes-models/batch/v1';
import * as policyV1 from 'kubernetes-models/policy/v1';
import * as autoscalingV2 from 'kubernetes-models/autoscaling/v2';
import * as networkingV1 from 'kubernetes-models/networking.k8s.io/v1';
import * as rbacV1 from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import * as apiextensionsV1 from 'kubernetes-models/apiextensions.k8s.io/v1';
import * as gatewayV1 from '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1';
import * as monitoringV1 from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { REPO_ROOT, TAHUA_BIN } from './tahua.mjs';
import { makeTempDir } from './util.mjs';

export const ALERTS_FILE = join(REPO_ROOT, 'deploy', 'prometheus', 'alerts.yaml');

// The API versions a current cluster serves. Only these modules are registered: a removed
// version (extensions/v1beta1, policy/v1beta1, autoscaling/v2beta2 ...) is an unknown kind.
const MODEL_MODULES = [coreV1, appsV1, batchV1, policyV1, autoscalingV2, networkingV1, rbacV1, apiextensionsV1, gatewayV1, monitoringV1];
const MODELS = new Map();
for (const mod of MODEL_MODULES) {
  for (const value of Object.values(mod)) {
    if (typeof value === 'function' && typeof value.apiVersion === 'string' && typeof value.kind === 'string') {
      MODELS.set(`${value.apiVersion} ${value.kind}`, value);
    }
  }
}

// ------------------------------------------------------------------------ parsing

/** Every document of a YAML text, as kubectl reads it (YAML 1.1, unique keys). */
export function parseManifestText(text, file) {
  const docs = [];
  parseAllDocuments(text, { version: '1.1', uniqueKeys: true, prettyErrors: true }).forEach((doc, index) => {
    const problems = [...doc.errors, ...doc.warnings];
    if (problems.length) throw new Error(`${file} document ${index}: ${problems.map((p) => p.message).join('; ')}`);
    const value = doc.toJS();
    if (value !== null && value !== undefined) docs.push({ file, index, doc: value });
  });
  return docs;
}

/** A tahua config text (yaml-cpp reads it: YAML 1.2 scalars), all documents. */
export function parseConfigText(text, file) {
  return parseAllDocuments(text, { uniqueKeys: true, prettyErrors: true }).map((doc, index) => {
    const problems = [...doc.errors, ...doc.warnings];
    if (problems.length) throw new Error(`${file} document ${index}: ${problems.map((p) => p.message).join('; ')}`);
    return doc.toJS();
  });
}

/**
 * The config directory a ConfigMap makes: plain documents' sections merged (each section in
 * one file only, as tahua requires), tahua.dev/v1 documents collected as resources.
 */
export function tahuaConfigOf(configMap) {
  const config = {};
  const owner = {};
  const resources = [];
  const names = Object.keys(configMap.data ?? {}).filter((n) => /\.ya?ml$/.test(n) && !n.startsWith('.')).sort();
  for (const name of names) {
    for (const doc of parseConfigText(configMap.data[name], name)) {
      if (doc === null || doc === undefined) continue;
      if (doc.apiVersion === 'tahua.dev/v1') {
        resources.push({ file: name, ...doc });
        continue;
      }
      for (const [section, value] of Object.entries(doc)) {
        assert.ok(!(section in config), `config section ${section} in both ${owner[section]} and ${name}`);
        config[section] = value;
        owner[section] = name;
      }
    }
  }
  return { config, resources, files: names, owner };
}

// ------------------------------------------------------------------------ units

/** A tahua duration ("250ms", "60s", "2m", "1h", "30d") in milliseconds. */
export function durationMs(text) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(String(text));
  assert.ok(m, `not a duration: ${text}`);
  return Number(m[1]) * { ms: 1, s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 }[m[2]];
}

/** A Gateway API duration ("630s", "1h30m") in milliseconds. */
export function gatewayDurationMs(text) {
  assert.match(String(text), /^([0-9]{1,5}(h|m|s|ms)){1,4}$/, 'Gateway API duration');
  let ms = 0;
  for (const [, n, unit] of String(text).matchAll(/([0-9]+)(ms|h|m|s)/g)) ms += Number(n) * { ms: 1, s: 1e3, m: 60e3, h: 3600e3 }[unit];
  return ms;
}

/** A Kubernetes quantity of bytes ("1Gi", "512Mi", "2G") as a number. */
export function quantityBytes(q) {
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(String(q));
  assert.ok(m, `not a byte quantity: ${q}`);
  return Number(m[1]) * ({ Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12 }[m[2]] ?? 1);
}

/** A Kubernetes CPU quantity ("2", "500m") in cores. */
export function cpuCores(q) {
  const m = /^(\d+(?:\.\d+)?)(m)?$/.exec(String(q));
  assert.ok(m, `not a CPU quantity: ${q}`);
  return m[2] ? Number(m[1]) / 1000 : Number(m[1]);
}

/** An nginx size ("16m", "1024k", "1g") in bytes. */
export function nginxSizeBytes(text) {
  const m = /^(\d+)([kKmMgG])?$/.exec(String(text));
  assert.ok(m, `not an nginx size: ${text}`);
  return Number(m[1]) * ({ k: 2 ** 10, m: 2 ** 20, g: 2 ** 30 }[m[2]?.toLowerCase()] ?? 1);
}

// ------------------------------------------------------------------------ schema checks

/** The schema's complaints about `doc` (ajv errors with instancePath), none if valid. */
export function schemaErrors(Model, doc) {
  try {
    new Model(doc).validate();
    return [];
  } catch (err) {
    if (!Array.isArray(err?.errors)) throw err;
    return err.errors;
  }
}

const pointer = (path) => path.map((k) => `/${String(k).replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');

// A value no JSON schema type accepts (not an object, array, string, number, boolean or null).
const PROBE = () => {};

/** Whether the schema constrains the field at `path`: replaced by PROBE, it must complain there. */
export function schemaKnows(Model, doc, path) {
  const probe = structuredClone(doc);
  let parent = probe;
  for (const key of path.slice(0, -1)) parent = parent[key];
  parent[path.at(-1)] = PROBE;
  const at = pointer(path);
  return schemaErrors(Model, probe).some((e) => e.instancePath === at || e.instancePath.startsWith(`${at}/`));
}

/**
 * Fields the schema does not declare. The generated schemas allow unknown properties,
 * while the API server's strict field validation (kubectl apply's default) refuses them:
 * a typo such as `terminationGracePeriodSecond` must fail here, not be silently dropped.
 */
export function unknownFields(Model, doc) {
  const found = [];
  const gap = MODEL_GAPS.get(`${Model.apiVersion} ${Model.kind}`);
  const visit = (node, path) => {
    if (Array.isArray(node)) {
      node.forEach((item, i) => visit(item, [...path, i]));
      return;
    }
    if (node === null || typeof node !== 'object') return;
    for (const key of Object.keys(node)) {
      if (path.length === 0 && (key === 'apiVersion' || key === 'kind')) continue;  // chose the model
      const at = [...path, key];
      if (gap?.(at)) continue;
      if (schemaKnows(Model, doc, at)) visit(node[key], at);
      else found.push(pointer(at));
    }
  };
  visit(doc, []);
  return found;
}

// Fields a model's generated schema lacks although the API has them, by kind: the path is
// taken as known and not looked into. A CRD's JSONSchemaProps there has no `description` and
// no x-kubernetes-* keys, and takes anything under items and additionalProperties: its
// openAPIV3Schema is checked by crdSchemaProblems instead, which refuses keywords it does not
// know. The printer columns' `description` is missing the same way.
const MODEL_GAPS = new Map([
  ['apiextensions.k8s.io/v1 CustomResourceDefinition', (at) => at[0] === 'spec' && at[1] === 'versions' &&
    ((at[3] === 'schema' && at[4] === 'openAPIV3Schema' && at.length === 5) ||
     (at[3] === 'additionalPrinterColumns' && at[5] === 'description' && at.length === 6))],
]);

/** What is wrong with one document: an unknown kind, schema errors, unknown fields. */
export function documentProblems({ file, index, doc }) {
  const where = `${file} document ${index}`;
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) return [`${where}: not a mapping`];
  const Model = MODELS.get(`${doc.apiVersion} ${doc.kind}`);
  if (!Model) return [`${where}: unknown kind ${doc.apiVersion} ${doc.kind} (no model for it among the served API versions)`];
  const what = `${where} (${doc.kind} ${doc.metadata?.name})`;
  const errors = schemaErrors(Model, doc).map((e) => `${what}: ${e.instancePath || '/'} ${e.message}`);
  if (errors.length) return errors;
  return unknownFields(Model, doc).map((p) => `${what}: ${p} is not a field of ${doc.apiVersion} ${doc.kind}`);
}

// ------------------------------------------------------------------------ lookups

/** matchLabels of `selector` all present in `labels` (matchExpressions are not used here). */
export function selects(selector, labels) {
  assert.ok(!selector?.matchExpressions, 'matchExpressions are not used by these manifests');
  const want = selector?.matchLabels ?? selector ?? {};
  return Object.keys(want).length > 0 && Object.entries(want).every(([k, v]) => labels?.[k] === v);
}

/** The container port a Service / probe port (number or name) reaches. */
export function containerPortOf(container, port) {
  if (typeof port === 'number') return port;
  const named = (container.ports ?? []).find((p) => p.name === port);
  assert.ok(named, `container ${container.name} has no port named ${port}`);
  return named.containerPort;
}

/** The seconds of a preStop sleep: the sleep action or `exec: sleep N`. */
export function preStopSeconds(container) {
  const hook = container.lifecycle?.preStop;
  assert.ok(hook, `container ${container.name} has a preStop hook`);
  if (hook.sleep) return Number(hook.sleep.seconds);
  const cmd = hook.exec?.command ?? [];
  const m = /^(?:.*\/)?sleep$/.test(cmd[0] ?? '') ? /^\d+$/.exec(cmd[1] ?? '') : null;
  assert.ok(m, `preStop is a sleep (action or exec sleep N): ${JSON.stringify(hook)}`);
  return Number(m[0]);
}

/** Every `*_env` value of a config (the environment variables it reads secrets from). */
export function envReferences(node, path = '') {
  if (Array.isArray(node)) return node.flatMap((item, i) => envReferences(item, `${path}[${i}]`));
  if (node === null || typeof node !== 'object') return [];
  return Object.entries(node).flatMap(([key, value]) => {
    const at = path ? `${path}.${key}` : key;
    if (key.endsWith('_env') && typeof value === 'string') return [{ at, name: value }];
    return envReferences(value, at);
  });
}

/** The name the Prometheus adapter exposes for `series` under `rule.name` (its documented default: $1 with one group, else $0). */
export function adapterExposedName(rule, series) {
  const re = new RegExp(rule.name?.matches ?? '^(.*)$');
  const m = re.exec(series);
  if (!m) return undefined;
  const as = rule.name?.as || (m.length === 2 ? '$1' : '$0');
  return as.replace(/\$\{?(\d+)\}?/g, (_, n) => m[Number(n)] ?? '');
}


// ------------------------------------------------------------------------ a rendering

/**
 * The gateway of a set of manifests ([{file, index, doc}]): its Deployment `name`, pod
 * template, tahua container, the ConfigMap mounted as `--config DIR` and the config it
 * holds, with lookups by kind (all) and by kind and name (only).
 */
export function gatewayRendering(manifests, name) {
  const all = (kind) => manifests.filter((m) => m.doc.kind === kind).map((m) => m.doc);
  const only = (kind, objectName) => {
    const found = all(kind).filter((d) => d.metadata?.name === objectName);
    assert.equal(found.length, 1, `exactly one ${kind} named ${objectName}`);
    return found[0];
  };
  const fileOf = (doc) => manifests.find((m) => m.doc === doc).file;

  const deployment = only('Deployment', name);
  const pod = deployment.spec.template;
  const container = pod.spec.containers.find((c) => c.name === 'tahua');
  assert.ok(container, 'the Deployment has a container named tahua');
  const args = [...(container.command ?? []), ...(container.args ?? [])];
  const at = args.indexOf('--config');
  assert.ok(at >= 0 && args[at + 1], `tahua runs with --config DIR: ${JSON.stringify(args)}`);
  const configDir = args[at + 1];
  const mount = (container.volumeMounts ?? []).find((v) => v.mountPath === configDir);
  assert.ok(mount, `a volume is mounted at ${configDir}`);
  const volume = pod.spec.volumes.find((v) => v.name === mount.name);
  assert.ok(volume?.configMap, `the volume at ${configDir} is a ConfigMap`);
  const configMap = only('ConfigMap', volume.configMap.name);
  const tahua = tahuaConfigOf(configMap);
  return { manifests, all, only, fileOf, deployment, pod, container, configDir, configMap, tahua };
}

// ------------------------------------------------------------------------ property checks

/** Rolls without losing capacity; probes /readyz and /healthz on the public listener. */
export function checkRollout({ deployment, container, tahua }, { hpaOwnsReplicas }) {
  assert.equal(deployment.spec.strategy?.type, 'RollingUpdate');
  const maxUnavailable = deployment.spec.strategy.rollingUpdate?.maxUnavailable;
  assert.ok(maxUnavailable === 0 || maxUnavailable === '0%', `maxUnavailable is 0, not ${maxUnavailable}`);
  if (hpaOwnsReplicas) assert.equal(deployment.spec.replicas, undefined, 'no replicas field: the HPA owns the count');

  const listenerPort = tahua.config.listeners?.[0]?.port;
  assert.ok(Number.isInteger(listenerPort) && listenerPort > 0, 'the config has a fixed listener port');
  assert.equal(container.readinessProbe?.httpGet?.path, '/readyz');
  assert.equal(containerPortOf(container, container.readinessProbe.httpGet.port), listenerPort, 'readiness on the public listener');
  assert.equal(container.livenessProbe?.httpGet?.path, '/healthz');
  assert.equal(containerPortOf(container, container.livenessProbe.httpGet.port), listenerPort, 'liveness on the public listener');
}

/** terminationGracePeriodSeconds > preStop sleep + drain_timeout + 5 s; returns the three. */
export function checkDrain({ pod, container, tahua }) {
  const grace = pod.spec.terminationGracePeriodSeconds;
  assert.ok(Number.isInteger(grace), 'terminationGracePeriodSeconds is set');
  const sleep = preStopSeconds(container);
  assert.ok(sleep > 0, 'the preStop sleep gives the endpoints time to be removed');
  const drainS = durationMs(tahua.config.server?.drain_timeout ?? '30s') / 1000;
  const acceptGraceS = durationMs(tahua.config.server?.drain_accept_grace ?? '0s') / 1000;
  assert.ok(acceptGraceS <= drainS, 'drain_accept_grace is part of drain_timeout');
  assert.ok(grace > sleep + drainS + 5,
    `terminationGracePeriodSeconds ${grace} > preStop ${sleep} + drain_timeout ${drainS} + 5 (docs/operations.md "Signals")`);
  return { grace, sleep, drainS };
}

/** The ConfigMap is the config directory, mounted whole so that an update reloads it. */
export function checkConfigMount({ container, configDir, configMap, deployment, tahua }) {
  const mount = container.volumeMounts.find((v) => v.mountPath === configDir);
  assert.equal(mount.subPath, undefined, 'no subPath: the kubelet updates only whole ConfigMap volumes');
  assert.equal(mount.subPathExpr, undefined);
  assert.equal(mount.readOnly, true, 'the config is read-only');
  const args = [...(container.command ?? []), ...(container.args ?? [])];
  assert.ok(!args.includes('--no-watch'), 'the config watch stays on');
  assert.equal(configMap.metadata.namespace, deployment.metadata.namespace);
  assert.deepEqual(tahua.files, Object.keys(configMap.data).sort(), 'every key of the ConfigMap is a config file (*.yaml)');
  const routes = tahua.resources.filter((r) => r.kind === 'ModelRoute');
  assert.ok(routes.length > 0, 'the ConfigMap carries ModelRoute resources');
  for (const r of routes) assert.ok(r.metadata?.name && r.spec?.target, `${r.file}: ModelRoute with a name and a target`);
}

/**
 * Every *_env the config names comes from the Secret `secretName`, never a literal;
 * `secretKeys` (a Set, or null when the Secret is made outside these manifests) holds its keys.
 */
export function checkSecretEnv({ container, tahua }, { secretName, secretKeys, keysFrom = 'the Secret', others = {} }) {
  const refs = envReferences(tahua.config);
  assert.ok(refs.some((r) => r.at.endsWith('api_key_env')), 'the config reads provider keys from the environment');
  for (const { at, name } of refs) {
    const env = (container.env ?? []).filter((e) => e.name === name);
    assert.equal(env.length, 1, `${at}: the container sets ${name} once`);
    assert.equal(env[0].value, undefined, `${name} is not a literal in the manifest`);
    const ref = env[0].valueFrom?.secretKeyRef;
    assert.ok(ref, `${name} comes from a Secret`);
    if (others[name]) {
      // A Secret of the operator's own ({name, key}), e.g. the Redis password's.
      assert.deepEqual({ name: ref.name, key: ref.key }, others[name], `${name} from the Secret ${others[name].name}`);
      continue;
    }
    assert.equal(ref.name, secretName, `${name} from the Secret ${secretName}`);
    if (secretKeys) assert.ok(secretKeys.has(ref.key), `${keysFrom} shows the key ${ref.key}`);
  }
  for (const e of (container.env ?? []).filter((x) => x.valueFrom?.secretKeyRef)) {
    assert.ok(refs.some((r) => r.name === e.name), `secret variable ${e.name} is one the config reads (not a leftover of a rename)`);
  }
  // The public listener is open to the ingress: authentication must be on.
  const c = tahua.config;
  assert.ok(c.auth?.enabled === true || c.tenants || c.keys, 'auth is on (auth.enabled, tenants or keys)');
}

/** The Services of the gateway expose the public listener and never the admin port. */
export function checkService({ all, container, pod, tahua }) {
  const adminPort = tahua.config.admin?.listen?.port;
  assert.ok(Number.isInteger(adminPort), 'the config has an admin listener');
  const listenerPort = tahua.config.listeners[0].port;
  const services = all('Service').filter((s) => selects(s.spec.selector, pod.metadata.labels));
  assert.ok(services.length > 0, 'a Service selects the gateway pods');
  for (const svc of services) {
    for (const p of svc.spec.ports) {
      const target = containerPortOf(container, p.targetPort ?? p.port);
      assert.notEqual(target, adminPort, `Service ${svc.metadata.name} port ${p.name} does not reach the admin listener`);
      assert.notEqual(p.port, adminPort, `Service ${svc.metadata.name} does not publish the admin port number`);
      assert.equal(target, listenerPort, `Service ${svc.metadata.name} port ${p.name} reaches the public listener`);
    }
  }
  assert.ok(!(container.ports ?? []).some((p) => p.containerPort === adminPort), 'no container port declared for the admin listener');
}

/** Pods spread over nodes, non-root, read-only, no capabilities, RuntimeDefault seccomp, resources set. */
export function checkPodSecurity({ all, pod, container, tahua }, { workloads: expected }) {
  const term = pod.spec.affinity?.podAntiAffinity?.preferredDuringSchedulingIgnoredDuringExecution ?? [];
  assert.ok(term.some((t) => t.podAffinityTerm.topologyKey === 'kubernetes.io/hostname' &&
    selects(t.podAffinityTerm.labelSelector, pod.metadata.labels)), 'preferred anti-affinity of the gateway pods per node');
  assert.equal(pod.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution, undefined, 'preferred, not required');

  const workloads = [...all('Deployment'), ...all('StatefulSet')];
  assert.ok(workloads.length >= expected.length, expected.join(' and '));
  for (const w of workloads) {
    const spec = w.spec.template.spec;
    for (const c of spec.containers) {
      const what = `${w.kind} ${w.metadata.name} container ${c.name}`;
      const sc = c.securityContext ?? {};
      assert.equal(sc.runAsNonRoot ?? spec.securityContext?.runAsNonRoot, true, `${what}: runAsNonRoot`);
      const uid = sc.runAsUser ?? spec.securityContext?.runAsUser;
      assert.ok(Number.isInteger(uid) && uid !== 0, `${what}: a numeric non-root UID`);
      assert.equal(sc.readOnlyRootFilesystem, true, `${what}: readOnlyRootFilesystem`);
      assert.equal(sc.allowPrivilegeEscalation, false, `${what}: allowPrivilegeEscalation false`);
      assert.notEqual(sc.privileged, true, `${what}: not privileged`);
      assert.deepEqual(sc.capabilities?.drop, ['ALL'], `${what}: drops ALL capabilities`);
      assert.equal(sc.capabilities?.add, undefined, `${what}: adds none`);
      assert.equal((sc.seccompProfile ?? spec.securityContext?.seccompProfile)?.type, 'RuntimeDefault', `${what}: seccomp RuntimeDefault`);
      for (const r of ['cpu', 'memory']) assert.ok(c.resources?.requests?.[r], `${what}: requests ${r}`);
      assert.ok(c.resources?.limits?.memory, `${what}: a memory limit`);
    }
  }
  // One worker thread per CPU of the limit (the request without one), rounded up: 0 would
  // mean one per core of the node.
  const cpu = container.resources.limits?.cpu ?? container.resources.requests.cpu;
  assert.equal(tahua.config.server?.workers, Math.max(1, Math.ceil(cpuCores(cpu))), 'server.workers = the CPU limit, rounded up');
}

/** tahua writes only to emptyDirs mounted where its config writes, the spill's big enough. */
export function checkWrites({ pod, container, tahua }) {
  const c = tahua.config;
  const writes = [];
  if (c.usage?.spill_dir) writes.push({ what: 'usage.spill_dir', dir: c.usage.spill_dir });
  for (const s of c.usage?.sinks ?? []) if (s.type === 'file') writes.push({ what: `usage sink ${s.name}`, dir: posix.dirname(s.path) });
  // The SQLite ledger outlives the pod: on a PersistentVolumeClaim, never an emptyDir.
  for (const s of c.usage?.sinks ?? []) if (s.type === 'sqlite') writes.push({ what: `ledger ${s.name}`, dir: posix.dirname(s.path), persistent: true });
  if (c.store?.journal) writes.push({ what: 'store.journal', dir: posix.dirname(c.store.journal) });
  if (c.healing?.audit_log) writes.push({ what: 'healing.audit_log', dir: posix.dirname(c.healing.audit_log) });
  if (c.access_log?.path && c.access_log.path !== '-') writes.push({ what: 'access_log.path', dir: posix.dirname(c.access_log.path) });
  assert.ok(writes.length > 0, 'the config writes somewhere (the usage spill)');

  const writable = (container.volumeMounts ?? []).filter((m) => m.readOnly !== true);
  const under = (dir, m) => dir === m.mountPath || dir.startsWith(`${m.mountPath.replace(/\/$/, '')}/`);
  for (const w of writes) {
    assert.ok(writable.some((m) => under(w.dir, m)), `${w.what} (${w.dir}) is on a writable volume`);
  }
  for (const m of writable) {
    const mine = writes.filter((w) => under(w.dir, m));
    assert.ok(mine.length > 0, `writable mount ${m.mountPath} is one tahua writes to`);
    const volume = pod.spec.volumes.find((v) => v.name === m.name);
    if (mine.some((w) => w.persistent)) assert.ok(volume.persistentVolumeClaim, `${m.mountPath} (${mine[0].what}) is a PersistentVolumeClaim`);
    else assert.ok(volume.emptyDir, `${m.mountPath} is an emptyDir`);
  }
  // The spill fills up to spill_max_bytes per sink; the volume must hold that, or the
  // kubelet evicts the pod before tahua drops (and counts) records.
  const spillMount = writable.find((m) => under(c.usage.spill_dir, m));
  const sizeLimit = pod.spec.volumes.find((v) => v.name === spillMount.name).emptyDir.sizeLimit;
  assert.ok(sizeLimit, 'the spill emptyDir has a sizeLimit');
  const sinks = (c.usage.sinks ?? []).length;
  const perSink = c.usage.spill_max_bytes ?? 1073741824;
  assert.ok(quantityBytes(sizeLimit) > perSink * sinks, `sizeLimit ${sizeLimit} > ${sinks} x spill_max_bytes ${perSink}`);
}

/** One PodDisruptionBudget covers the gateway pods, without blocking node drains. */
export function checkPdb({ all, pod }) {
  const pdbs = all('PodDisruptionBudget').filter((p) => selects(p.spec.selector, pod.metadata.labels));
  assert.equal(pdbs.length, 1, 'one PodDisruptionBudget selects the gateway pods');
  const { maxUnavailable, minAvailable } = pdbs[0].spec;
  assert.ok(maxUnavailable !== undefined || minAvailable !== undefined, 'it limits disruptions');
  if (maxUnavailable !== undefined) assert.notEqual(maxUnavailable, 0, 'maxUnavailable 0 would block every node drain');
}

/** Redis: a StatefulSet with AOF, noeviction, a volume per pod, behind the headless Service store.redis.url names. */
export function checkBundledRedis({ all, only, pod, tahua }) {
  const store = tahua.config.store;
  assert.equal(store?.type, 'redis', 'the config uses the Redis store');
  assert.notEqual(store.redis?.require_persistence, false, 'tahua checks the persistence');
  const url = new URL(store.redis.url);
  const [stsPod, svcName, ns] = url.hostname.split('.');
  assert.equal(url.hostname, `${stsPod}.${svcName}.${ns}.svc.cluster.local`, 'the url names a StatefulSet pod of a headless Service');

  const svc = only('Service', svcName);
  assert.equal(svc.metadata.namespace, ns);
  assert.equal(svc.spec.clusterIP, 'None', 'headless');
  const sts = all('StatefulSet').find((s) => stsPod === `${s.metadata.name}-0`);
  assert.ok(sts, `a StatefulSet whose first pod is ${stsPod}`);
  assert.equal(sts.spec.serviceName, svcName, 'the StatefulSet names the headless Service');
  assert.ok(selects(svc.spec.selector, sts.spec.template.metadata.labels), 'the Service selects the Redis pods');
  const redis = sts.spec.template.spec.containers[0];
  const port = svc.spec.ports.find((p) => p.port === Number(url.port || 6379));
  assert.ok(port, `the Service has the url's port ${url.port}`);
  assert.equal(containerPortOf(redis, port.targetPort ?? port.port), Number(url.port || 6379));

  const args = [...(redis.command ?? []), ...(redis.args ?? [])].join(' ');
  assert.match(args, /--appendonly yes\b/, 'AOF on');
  assert.match(args, /--maxmemory-policy noeviction\b/, 'never evicts');
  const dir = /--dir (\S+)/.exec(args)?.[1];
  assert.ok(dir, 'the data directory is set');
  const claims = sts.spec.volumeClaimTemplates ?? [];
  const dataMount = redis.volumeMounts.find((m) => m.mountPath === dir);
  assert.ok(dataMount && claims.some((c) => c.metadata.name === dataMount.name), `${dir} is a volume of the PVC template`);

  const policies = all('NetworkPolicy').filter((p) => selects(p.spec.podSelector, sts.spec.template.metadata.labels));
  assert.equal(policies.length, 1, 'a NetworkPolicy guards the password-less Redis');
  const from = policies[0].spec.ingress.flatMap((r) => r.from ?? []);
  assert.ok(from.length > 0 && from.every((f) => f.podSelector && selects(f.podSelector, pod.metadata.labels)), 'only the gateway pods reach it');
}

/** Each dns deployment of the config resolves a headless Service with the provider's port. */
export function checkDiscovery({ only, tahua }) {
  const found = [];
  for (const model of tahua.config.models ?? []) {
    for (const d of model.deployments ?? []) {
      if (!d.dns) continue;
      const dns = typeof d.dns === 'string' ? { name: d.dns } : d.dns;
      const provider = tahua.config.providers.find((p) => p.name === d.provider);
      assert.ok(provider, `${model.name}/${d.id}: provider ${d.provider}`);
      const srv = (dns.type ?? 'A') === 'SRV';
      const m = /^(?:_([a-z0-9-]+)\._tcp\.)?([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local$/.exec(dns.name);
      assert.ok(m && Boolean(m[1]) === srv, `${model.name}/${d.id}: dns.name ${dns.name} is a Service name (SRV: _port._tcp.)`);
      const svc = only('Service', m[2]);
      assert.equal(svc.metadata.namespace, m[3], `Service ${m[2]} is in namespace ${m[3]}`);
      assert.equal(svc.spec.clusterIP, 'None', `Service ${m[2]} is headless: one record per pod`);
      if (srv) {
        assert.ok(svc.spec.ports.some((p) => p.name === m[1]), `Service ${m[2]} has the port named ${m[1]}`);
      } else {
        const base = new URL(provider.base_url);
        const portNumber = dns.port ?? Number(base.port || (base.protocol === 'https:' ? 443 : 80));
        assert.ok(svc.spec.ports.some((p) => p.port === portNumber), `Service ${m[2]} serves port ${portNumber}`);
      }
      found.push(dns.name);
    }
  }
  assert.ok(found.length > 0, 'the ConfigMap has a discovery example');
}

/** The HPA: 3 to 20 replicas on CPU 70 % and one Pods metric, the behaviour policies. Returns the Pods metric. */
export function checkHpa({ all, deployment }) {
  const hpa = all('HorizontalPodAutoscaler').find((h) => h.spec.scaleTargetRef.name === deployment.metadata.name);
  assert.ok(hpa, 'an HPA scales the gateway Deployment');
  assert.equal(hpa.apiVersion, 'autoscaling/v2');
  assert.equal(hpa.spec.scaleTargetRef.kind, 'Deployment');
  assert.equal(hpa.spec.minReplicas, 3);
  assert.equal(hpa.spec.maxReplicas, 20);

  const cpu = hpa.spec.metrics.find((m) => m.type === 'Resource' && m.resource.name === 'cpu');
  assert.deepEqual(cpu?.resource.target, { type: 'Utilization', averageUtilization: 70 });

  const pods = hpa.spec.metrics.filter((m) => m.type === 'Pods');
  assert.equal(pods.length, 1, 'one Pods metric');
  assert.equal(pods[0].pods.target.type, 'AverageValue');
  assert.ok(Number(pods[0].pods.target.averageValue) > 0, 'a per-pod stream target');

  const up = hpa.spec.behavior.scaleUp;
  assert.deepEqual(up.policies, [{ type: 'Pods', value: 2, periodSeconds: 60 }], 'up by 2 pods per 60 s');
  const down = hpa.spec.behavior.scaleDown;
  assert.equal(down.stabilizationWindowSeconds, 300);
  assert.deepEqual(down.policies, [{ type: 'Pods', value: 1, periodSeconds: 120 }], 'down by 1 pod per 120 s');
  return pods[0];
}

/** ingress-nginx settings for SSE streams, only /v1 routed. */
export function checkIngress({ all, only, pod, tahua }) {
  const ingresses = all('Ingress');
  assert.ok(ingresses.length > 0, 'an Ingress');
  const maxBody = tahua.config.server?.max_body_bytes ?? 16777216;
  for (const ing of ingresses) {
    const a = ing.metadata.annotations ?? {};
    assert.equal(a['nginx.ingress.kubernetes.io/proxy-read-timeout'], '600');
    assert.equal(a['nginx.ingress.kubernetes.io/proxy-send-timeout'], '600');
    assert.equal(a['nginx.ingress.kubernetes.io/proxy-buffering'], 'off');
    assert.equal(a['nginx.ingress.kubernetes.io/proxy-http-version'], '1.1');
    assert.ok(nginxSizeBytes(a['nginx.ingress.kubernetes.io/proxy-body-size'] ?? '1m') >= maxBody,
      `proxy-body-size allows server.max_body_bytes (${maxBody})`);
    const heartbeatS = durationMs(tahua.config.server?.stream_heartbeat ?? '15s') / 1000;
    assert.ok(heartbeatS > 0 && heartbeatS < 600, 'stream heartbeats come well within the read timeout');
    assert.equal(ing.spec.ingressClassName, 'nginx');
    for (const rule of ing.spec.rules) {
      for (const p of rule.http.paths) {
        assert.match(p.path, /^\/v1(\/|$)/, `${p.path}: only the API is public (not /metrics, /healthz)`);
        const svc = only('Service', p.backend.service.name);
        assert.ok(selects(svc.spec.selector, pod.metadata.labels), 'to the gateway Service');
        const port = p.backend.service.port;
        assert.ok(svc.spec.ports.some((sp) => (port.name ? sp.name === port.name : sp.port === port.number)), 'a port of that Service');
      }
    }
  }
}

/** Gateway API v1 HTTPRoute with timeouts for long streams, only /v1 routed. */
export function checkHttpRoute({ all, only, pod }) {
  const routes = all('HTTPRoute');
  assert.ok(routes.length > 0, 'an HTTPRoute');
  for (const route of routes) {
    assert.equal(route.apiVersion, 'gateway.networking.k8s.io/v1');
    for (const rule of route.spec.rules) {
      const request = gatewayDurationMs(rule.timeouts?.request ?? '0s');
      assert.ok(request >= 600_000, `request timeout ${rule.timeouts?.request} lets a stream last 10 minutes`);
      if (rule.timeouts.backendRequest) {
        assert.ok(gatewayDurationMs(rule.timeouts.backendRequest) <= request, 'backendRequest <= request');
      }
      for (const match of rule.matches) assert.match(match.path.value, /^\/v1(\/|$)/, 'only the API is public');
      for (const ref of rule.backendRefs) {
        const svc = only('Service', ref.name);
        assert.ok(selects(svc.spec.selector, pod.metadata.labels), 'to the gateway Service');
        assert.ok(svc.spec.ports.some((p) => p.port === ref.port), `port ${ref.port} of that Service`);
      }
    }
  }
}

/** The ServiceMonitor scrapes /metrics of the gateway Service; the PrometheusRule's spec is deploy/prometheus/alerts.yaml. */
export function checkMonitoring({ all, fileOf, pod }) {
  const monitors = all('ServiceMonitor');
  assert.equal(monitors.length, 1);
  const [svc] = all('Service').filter((s) => selects(monitors[0].spec.selector, s.metadata.labels));
  assert.ok(svc && selects(svc.spec.selector, pod.metadata.labels), 'it selects the gateway Service');
  for (const ep of monitors[0].spec.endpoints) {
    assert.ok(svc.spec.ports.some((p) => p.name === ep.port), `endpoint port ${ep.port} is a named port of the Service`);
    assert.equal(ep.path ?? '/metrics', '/metrics');
  }
  const rules = all('PrometheusRule');
  assert.equal(rules.length, 1);
  const [alerts] = parseConfigText(readFileSync(ALERTS_FILE, 'utf8'), 'alerts.yaml');
  assert.ok(isDeepStrictEqual(rules[0].spec, alerts),
    `${fileOf(rules[0])}: spec differs from deploy/prometheus/alerts.yaml (regenerate it, see the file's header)`);
}

// ------------------------------------------------------------------------ tahua's CRDs and the Kubernetes API

/**
 * What tahua asks of the Kubernetes API, read from its source so that the CRDs and the Role
 * cannot drift from it: the kinds it lists and watches (kind -> plural), their group and
 * version, and the verbs of the scale action on deployments/scale (its HTTP methods).
 */
export function tahuaKubeRequests() {
  const dir = join(REPO_ROOT, 'src', 'kubernetes');
  const watch = readFileSync(join(dir, 'resource_watch.cpp'), 'utf8');
  const table = /kKubeKinds\[\d*\]\s*=\s*\{([^;]*)\};/.exec(watch);
  assert.ok(table, 'src/kubernetes/resource_watch.cpp has the kKubeKinds table');
  const kinds = new Map([...table[1].matchAll(/\{"(\w+)",\s*"(\w+)"\}/g)].map((m) => [m[1], m[2]]));
  assert.ok(kinds.size > 0, 'kKubeKinds lists kinds');
  const gv = /"\/apis\/([a-z0-9.-]+)\/(v[0-9a-z]+)\/namespaces\/"/.exec(watch);
  assert.ok(gv, 'resource_watch.cpp builds /apis/GROUP/VERSION/namespaces/ paths');
  const scale = readFileSync(join(dir, 'deployment_scale.cpp'), 'utf8');
  assert.match(scale, /"\/apis\/apps\/v1\/namespaces\/"[^;]*"\/deployments\/"[^;]*"\/scale"/, 'deployment_scale.cpp calls apps/v1 deployments/scale');
  const methods = [...new Set([...scale.matchAll(/\.call\("([A-Z]+)"/g)].map((m) => m[1]))];
  assert.ok(methods.length > 0, 'deployment_scale.cpp makes calls');
  return { group: gv[1], version: gv[2], kinds, scaleVerbs: methods.map((m) => m.toLowerCase()).sort() };
}

// The keywords the CRDs may use: those crdObjectProblems checks. Anything else in a schema
// is a problem, so a constraint the test would silently ignore cannot creep in.
const CRD_SCHEMA_KEYWORDS = new Set(['type', 'description', 'properties', 'required', 'items', 'additionalProperties', 'enum',
  'pattern', 'minimum', 'maximum', 'minLength', 'minItems', 'x-kubernetes-preserve-unknown-fields', 'x-kubernetes-int-or-string']);
const CRD_TYPES = {
  object: (v) => v !== null && typeof v === 'object' && !Array.isArray(v),
  array: Array.isArray,
  string: (v) => typeof v === 'string',
  integer: Number.isInteger,
  number: (v) => typeof v === 'number' && Number.isFinite(v),
  boolean: (v) => typeof v === 'boolean',
};

/**
 * Why the API server would refuse `schema` as a structural schema (a type on every node but
 * those that preserve unknown fields or are int-or-string; properties or additionalProperties,
 * not both; items on arrays), or why crdObjectProblems could not check it fully.
 */
export function crdSchemaProblems(schema, at = '') {
  const where = at || '/';
  if (!CRD_TYPES.object(schema)) return [`${where}: not a schema`];
  const out = [];
  for (const k of Object.keys(schema)) if (!CRD_SCHEMA_KEYWORDS.has(k)) out.push(`${where}: keyword ${k} is not one the checker knows`);
  const preserve = schema['x-kubernetes-preserve-unknown-fields'] === true;
  const intOrString = schema['x-kubernetes-int-or-string'] === true;
  const { type } = schema;
  if (intOrString && type !== undefined) out.push(`${where}: x-kubernetes-int-or-string takes no type`);
  if (type === undefined && !preserve && !intOrString) out.push(`${where}: no type (only x-kubernetes-preserve-unknown-fields or -int-or-string may omit it)`);
  if (type !== undefined && !(type in CRD_TYPES)) out.push(`${where}: unknown type ${type}`);
  const objectOnly = ['properties', 'required', 'additionalProperties'].filter((k) => k in schema);
  if (objectOnly.length && type !== 'object') out.push(`${where}: ${objectOnly.join(', ')} on a ${type ?? 'typeless'} node`);
  if (schema.properties && 'additionalProperties' in schema) out.push(`${where}: properties and additionalProperties together`);
  if ('additionalProperties' in schema && !CRD_TYPES.object(schema.additionalProperties)) {
    out.push(`${where}: additionalProperties must be a schema (false and preserve-unknown-fields contradict; pruning refuses unknown fields anyway)`);
  }
  for (const r of schema.required ?? []) if (!schema.properties?.[r]) out.push(`${where}: required ${r} is not a property`);
  if (type === 'array' && !CRD_TYPES.object(schema.items)) out.push(`${where}: an array needs items`);
  if ('items' in schema && type !== 'array') out.push(`${where}: items on a ${type ?? 'typeless'} node`);
  if (schema.enum && !(Array.isArray(schema.enum) && schema.enum.every((e) => CRD_TYPES[type]?.(e)))) out.push(`${where}: enum values of another type than ${type}`);
  if ('pattern' in schema) {
    if (type !== 'string') out.push(`${where}: pattern on a ${type} node`);
    try { new RegExp(schema.pattern, 'u'); } catch (err) { out.push(`${where}: pattern: ${err.message}`); }
  }
  for (const k of ['minimum', 'maximum']) if (k in schema && type !== 'integer' && type !== 'number') out.push(`${where}: ${k} on a ${type} node`);
  if ('minLength' in schema && type !== 'string') out.push(`${where}: minLength on a ${type} node`);
  if ('minItems' in schema && type !== 'array') out.push(`${where}: minItems on a ${type} node`);
  if (typeof schema.description === 'string' && !schema.description.trim()) out.push(`${where}: an empty description`);
  for (const [k, sub] of Object.entries(schema.properties ?? {})) out.push(...crdSchemaProblems(sub, `${at}/properties/${k}`));
  if (CRD_TYPES.object(schema.additionalProperties)) out.push(...crdSchemaProblems(schema.additionalProperties, `${at}/additionalProperties`));
  if (CRD_TYPES.object(schema.items)) out.push(...crdSchemaProblems(schema.items, `${at}/items`));
  return out;
}

/**
 * What the API server would refuse in `value` under `schema` (as crdSchemaProblems allows
 * it): types, enums, patterns, bounds, required fields, and fields the schema does not
 * declare outside x-kubernetes-preserve-unknown-fields (strict field validation, kubectl
 * apply's default, refuses them; the server would otherwise drop them silently).
 */
export function crdValueProblems(schema, value, at = '') {
  const where = at || '/';
  if (schema['x-kubernetes-int-or-string']) {
    return Number.isInteger(value) || typeof value === 'string' ? [] : [`${where} must be an integer or a string`];
  }
  if (schema.type && !CRD_TYPES[schema.type](value)) return [`${where} must be ${/^[aeiou]/.test(schema.type) ? 'an' : 'a'} ${schema.type}`];
  const out = [];
  if (schema.enum && !schema.enum.some((e) => isDeepStrictEqual(e, value))) out.push(`${where} must be one of ${schema.enum.join(', ')}`);
  if (schema.pattern !== undefined && !new RegExp(schema.pattern, 'u').test(value)) out.push(`${where} must match ${schema.pattern}`);
  if (schema.minimum !== undefined && value < schema.minimum) out.push(`${where} must be at least ${schema.minimum}`);
  if (schema.maximum !== undefined && value > schema.maximum) out.push(`${where} must be at most ${schema.maximum}`);
  if (schema.minLength !== undefined && [...value].length < schema.minLength) out.push(`${where} must have at least ${schema.minLength} characters`);
  if (schema.minItems !== undefined && value.length < schema.minItems) out.push(`${where} must have at least ${schema.minItems} items`);
  if (schema.type === 'object') {
    for (const r of schema.required ?? []) if (!(r in value)) out.push(`${pointer([...splitPointer(at), r])} is required`);
    for (const [k, v] of Object.entries(value)) {
      const sub = schema.properties?.[k] ?? schema.additionalProperties;
      const here = pointer([...splitPointer(at), k]);
      if (sub) out.push(...crdValueProblems(sub, v, here));
      else if (schema['x-kubernetes-preserve-unknown-fields'] !== true) out.push(`${here} is not a field of the schema`);
    }
  }
  if (schema.type === 'array') value.forEach((v, i) => out.push(...crdValueProblems(schema.items, v, `${at}/${i}`)));
  return out;
}

const splitPointer = (at) => (at ? at.slice(1).split('/').map((k) => k.replace(/~1/g, '/').replace(/~0/g, '~')) : []);

// A Kubernetes object name: a DNS-1123 subdomain.
const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** The CRDs among `manifests` by the kind they define. */
export function crdsByKind(manifests) {
  return new Map(manifests.filter((m) => m.doc.kind === 'CustomResourceDefinition').map((m) => [m.doc.spec.names.kind, m.doc]));
}

/**
 * What the API server would refuse in a tahua.dev/v1 object `doc` given the CRDs
 * (crdsByKind): an unknown kind, a name that is not a DNS subdomain, or its schema's
 * complaints (metadata is the server's own ObjectMeta, checked for its name only).
 */
export function crdObjectProblems(crds, doc, where) {
  const crd = crds.get(doc?.kind);
  if (!crd) return [`${where}: no CRD defines ${doc?.apiVersion} ${doc?.kind}`];
  const version = crd.spec.versions.find((v) => `${crd.spec.group}/${v.name}` === doc.apiVersion && v.served);
  if (!version) return [`${where}: ${doc.apiVersion} is not a served version of ${doc.kind}`];
  const what = `${where} (${doc.kind} ${doc.metadata?.name})`;
  const out = [];
  if (!DNS_SUBDOMAIN.test(doc.metadata?.name ?? '')) out.push(`${what}: metadata.name must be a DNS subdomain name (lower case, digits, '-', '.')`);
  const { metadata, ...rest } = doc;
  const problems = crdValueProblems(version.schema.openAPIV3Schema, { ...rest, metadata: {} });
  return [...out, ...problems.map((p) => `${what}: ${p}`)];
}

/**
 * The tahua.dev/v1 documents of a Markdown text's yaml code blocks, as kubectl would read
 * them (YAML 1.1), those in a ConfigMap's data too: [{where, doc}].
 */
export function markdownResources(text, file) {
  const out = [];
  for (const m of text.matchAll(/^```ya?ml\n([^]*?)^```$/gm)) {
    if (!m[1].includes('tahua.dev/v1')) continue;
    const where = `${file}:${text.slice(0, m.index).split('\n').length + 1}`;
    for (const { doc } of parseManifestText(m[1], where)) {
      if (doc.apiVersion === 'tahua.dev/v1') out.push({ where, doc });
      if (doc.kind !== 'ConfigMap') continue;
      for (const [key, data] of Object.entries(doc.data ?? {})) {
        for (const inner of parseManifestText(data, key)) if (inner.doc.apiVersion === 'tahua.dev/v1') out.push({ where: `${where} ${key}`, doc: inner.doc });
      }
    }
  }
  return out;
}

/** The schema node at a printer column's jsonPath (.spec.a.b), or undefined. */
function schemaAt(schema, jsonPath) {
  let node = schema;
  for (const key of jsonPath.replace(/^\./, '').split('.')) node = node?.properties?.[key];
  return node;
}

/**
 * tahua's CRDs (crdsByKind): one per kind its source watches, with its plural, in its group,
 * namespaced, one served and stored version whose schema is structural and requires a spec;
 * names, short names and printer columns that resolve. Returns tahuaKubeRequests().
 */
export function checkCrds(crds) {
  const api = tahuaKubeRequests();
  assert.deepEqual([...crds.keys()].sort(), [...api.kinds.keys()].sort(), 'one CRD per kind tahua lists and watches (src/kubernetes/resource_watch.cpp)');
  const shortNames = new Set();
  for (const [kind, crd] of crds) {
    const { names } = crd.spec;
    const plural = api.kinds.get(kind);
    assert.equal(crd.spec.group, api.group, `${kind}: group ${api.group}`);
    assert.equal(names.plural, plural, `${kind}: plural ${plural}, the path tahua requests`);
    assert.equal(crd.metadata.name, `${plural}.${api.group}`, `${kind}: the CRD's name is <plural>.<group>`);
    assert.equal(names.singular, kind.toLowerCase());
    assert.equal(names.listKind, `${kind}List`);
    assert.equal(crd.spec.scope, 'Namespaced', `${kind}: namespaced (tahua watches its own namespace)`);
    assert.ok(names.shortNames?.length > 0, `${kind}: a short name`);
    for (const n of names.shortNames) {
      assert.ok(!shortNames.has(n), `short name ${n} used once`);
      shortNames.add(n);
    }
    assert.equal(crd.metadata.namespace, undefined, `${kind}: a CRD is cluster-scoped`);

    assert.equal(crd.spec.versions.length, 1, `${kind}: one version`);
    const [v] = crd.spec.versions;
    assert.deepEqual([v.name, v.served, v.storage], [api.version, true, true], `${kind}: ${api.version} served and stored`);
    const schema = v.schema?.openAPIV3Schema;
    assert.ok(schema, `${kind}: an openAPIV3Schema`);
    assert.deepEqual(crdSchemaProblems(schema), [], `${kind}: the schema is structural and fully checked`);
    assert.equal(schema.type, 'object');
    assert.deepEqual(schema.required, ['spec'], `${kind}: a spec is required`);
    assert.equal(schema.properties.spec.type, 'object', `${kind}: the spec is an object`);
    assert.equal(schema.properties.spec['x-kubernetes-preserve-unknown-fields'], undefined, `${kind}: the spec's own fields are declared (a typo is refused)`);
    for (const [name, prop] of Object.entries(schema.properties.spec.properties)) {
      assert.ok(prop.description, `${kind}: spec.${name} has a description (kubectl explain shows it)`);
    }
    for (const c of v.additionalPrinterColumns ?? []) {
      if (c.jsonPath === '.metadata.creationTimestamp') continue;
      const node = schemaAt(schema, c.jsonPath);
      assert.ok(node, `${kind}: printer column ${c.name} (${c.jsonPath}) is a field of the schema`);
      if (node.type) assert.ok(c.type === node.type || (c.type === 'string' && !['object', 'array'].includes(node.type)), `${kind}: column ${c.name} of type ${c.type}, the field is ${node.type}`);
    }
  }
  return api;
}

/**
 * The Kubernetes API access of the gateway: with `resources` (list and watch tahua's kinds)
 * or `scale` (the healing scale action), the config's `kubernetes` section on the pod's
 * in-cluster defaults, the pod running as its own service account with the token mounted, and
 * one Role bound to that account granting exactly what tahua asks for (tahuaKubeRequests) in
 * its namespace; with neither, no section, no token, no Role. `serviceAccount`: the manifests
 * hold the ServiceAccount itself.
 */
export function checkKubernetesAccess({ all, only, pod, container, deployment, tahua }, { resources, scale, serviceAccount = true }) {
  const k = tahua.config.kubernetes;
  const spec = pod.spec;
  const namespace = deployment.metadata.namespace;
  assert.equal(all('ClusterRole').length + all('ClusterRoleBinding').length, 0, 'no cluster-wide grant');
  if (!resources && !scale) {
    assert.equal(k, undefined, 'no kubernetes section: tahua does not call the API');
    assert.equal(spec.automountServiceAccountToken, false, 'no token in the pod');
    assert.equal(all('Role').length + all('RoleBinding').length, 0, 'no Role');
    return;
  }
  assert.ok(k, 'the config has the kubernetes section');
  assert.equal(k.resources ?? false, resources, `kubernetes.resources is ${resources}`);
  for (const f of ['api_server', 'namespace', 'token_file', 'ca_file']) {
    assert.equal(k[f], undefined, `kubernetes.${f} left to the pod's (the service account's files, KUBERNETES_SERVICE_HOST)`);
  }
  if (k.watch_timeout) assert.ok(durationMs(k.watch_timeout) <= 3600e3, 'watch_timeout at most 1h');
  if (k.timeout) durationMs(k.timeout);

  const account = spec.serviceAccountName;
  assert.ok(account && account !== 'default', 'the pod runs as its own service account, not the namespace\'s default');
  assert.equal(spec.automountServiceAccountToken, true, 'the pod mounts the account\'s token (tahua reads it, the CA and the namespace)');
  const saDir = '/var/run/secrets/kubernetes.io/serviceaccount';
  assert.ok(!(container.volumeMounts ?? []).some((m) => m.mountPath === saDir || saDir.startsWith(`${m.mountPath}/`) || m.mountPath.startsWith(`${saDir}/`)),
    `nothing is mounted over ${saDir}`);
  if (serviceAccount) {
    const sa = only('ServiceAccount', account);
    assert.equal(sa.metadata.namespace, namespace);
    assert.equal(sa.automountServiceAccountToken, false, 'the account gives no token to pods that do not ask for one');
  }

  const bindings = all('RoleBinding').filter((b) => (b.subjects ?? []).some((s) => s.kind === 'ServiceAccount' && s.name === account &&
    (s.namespace ?? b.metadata.namespace) === namespace));
  assert.equal(bindings.length, 1, `one RoleBinding for ServiceAccount ${account}`);
  const [binding] = bindings;
  assert.equal(binding.metadata.namespace, namespace);
  assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: account, namespace }], 'bound to that account only');
  assert.equal(binding.roleRef.apiGroup, 'rbac.authorization.k8s.io');
  assert.equal(binding.roleRef.kind, 'Role', 'a Role: the namespace only');
  const role = only('Role', binding.roleRef.name);
  assert.equal(role.metadata.namespace, namespace);

  // Exactly the requests tahua makes, as (group, resource, verb); no wildcard, no names.
  const api = tahuaKubeRequests();
  const want = new Set();
  if (resources) for (const plural of api.kinds.values()) for (const verb of ['get', 'list', 'watch']) want.add(`${api.group} ${plural} ${verb}`);
  if (scale) for (const verb of api.scaleVerbs) want.add(`apps deployments/scale ${verb}`);
  const granted = new Set();
  for (const rule of role.rules ?? []) {
    assert.equal(rule.resourceNames, undefined, 'no resourceNames (the Deployments to scale are the config\'s)');
    assert.equal(rule.nonResourceURLs, undefined);
    for (const g of rule.apiGroups) for (const r of rule.resources) for (const v of rule.verbs) granted.add(`${g} ${r} ${v}`);
  }
  assert.deepEqual([...granted].sort(), [...want].sort(), 'the Role grants exactly what tahua requests');
}

// ------------------------------------------------------------------------ the real binary

/** `data` (file name -> text) laid out as the kubelet mounts a ConfigMap: <dir>/<key> -> ..data/<key>, ..data -> ..<timestamp>/. */
export function kubeletLayout(data) {
  const dir = makeTempDir('tahua-deploy-');
  const version = '..2026_01_01_00_00_00.000000001';
  mkdirSync(join(dir, version));
  for (const [key, text] of Object.entries(data)) writeFileSync(join(dir, version, key), text);
  symlinkSync(version, join(dir, '..data'));
  for (const key of Object.keys(data)) symlinkSync(join('..data', key), join(dir, key));
  return dir;
}

/**
 * The ConfigMap's files load in the real binary (`tahua --check-config DIR`, laid out as the
 * kubelet mounts them; the hidden entries are skipped by tahua, the links followed), with
 * every variable the config reads set; and a broken route in them is refused, naming it.
 */
export function checkConfigLoads({ configMap, tahua }) {
  // The Secret's variables set to dummy values (a token needs 16 characters).
  const env = { ...process.env };
  for (const name of ['HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy']) delete env[name];
  // A ledger's dsn_env must hold a connection string (only parsed: nothing connects).
  for (const { at, name } of envReferences(tahua.config)) {
    env[name] = at.endsWith('.dsn_env') ? 'host=ledger.invalid dbname=tahua user=tahua' : `dummy-${name.toLowerCase()}-0123456789`;
  }
  const check = (dir) => spawnSync(TAHUA_BIN, ['--check-config', dir], { encoding: 'utf8', env, timeout: 10_000 });

  // The kubernetes section's defaults are the pod's: the API server's variables (set in every
  // pod) and the service account's namespace and CA files, which only a pod has; given here
  // as the pod would (no call is made: --check-config only loads).
  let data = configMap.data;
  if (tahua.config.kubernetes) {
    for (const [name, value] of [['KUBERNETES_SERVICE_HOST', '127.0.0.1'], ['KUBERNETES_SERVICE_PORT', '6443']]) env[name] = value;
    const file = tahua.owner.kubernetes;
    const doc = parseDocument(data[file]);
    doc.setIn(['kubernetes', 'namespace'], configMap.metadata.namespace);
    doc.setIn(['kubernetes', 'ca_file'], '');  // the system's CAs
    data = { ...data, [file]: doc.toString() };
  }

  const ok = check(kubeletLayout(data));
  assert.ifError(ok.error);  // the binary could not be run at all
  assert.equal(ok.status, 0, `tahua --check-config refused the ConfigMap (signal ${ok.signal}):\n${ok.stderr}`);
  assert.doesNotMatch(ok.stderr, /is not set/, 'every variable the config reads is one the Deployment sets');

  // And it does read every file: a route to a model that does not exist is refused, naming it.
  const routesKey = tahua.resources.find((r) => r.kind === 'ModelRoute').file;
  const broken = { ...data, [routesKey]: data[routesKey].replace(/target: [\w.-]+/, 'target: no-such-model') };
  const bad = check(kubeletLayout(broken));
  assert.ifError(bad.error);
  assert.equal(bad.status, 1, `a broken route is refused (signal ${bad.signal}):\n${bad.stderr}`);
  assert.match(bad.stderr, new RegExp(`${routesKey.replace('.', '\\.')}:\\d+:\\d+: ModelRoute/.*no-such-model`));
}
