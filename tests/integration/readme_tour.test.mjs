// The README's five-minute tour, run as written: the requests of steps 1 and 2 against the
// built-in config, then the config file of step 3 (its OpenAI provider pointed at a mock),
// grown by steps 4 and 5 as the reader grows it: the key block reloads into force, the
// admin block with a restart.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startMockUpstream } from './lib/mock_upstream.mjs';
import { checkConfig, REPO_ROOT, startTahua, writeConfig } from './lib/tahua.mjs';
import { expectError, request } from './lib/http.mjs';
import { startWithAdmin } from './lib/admin.mjs';
import { eventually } from './lib/util.mjs';

const README = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
const TOUR = (() => {
  const from = README.indexOf('## A five-minute tour');
  const to = README.indexOf('\n## ', from + 1);
  assert.ok(from >= 0 && to > from, 'the README has its tour');
  return README.slice(from, to);
})();

/** The tour's step `n`: the text from its bold title to the next one. */
function step(n) {
  const from = TOUR.indexOf(`**${n}. `);
  assert.ok(from >= 0, `the tour has step ${n}`);
  const to = TOUR.indexOf(`**${n + 1}. `, from);
  return TOUR.slice(from, to < 0 ? undefined : to);
}

const blocks = (text, lang) => [...text.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1]);

/** The curl commands of a step's sh blocks: path, body, headers. */
function curls(text) {
  const out = [];
  for (const block of blocks(text, 'sh')) {
    for (const line of block.replace(/\\\n\s*/g, ' ').split('\n')) {
      if (!line.startsWith('curl ')) continue;
      const url = /localhost:(\d+)(\/\S*)/.exec(line);
      const body = /-d '([^']*)'/.exec(line)?.[1];
      const headers = Object.fromEntries([...line.matchAll(/-H ['"]([^:'"]+): ([^'"]+)['"]/g)].map((m) => [m[1], m[2]]));
      out.push({ line, port: Number(url[1]), path: url[2], body: body && JSON.parse(body), headers });
    }
  }
  return out;
}

const send = (gw, c, headers = c.headers) =>
  request(gw.url, c.path, { method: c.body ? 'POST' : 'GET', ...(c.body ? { body: JSON.stringify(c.body) } : {}), headers });

describe("the README's five-minute tour", () => {
  it('steps 1 and 2: every request answers on the built-in config, streams as events', async (t) => {
    const gw = await startTahua({ t, args: ['--listen', '127.0.0.1:0'] });
    const commands = [...curls(step(1)), ...curls(step(2))];
    assert.equal(commands.length, 5, commands.map((c) => c.line).join('\n'));
    for (const c of commands) {
      assert.equal(c.port, 8080, 'the built-in config listens on 8080');
      const r = await send(gw, c);
      assert.equal(r.status, 200, `${c.line}\n${r.text}`);
      if (c.body.stream) assert.match(r.headers['content-type'], /^text\/event-stream/, c.line);
      else assert.ok(r.json, c.line);
    }
  });

  it('steps 3 to 5: a real provider, a key and a limit, the admin API and the dashboard', async (t) => {
    const openai = await startMockUpstream({ t });
    const [providerYaml] = blocks(step(3), 'yaml');
    const [keysYaml] = blocks(step(4), 'yaml');
    const [adminYaml] = blocks(step(5), 'yaml');
    assert.ok(providerYaml && keysYaml && adminYaml, 'a config block in steps 3, 4 and 5');
    assert.match(providerYaml, /base_url: https:\/\/api\.openai\.com\/v1/);
    const file = writeConfig(providerYaml.replace('port: 8080', 'port: 0').replace('https://api.openai.com/v1', openai.baseUrl()));
    const check = checkConfig(file);
    assert.equal(check.status, 0, check.stderr);

    // Step 3: an Anthropic-SDK request, answered by the OpenAI-type provider.
    const env = { OPENAI_API_KEY: 'sk-tour-test' };
    let gw = await startTahua({ t, args: ['--config', file], env });
    const [toOpenai] = curls(step(3));
    const answer = await send(gw, toOpenai);
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.json.type, 'message', 'Anthropic shape');
    assert.equal(openai.requests.at(-1).path, '/v1/chat/completions');
    assert.equal(openai.requests.at(-1).headers.authorization, 'Bearer sk-tour-test');

    // Step 4: appended to the file, the key block reloads into force.
    appendFileSync(file, keysYaml);
    const [withoutKey, withKey] = curls(step(4));
    assert.equal(withoutKey.headers.authorization, undefined);
    await eventually(async () => (await send(gw, withoutKey)).status === 401, { timeout: 5000, what: 'keys in force after the reload' });
    expectError(await send(gw, withoutKey), 401, 'missing_api_key');
    const ok = await send(gw, withKey);
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.headers['x-ratelimit-limit-requests'], '300', "the key's limit is the tightest");

    // Step 5: the admin block, and a restart with the token.
    appendFileSync(file, adminYaml.replace('port: 9090', 'port: 0'));
    await gw.kill();
    const token = 'tour-admin-token-0123456789abcdef';
    const started = await startWithAdmin(t, readFileSync(file, 'utf8'), { listenerCount: 1, env: { ...env, TAHUA_ADMIN_TOKEN: token } });
    gw = started.gw;
    assert.equal((await send(gw, withKey)).status, 200);
    const [keyView] = curls(step(5));
    assert.equal(keyView.port, 9090);
    const view = await started.admin('GET', keyView.path, { token });
    assert.equal(view.status, 200, view.text);
    assert.equal(view.json.name, 'search-prod');
    const page = /`http:\/\/127\.0\.0\.1:9090(\/\S+)`/.exec(step(5))?.[1];
    assert.equal(page, '/admin/dashboard');
    const dashboard = await request(started.url, page);
    assert.equal(dashboard.status, 200);
    assert.match(dashboard.headers['content-type'], /^text\/html/);
  });
});
