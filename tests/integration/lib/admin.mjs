// The admin API from tests: a config section with a known token, and a gateway started
// with it plus a client for its own listener.
import assert from 'node:assert/strict';
import { startTahua } from './tahua.mjs';
import { request } from './http.mjs';

export const TOKEN = 'admin-test-token-0123456789abcdef';

export const adminSection = (extra = {}) => ({ listen: { address: '127.0.0.1', port: 0 }, token: TOKEN, ...extra });

/** Starts tahua and returns `{ gw, admin }`; `admin(method, path, options)` calls the admin API. */
export async function startWithAdmin(t, config, options = {}) {
  const gw = await startTahua({ t, config, ...options });
  const line = await gw.stderr.waitUntil(
    () => gw.stderr.json().find((l) => l.msg === 'admin listening'),
    5000,
    'the "admin listening" line',
  );
  assert.ok(Number.isInteger(line.port) && line.port > 0, `admin port ${line.port}`);
  assert.notEqual(line.port, gw.port, 'the admin API has its own port');
  const url = `http://127.0.0.1:${line.port}`;
  const admin = (method, path, { json, body, token = TOKEN, headers = {} } = {}) =>
    request(url, path, {
      method,
      json,
      body,
      headers: { ...(token === null ? {} : { authorization: `Bearer ${token}` }), ...headers },
    });
  return { gw, admin, url, port: line.port };
}

