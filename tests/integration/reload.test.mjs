// Hot reload on SIGHUP and on a change of the config file: a valid new config is
// published without a restart; an invalid one is rejected with a precise error and the
// last good config keeps serving.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gatewayConfig, startTahua, writeConfig } from './lib/tahua.mjs';
import { post, chatBody, request, openStream } from './lib/http.mjs';
import { toYaml } from './lib/yaml.mjs';
import { makeTempDir } from './lib/util.mjs';

const mockConfig = (models, mock = {}) =>
  gatewayConfig({
    providers: [{ name: 'mock', type: 'mock', mock }],
    models: models.map((name) => ({ name, provider: 'mock' })),
  });

describe('SIGHUP reload', () => {
  it('adds a model without a restart, rejects an invalid config and keeps serving', async (t) => {
    const file = writeConfig(mockConfig(['first']));
    const gw = await startTahua({ t, args: ['--config', file, '--no-watch'] });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('second'))).status, 404);

    writeFileSync(file, toYaml(mockConfig(['first', 'second'])));
    gw.signal('SIGHUP');
    await gw.stderr.waitUntil(() => gw.stderr.json().some((l) => l.msg === 'config reloaded'), 5000, 'reload log');
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('second'))).status, 200);

    writeFileSync(file, 'listeners: [{port: 0}]\nproviders: [{name: mock, type: mock}]\nmodels:\n  - name: x\n    provder: mock\n');
    gw.signal('SIGHUP');
    const failed = await gw.stderr.waitUntil(
      () => gw.stderr.json().find((l) => l.msg?.startsWith('config reload failed')),
      5000,
      'reload failure log',
    );
    assert.match(failed.error, /:5:5: models\[0\]\.provder: unknown field/);
    // The last good config still serves both models, and the process is alive.
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('second'))).status, 200);
    const metrics = (await request(gw.url, '/metrics')).text;
    assert.match(metrics, /^tahua_config_reloads_total\{result="ok"\} 1$/m);
    assert.match(metrics, /^tahua_config_reloads_total\{result="error"\} 1$/m);
    assert.match(metrics, /^tahua_config_generation 2$/m);
  });

  it('lets a stream in flight finish on the config it started with', async (t) => {
    const slow = { completion_tokens: 6, chunk_delay: '50ms' };
    const file = writeConfig(mockConfig(['old'], slow));
    const gw = await startTahua({ t, args: ['--config', file, '--no-watch'] });
    const { events } = await openStream(gw.url, chatBody('old', { stream: true }));

    // Publish a config without the model while the stream runs.
    writeFileSync(file, toYaml(mockConfig(['new'], slow)));
    gw.signal('SIGHUP');
    await gw.stderr.waitUntil(() => gw.stderr.json().some((l) => l.msg === 'config reloaded'), 5000, 'reload log');
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('old'))).status, 404);

    const rest = [];
    for await (const ev of events) rest.push(ev.data);
    assert.equal(rest.at(-1), '[DONE]');
    assert.ok(rest.length >= 6, `the stream went on after the reload (${rest.length} more events)`);
  });
});

describe('config file watch', () => {
  const reloads = (gw) => gw.stderr.json().filter((l) => l.msg === 'config reloaded' && l.trigger === 'file').length;

  it('reloads when the file is rewritten, without a signal', async (t) => {
    const file = writeConfig(mockConfig(['first']));
    const gw = await startTahua({ t, args: ['--config', file] });
    writeFileSync(file, toYaml(mockConfig(['first', 'second'])));
    await gw.stderr.waitUntil(() => reloads(gw) === 1, 5000, 'a file-triggered reload');
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('second'))).status, 200);
  });

  it("follows a Kubernetes ConfigMap update (the '..data' symlink swap)", async (t) => {
    // The layout the kubelet makes: tahua.yaml -> ..data/tahua.yaml, ..data -> ..<version>/
    const dir = makeTempDir();
    const version = (name, models) => {
      mkdirSync(join(dir, name));
      writeFileSync(join(dir, name, 'tahua.yaml'), toYaml(mockConfig(models)));
    };
    version('..v1', ['first']);
    symlinkSync('..v1', join(dir, '..data'));
    symlinkSync('..data/tahua.yaml', join(dir, 'tahua.yaml'));
    const gw = await startTahua({ t, args: ['--config', join(dir, 'tahua.yaml')] });
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('second'))).status, 404);

    version('..v2', ['first', 'second']);
    symlinkSync('..v2', join(dir, '..data_tmp'));
    renameSync(join(dir, '..data_tmp'), join(dir, '..data')); // atomic swap, as the kubelet does
    await gw.stderr.waitUntil(() => reloads(gw) === 1, 5000, 'a reload after the symlink swap');
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('second'))).status, 200);
  });
});

describe('reload and the exporters', () => {
  it('a new tracing endpoint or usage sink waits for a restart (said in the log); turning tracing off applies now', async (t) => {
    const { startCollector } = await import('./lib/collector.mjs');
    const a = await startCollector({ t });
    const b = await startCollector({ t });
    const dir = makeTempDir('tahua-reload-exp-');
    const config = (endpoint, sinkPath, tracing = true) => ({
      ...mockConfig(['m']),
      ...(tracing ? { tracing: { endpoint, flush_interval: '50ms' } } : {}),
      usage: { spill_dir: join(dir, 'spill'), sinks: [{ type: 'file', path: sinkPath }] },
    });
    const file = writeConfig(config(`${a.url}/v1/traces`, join(dir, 'one.jsonl')));
    const gw = await startTahua({ t, args: ['--config', file, '--no-watch'] });
    writeFileSync(file, toYaml(config(`${b.url}/v1/traces`, join(dir, 'two.jsonl'))));
    gw.signal('SIGHUP');
    await gw.stderr.waitUntil(() => gw.stderr.json().some((l) => l.msg === 'config reloaded'), 5000, 'reload log');
    // One warning names each restart-only field that changed (docs/configuration.md, "restart").
    const warning = gw.stderr.json().find((l) => l.level === 'warn' && /change only at a restart/.test(l.msg));
    assert.ok(warning, gw.output());
    assert.deepEqual(warning.fields.split(', ').sort(), ['tracing.endpoint', 'usage.sinks']);
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('m'))).status, 200);
    await a.waitFor((c) => c.spans().length >= 1, 'spans still to the first endpoint');
    assert.equal(b.spans().length, 0);
    // Tracing off: no more spans.
    writeFileSync(file, toYaml(config('', join(dir, 'one.jsonl'), false)));
    gw.signal('SIGHUP');
    await gw.stderr.waitUntil(() => gw.stderr.json().filter((l) => l.msg === 'config reloaded').length >= 2, 5000, 'second reload');
    const before = a.spans().length;
    assert.equal((await post(gw.url, '/v1/chat/completions', chatBody('m'))).status, 200);
    assert.equal(await gw.stop('SIGTERM'), 0);  // the exporter sends what it has before exit
    assert.equal(a.spans().length, before, 'no span after tracing was turned off');
  });
});
