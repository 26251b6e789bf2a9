// Prometheus text-format parsing for /metrics assertions.
import { request } from './http.mjs';

/** Parses exposition text into `{ samples: [{name, labels, value}], types: {name: type} }`. */
export function parseMetrics(text) {
  const samples = [];
  const types = {};
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const type = /^# TYPE (\S+) (\S+)/.exec(line);
    if (type) {
      types[type[1]] = type[2];
      continue;
    }
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/.exec(line);
    if (!m) throw new Error(`unparsable metrics line: ${line}`);
    const labels = {};
    const labelRe = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?/g;
    for (const [, k, v] of (m[2] ?? '').matchAll(labelRe)) labels[k] = v.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return { samples, types };
}

/** Samples named `name` whose labels include all of `labels`. */
export function find(metrics, name, labels = {}) {
  return metrics.samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
}

/** Sum of the matching samples' values (0 if none). */
export function sum(metrics, name, labels = {}) {
  return find(metrics, name, labels).reduce((a, s) => a + s.value, 0);
}

/** GET /metrics and parse it; also returns the raw text and response headers. */
export async function scrape(baseUrl) {
  const res = await request(baseUrl, '/metrics');
  if (res.status !== 200) throw new Error(`/metrics returned ${res.status}`);
  return { ...parseMetrics(res.text), text: res.text, headers: res.headers };
}
