// SIGTERM/SIGINT: stop accepting, close idle connections, let in-flight streams finish
// until drain_timeout, then end them with a gateway_draining event; exit 0.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gatewayWithUpstream, MODEL } from './lib/fixtures.mjs';
import { chatBody, collectData, chatText, openStream, expectFinalErrorEvent } from './lib/http.mjs';
import { RawClient, rawRequest } from './lib/raw.mjs';
import { eventually, tryConnect, withTimeout } from './lib/util.mjs';

const STREAM = chatBody(MODEL, { stream: true });

/** Resolves with the exit code once the gateway has exited by itself. */
async function exitCode(gw, timeout, what) {
  const { code, signal } = await withTimeout(gw.exited, timeout, what);
  assert.equal(signal, null, `exited by itself, not killed by ${signal}`);
  return code;
}

describe('graceful drain', () => {
  it('SIGTERM: refuses new connections, closes idle ones, finishes the in-flight stream, exits 0', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t, server: { drain_timeout: '10s' } });
    const idle = await RawClient.connect(gw.port);
    await idle.write(rawRequest('GET', '/healthz'));
    assert.equal((await idle.readResponse()).status, 200);

    const ex = upstream.next({ mode: 'hold' });
    const { events } = await openStream(gw.url, STREAM);
    gw.signal('SIGTERM');

    await withTimeout(idle.closed, 3000, 'the idle keep-alive connection to be closed');
    await eventually(async () => (await tryConnect(gw.port)) === 'ECONNREFUSED', {
      timeout: 3000,
      what: 'new connections refused',
    });
    assert.ok(gw.running, 'still running while a stream is in flight');

    ex.release();
    const rest = await withTimeout(collectData(events), 5000, 'the in-flight stream to finish');
    assert.equal(rest.at(-1), '[DONE]');
    assert.equal(chatText(rest), ex.text);
    assert.equal(await exitCode(gw, 5000, 'exit after the last stream'), 0);
  });

  it('drain_timeout: a stream still open is ended with gateway_draining, exit 0', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t, server: { drain_timeout: '300ms' } });
    const ex = upstream.next({ mode: 'hold' }); // never released
    const { events } = await openStream(gw.url, STREAM);
    const started = Date.now();
    gw.signal('SIGTERM');
    const rest = [];
    await withTimeout(
      (async () => {
        for await (const ev of events) rest.push(ev);
      })(),
      5000,
      'the stream to be ended by the drain',
    );
    expectFinalErrorEvent(rest.map((e) => e.data), ['gateway_draining']);
    // The documented reconnect event: its own name, and a flag in the payload.
    const last = rest.at(-1);
    assert.equal(last.event, 'reconnect');
    assert.equal(JSON.parse(last.data).reconnect, true);
    assert.equal(await exitCode(gw, 5000, 'exit after drain_timeout'), 0);
    const elapsed = Date.now() - started;
    assert.ok(elapsed >= 250 && elapsed < 4000, `exited ${elapsed}ms after SIGTERM, drain_timeout 300ms`);
    await withTimeout(ex.clientClosed, 2000, 'the upstream connection to be closed');
  });

  it('SIGTERM with two streams: the short one finishes, the long one gets the reconnect event, exit 0', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t, server: { drain_timeout: '1500ms' } });
    const short = upstream.next({ mode: 'hold' });
    const long = upstream.next({ mode: 'hold' }); // never released
    const a = await openStream(gw.url, STREAM);
    const b = await openStream(gw.url, STREAM);
    gw.signal('SIGTERM');
    await eventually(async () => (await tryConnect(gw.port)) === 'ECONNREFUSED', { timeout: 3000, what: 'new connections refused' });
    short.release();
    const [shortRest, longRest] = await withTimeout(
      Promise.all([
        collectData(a.events),
        (async () => {
          const all = [];
          for await (const ev of b.events) all.push(ev);
          return all;
        })(),
      ]),
      6000,
      'both streams to end',
    );
    assert.equal(shortRest.at(-1), '[DONE]');
    assert.equal(chatText(shortRest), short.text);
    assert.equal(longRest.at(-1).event, 'reconnect');
    assert.equal(JSON.parse(longRest.at(-1).data).error.code, 'gateway_draining');
    assert.equal(await exitCode(gw, 5000, 'exit after the drain'), 0);
    await withTimeout(long.clientClosed, 2000, 'the long stream upstream closed');
  });

  it('SIGTERM with nothing in flight exits 0 promptly', async (t) => {
    const { gw } = await gatewayWithUpstream({ t, server: { drain_timeout: '10s' } });
    assert.equal(await gw.stop('SIGTERM', 2000), 0, `exit code (signal ${gw.exitSignal})`);
  });

  it('SIGINT drains like SIGTERM', async (t) => {
    const { gw, upstream } = await gatewayWithUpstream({ t, server: { drain_timeout: '10s' } });
    const ex = upstream.next({ mode: 'hold' });
    const { events } = await openStream(gw.url, STREAM);
    gw.signal('SIGINT');
    await eventually(async () => (await tryConnect(gw.port)) === 'ECONNREFUSED', {
      timeout: 3000,
      what: 'new connections refused',
    });
    ex.release();
    const rest = await withTimeout(collectData(events), 5000, 'the in-flight stream to finish');
    assert.equal(rest.at(-1), '[DONE]');
    assert.equal(await exitCode(gw, 5000, 'exit after SIGINT'), 0);
  });
});

describe('drain accept grace', () => {
  it('readiness fails at once, new connections are still accepted during the grace, refused after', async (t) => {
    const { gw } = await gatewayWithUpstream({ t, server: { drain_timeout: '5s', drain_accept_grace: '600ms' } });
    const idle = await RawClient.connect(gw.port); // keeps the drain from finishing early
    await idle.write(rawRequest('GET', '/healthz'));
    assert.equal((await idle.readResponse()).status, 200);
    gw.signal('SIGTERM');
    await gw.stderr.waitUntil(() => gw.stderr.json().some((l) => l.msg === 'draining'), 3000, 'the drain to start');
    // Within the grace: a new connection is accepted and /readyz says 503.
    const during = await RawClient.connect(gw.port);
    await during.write(rawRequest('GET', '/readyz'));
    const ready = await during.readResponse();
    assert.equal(ready.status, 503);
    assert.equal(JSON.parse(ready.body).status, 'draining');
    during.destroy();
    // After the grace: refused, and the process exits 0 once the idle connection is closed.
    await eventually(async () => (await tryConnect(gw.port)) === 'ECONNREFUSED', {
      timeout: 3000,
      what: 'new connections refused after the grace',
    });
    await withTimeout(idle.closed, 3000, 'the idle connection to be closed after the grace');
    assert.equal(await exitCode(gw, 5000, 'exit after the grace'), 0);
  });
});
