// A config directory as Kubernetes mounts a ConfigMap: files are symlinks into a
// timestamped directory reached through `..data`, and an update swaps `..data` with one
// rename. The gateway merges every yaml file (plain sections and tahua.dev/v1
// resources), reloads on the swap, and names the file and resource in every error.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { checkConfig, startTahua } from './lib/tahua.mjs';
import { post } from './lib/http.mjs';
import { makeTempDir } from './lib/util.mjs';

const BASE = `server: {workers: 1, deployment_header: true}
listeners: [{address: 127.0.0.1, port: 0}]
access_log: {enabled: true, path: "-"}
providers: [{name: m, type: mock}]
models:
  - {name: small, provider: m, upstream_model: small-up}
  - {name: large, provider: m, upstream_model: large-up}
`;

const routes = (shortTarget) => `apiVersion: tahua.dev/v1
kind: ModelRoute
metadata: {name: auto-short}
spec:
  match: {model: auto}
  when: {max_prompt_tokens: 50}
  target: ${shortTarget}
---
apiVersion: tahua.dev/v1
kind: ModelRoute
metadata: {name: auto-default}
spec:
  match: {model: auto}
  target: large
---
apiVersion: tahua.dev/v1
kind: RateLimitPolicy
metadata: {name: free-tier}
spec: {match: {model: auto}, requests_per_minute: 60}
---
apiVersion: tahua.dev/v1
kind: PromptTemplate
metadata: {name: support}
spec: {template: "You are a support agent for {{product}}.", variables: [product]}
`;

/** A ConfigMap-like mount: <dir>/<file> -> ..data/<file>, ..data -> ..<version>. */
function configMap(files) {
  const dir = makeTempDir();
  let version = 0;
  const publish = (contents) => {
    const target = `..v${++version}`;
    mkdirSync(join(dir, target));
    for (const [name, text] of Object.entries(contents)) writeFileSync(join(dir, target, name), text);
    symlinkSync(target, join(dir, '..data_tmp'));
    renameSync(join(dir, '..data_tmp'), join(dir, '..data'));  // the atomic swap
  };
  publish(files);
  for (const name of Object.keys(files)) symlinkSync(join('..data', name), join(dir, name));
  return { dir, publish };
}

const chat = (model, text) => ({ model, messages: [{ role: 'user', content: text }] });

describe('config directory (Kubernetes ConfigMap)', () => {
  it('merges plain sections and ModelRoute resources, and reloads on a ..data swap', async (t) => {
    const cm = configMap({ 'base.yaml': BASE, 'routes.yaml': routes('small') });
    const gw = await startTahua({ t, args: ['--config', cm.dir] });
    // Every kind is applied: RateLimitPolicy (tenants.test.mjs), PromptTemplate (prompt_templates.test.mjs).
    assert.ok(!gw.stderr.json().some((l) => /is valid but not enforced/.test(l.msg ?? '')));

    const short = await post(gw.url, '/v1/chat/completions', chat('auto', 'hi'));
    assert.equal(short.status, 200);
    assert.equal(short.headers['x-ratelimit-limit-requests'], '60', 'the RateLimitPolicy applies (model auto)');
    assert.equal(short.json.model, 'small-up');
    const long = await post(gw.url, '/v1/chat/completions', chat('auto', 'word '.repeat(400)));
    assert.equal(long.json.model, 'large-up');

    // kubectl apply of the ConfigMap: the kubelet swaps ..data.
    cm.publish({ 'base.yaml': BASE, 'routes.yaml': routes('large') });
    await gw.stderr.waitUntil(
      () => gw.stderr.json().some((l) => l.msg === 'config reloaded' && l.trigger === 'file'),
      5000,
      'reload after the ..data swap',
    );
    const after = await post(gw.url, '/v1/chat/completions', chat('auto', 'hi'));
    assert.equal(after.json.model, 'large-up');
    const log = await gw.waitForAccessLog((l) => l.route_name === 'auto-short' && l.model === 'large');
    assert.ok(log.length >= 1);
  });

  it('rejects a bad resource naming its file, line and resource, and keeps serving', async (t) => {
    const cm = configMap({ 'base.yaml': BASE, 'routes.yaml': routes('small') });
    const gw = await startTahua({ t, args: ['--config', cm.dir] });
    cm.publish({ 'base.yaml': BASE, 'routes.yaml': routes('nosuch') });
    const failed = await gw.stderr.waitUntil(
      () => gw.stderr.json().find((l) => l.msg?.startsWith('config reload failed')),
      5000,
      'reload failure',
    );
    assert.match(failed.error, /routes\.yaml:7:\d+: ModelRoute\/auto-short\.spec\.target: unknown model "nosuch"/);
    const still = await post(gw.url, '/v1/chat/completions', chat('auto', 'hi'));
    assert.equal(still.json.model, 'small-up');
  });

  it('check-config explains directory problems precisely', () => {
    const dup = configMap({ 'a.yaml': BASE, 'b.yaml': 'models: [{name: x, provider: m}]\n' });
    let r = checkConfig(dup.dir);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /b\.yaml:1:1: models: already defined in .*a\.yaml/);

    const badKind = configMap({ 'a.yaml': BASE, 'r.yaml': 'apiVersion: tahua.dev/v1\nkind: Gateway\nmetadata: {name: g}\nspec: {}\n' });
    r = checkConfig(badKind.dir);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /r\.yaml:2:7: kind: unknown kind "Gateway"/);

    const badSpec = configMap({
      'a.yaml': BASE,
      'r.yaml': 'apiVersion: tahua.dev/v1\nkind: RateLimitPolicy\nmetadata: {name: p}\nspec: {requests_per_minte: 5}\n',
    });
    r = checkConfig(badSpec.dir);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /r\.yaml:4:\d+: RateLimitPolicy\/p\.spec\.requests_per_minte: unknown field/);

    const empty = makeTempDir();
    r = checkConfig(empty);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /no \*\.yaml or \*\.yml files/);
  });
});
