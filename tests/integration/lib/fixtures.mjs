// Common setups: a gateway in front of one mock upstream, and an OpenAI SDK client.
import assert from 'node:assert/strict';
import { before, beforeEach, afterEach, after } from 'node:test';
import OpenAI from 'openai';
import { startMockUpstream } from './mock_upstream.mjs';
import { gatewayConfig, openaiProvider, startTahua } from './tahua.mjs';
import { tryConnect, withTimeout } from './util.mjs';

export const MODEL = 'gpt-test';
export const PROVIDER = 'up';

/**
 * Starts a mock upstream and a gateway whose provider `up` points at it, serving
 * `models` (default: `gpt-test`). With `t`, both stop when that test ends; otherwise
 * call `close()`.
 */
export async function gatewayWithUpstream({ t, server, limits, provider = {}, models, routes, env, upstream: upstreamOptions } = {}) {
  const upstream = await startMockUpstream({ t, ...upstreamOptions });
  const config = gatewayConfig({
    server,
    limits,
    providers: [openaiProvider(PROVIDER, upstream.baseUrl(), provider)],
    models: models ?? [{ name: MODEL, provider: PROVIDER }],
  });
  if (routes) config.routes = routes;
  const gw = await startTahua({ config, env, t });
  const close = async () => {
    await gw.kill();
    await upstream.close();
  };
  return { upstream, gw, config, close };
}

/** The official SDK pointed at the gateway; no retries so failures are immediate. */
export function openaiClient(gw, options = {}) {
  return new OpenAI({
    baseURL: `${gw.url}/v1`,
    apiKey: 'sk-client-key-not-forwarded',
    maxRetries: 0,
    timeout: 10_000,
    ...options,
  });
}

/**
 * Shares one fixture (from `start()`, an object with `gw` and `close()`) across the
 * tests of the enclosing describe. A test after which the gateway is no longer running
 * fails (it crashed it), and the next test gets a fresh fixture, so one crash does not
 * hide the results of the following tests. Returns `{ current }`.
 */
export function sharedFixture(start) {
  const ref = { current: undefined };
  before(async () => {
    ref.current = await start();
  });
  beforeEach(async () => {
    if (!ref.current.gw.running) {
      await ref.current.close();
      ref.current = await start();
    }
  });
  afterEach(async () => {
    const { gw } = ref.current;
    if (gw.running && (await tryConnect(gw.port)) === null) return;
    const { code, signal } = await withTimeout(gw.exited, 2000, 'tahua to exit after refusing connections');
    assert.fail(`tahua died during this test (exit code ${code}, signal ${signal}); stderr tail:\n${gw.stderr.lines.slice(-5).join('\n')}`);
  });
  after(() => ref.current?.close());
  return ref;
}
