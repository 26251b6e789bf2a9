// `tahua --check-config FILE`: exit 0 for valid files, exit 1 with
// `FILE:LINE:COL: field.path: message` for invalid ones.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { checkConfig, writeConfig, REPO_ROOT, startTahua } from './lib/tahua.mjs';
import { makeTempDir } from './lib/util.mjs';

const VALID = `server:
  workers: 1
  header_timeout: 10s
listeners:
  - address: 127.0.0.1
    port: 0
providers:
  - name: openai
    type: openai
    base_url: https://api.openai.com/v1
    api_key_env: TAHUA_IT_NOT_SET
    timeouts:
      connect: 5s
      first_byte: 120s
  - name: mock
    type: mock
models:
  - name: gpt-4o-mini
    provider: openai
  - name: mock-gpt
    provider: mock
`;

/** VALID with line `line` (1-based) replaced by `text`. */
function withLine(line, text) {
  const lines = VALID.split('\n');
  lines[line - 1] = text;
  return lines.join('\n');
}

/** Runs --check-config and asserts exit 1 and a `file:line:col: field` diagnostic. */
function expectInvalid(yaml, { line, field, message }) {
  const file = writeConfig(yaml);
  const r = checkConfig(file);
  assert.equal(r.status, 1, `exit status; stderr: ${r.stderr}`);
  const escaped = file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const fieldPart = field ? ` ${field.replace(/[.[\]]/g, '\\$&')}:` : '';
  const re = new RegExp(`${escaped}:${line}:\\d+:${fieldPart}`);
  assert.match(r.stderr, re, 'diagnostic names file:line:col and field');
  if (message) assert.match(r.stderr, message);
  return r;
}

describe('--check-config', () => {
  it('accepts a valid file (exit 0) even when an api_key_env is unset', () => {
    const r = checkConfig(writeConfig(VALID));
    assert.equal(r.status, 0, `stderr: ${r.stderr}`);
  });

  it('rejects an unknown (typo) field', () => {
    expectInvalid(withLine(2, '  wrokers: 1'), { line: 2, field: 'server.wrokers' });
  });

  it('rejects an unknown field inside a list item', () => {
    expectInvalid(withLine(13, '      conect: 5s'), { line: 13, field: 'providers[0].timeouts.conect' });
  });

  it('rejects a bad duration', () => {
    expectInvalid(withLine(14, '      first_byte: 5 seconds'), {
      line: 14,
      field: 'providers[0].timeouts.first_byte',
      message: /5 seconds/,
    });
    expectInvalid(withLine(3, '  header_timeout: 10'), { line: 3, field: 'server.header_timeout' });
  });

  it('rejects a model naming an unknown provider', () => {
    expectInvalid(withLine(21, '    provider: mokc'), { line: 21, field: 'models[1].provider', message: /mokc/ });
  });

  it('rejects invalid YAML syntax with file and line', () => {
    expectInvalid(withLine(6, '    port: 0: 1'), { line: 6 });
  });

  it('rejects a missing required section', () => {
    const noModels = VALID.slice(0, VALID.indexOf('models:'));
    const r = checkConfig(writeConfig(noModels));
    assert.equal(r.status, 1);
    assert.match(r.stderr, /models/);
  });

  // yaml-cpp would keep both and the loader would read the first: silently ignoring one.
  it('rejects a duplicated key (two api_key fields) naming file, line and key', () => {
    const lines = VALID.split('\n');
    lines.splice(10, 0, '    api_key: sk-one', '    api_key: sk-two'); // inside providers[0], lines 11 and 12
    const r = expectInvalid(lines.join('\n'), { line: 12, field: 'providers[0].api_key', message: /duplicate key "api_key" \(first at line 11\)/ });
    assert.doesNotMatch(r.stderr, /sk-one|sk-two/, 'no key value in the diagnostic');
  });

  it('rejects a duplicated key in a config directory, naming the file', () => {
    const dir = makeTempDir();
    writeFileSync(join(dir, 'base.yaml'), VALID);
    writeFileSync(join(dir, 'routes.yaml'), 'routes:\n  - name: a\n    target: mock-gpt\n    name: b\n');
    const r = checkConfig(dir);
    assert.equal(r.status, 1, `exit status; stderr: ${r.stderr}`);
    const file = join(dir, 'routes.yaml').replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    assert.match(r.stderr, new RegExp(`${file}:4:5: routes\\[0\\]\\.name: duplicate key "name" \\(first at line 2\\)`));
  });

  it('accepts config/tahua.example.yaml from the repository', () => {
    const example = join(REPO_ROOT, 'config', 'tahua.example.yaml');
    assert.ok(existsSync(example), `${example} exists`);
    const r = checkConfig(example);
    assert.equal(r.status, 0, `stderr: ${r.stderr}`);
  });

  it('the example\'s commented-out Entra ID provider and its model load once uncommented', () => {
    const text = readFileSync(join(REPO_ROOT, 'config', 'tahua.example.yaml'), 'utf8');
    const uncommented = text.replace(/^  # - name: (?:azure-entra|gpt-4o-entra)\n(?:  # {3}.*\n)+/gm, (block) => block.replace(/^  # /gm, '  '));
    assert.match(uncommented, /^  - name: azure-entra\n {4}type: azure-openai$/m, 'the provider is there to uncomment');
    assert.match(uncommented, /^ {6}client_secret_env: AZURE_CLIENT_SECRET/m);
    assert.match(uncommented, /^  - name: gpt-4o-entra\n {4}provider: azure-entra$/m, 'and a model of it');
    const r = checkConfig(writeConfig(uncommented));
    assert.equal(r.status, 0, `stderr: ${r.stderr}`);
  });

  it('--config with an invalid file exits 1 without listening', async () => {
    await assert.rejects(
      startTahua({ config: null, args: ['--config', writeConfig(withLine(2, '  wrokers: 1'))] }),
      /exit code 1,/,
    );
  });
});

describe('self-healing example', () => {
  it('the healing block in docs/routing.md is valid next to the models it names', async () => {
    const { readFileSync } = await import('node:fs');
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'routing.md'), 'utf8');
    const blocks = [...guide.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]);
    const healing = blocks.find((b) => b.startsWith('healing:'));
    assert.ok(healing, 'docs/routing.md has the self-healing example block');
    const file = writeConfig(
      'listeners:\n  - address: 127.0.0.1\n    port: 0\nproviders:\n  - {name: mock, type: mock}\n' +
        'models:\n  - {name: gpt-4o, provider: mock, fallbacks: [gpt-4o-mini]}\n  - {name: gpt-4o-mini, provider: mock}\n' +
        healing,
    );
    const r = checkConfig(file);
    assert.equal(r.status, 0, r.stderr);
  });
});

