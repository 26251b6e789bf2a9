// Process start-up: refusing a port another process already listens on.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startTahua } from './lib/tahua.mjs';
import { request } from './lib/http.mjs';

describe('start-up', () => {
  it('refuses to start on a port another tahua already listens on (no silent SO_REUSEPORT sharing)', async (t) => {
    const first = await startTahua({ t, args: ['--listen', '127.0.0.1:0'] });
    await assert.rejects(
      startTahua({ t, args: ['--listen', `127.0.0.1:${first.port}`] }),
      /exit code 1,[\s\S]*address in use/,
    );
    // The first one is unaffected.
    const res = await request(first.url, '/healthz');
    assert.equal(res.status, 200);
  });
});