describe('provider examples', () => {
  it('the worked provider config in docs/providers.md is valid', async () => {
    const { readFileSync } = await import('node:fs');
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'providers.md'), 'utf8');
    // The block under "Worked examples" holds every provider type.
    const blocks = [...guide.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]);
    const worked = blocks.find((b) => b.includes('type: bedrock') && b.startsWith('providers:'));
    assert.ok(worked, 'docs/providers.md has the worked provider examples block');
    const file = writeConfig(`listeners:\n  - address: 127.0.0.1\n    port: 0\n${worked}`);
    const r = checkConfig(file);
    assert.equal(r.status, 0, r.stderr);
    for (const type of ['openai', 'azure-openai', 'anthropic', 'gemini', 'bedrock'])
      assert.match(worked, new RegExp(`type: ${type}\\n`), `example for ${type}`);
  });
});

describe('the `apis` example of docs/providers.md', () => {
  it('is a valid config', async () => {
    const { readFileSync } = await import('node:fs');
    const guide = readFileSync(join(REPO_ROOT, 'docs', 'providers.md'), 'utf8');
    const block = [...guide.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.includes('apis: [embeddings]'));
    assert.ok(block, 'docs/providers.md has the apis example');
    const r = checkConfig(writeConfig(`listeners:\n  - address: 127.0.0.1\n    port: 0\n${block}`));
    assert.equal(r.status, 0, r.stderr);
    // ... and a name the list does not know is refused, naming the field.
    const bad = checkConfig(writeConfig(`listeners:\n  - address: 127.0.0.1\n    port: 0\n${block.replace('apis: [embeddings]', 'apis: [embedding]')}`));
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /apis: unknown API "embedding"/);
  });
});

describe('observability examples', () => {
  it('the tracing and usage blocks of docs/observability.md and docs/ledger.md are valid configs', async () => {
    const { readFileSync } = await import('node:fs');
    const base = 'listeners:\n  - address: 127.0.0.1\n    port: 0\nproviders:\n  - {name: mock, type: mock}\nmodels:\n  - {name: m, provider: mock}\n';
    let checked = 0;
    for (const doc of ['docs/observability.md', 'docs/ledger.md']) {
      const text = readFileSync(join(REPO_ROOT, doc), 'utf8');
      for (const [, block] of text.matchAll(/```yaml\n([\s\S]*?)```/g)) {
        if (!/^(tracing|usage):/m.test(block) || /^(server|providers):/m.test(block)) continue;
        const r = checkConfig(writeConfig(base + block));
        assert.equal(r.status, 0, `${doc}:\n${block}\n${r.stderr}`);
        checked += 1;
      }
    }
    assert.ok(checked >= 5, `${checked} blocks checked`);
  });
});
