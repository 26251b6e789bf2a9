// The MCP conformance suite (@modelcontextprotocol/conformance, npm) against tahua's
// /mcp/everything, tahua in front of an SDK server that implements what the suite's
// server scenarios call (lib/mcp_everything_server.mjs; the suite passes all 32 scenarios
// against that server directly). Scenarios the gateway fails by design are listed in
// mcp_conformance_baseline.yml with why; the suite itself fails the run on any other
// failure, and on a listed scenario that passes (a stale baseline). The score is in
// docs/mcp-gateway.md.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gatewayConfig, startTahua, REPO_ROOT } from './lib/tahua.mjs';
import { mcpProvider } from './lib/mcp_servers.mjs';
import { startEverythingServer } from './lib/mcp_everything_server.mjs';

const CLI = join(REPO_ROOT, 'tests', 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
const BASELINE = join(REPO_ROOT, 'tests', 'integration', 'mcp_conformance_baseline.yml');

// The suite is run several times in a row against one gateway (what one run leaves
// behind must not fail the next). In the first, the server serves each GET late, so a
// client's call reaches it before the session's GET stream is open, as happens when the
// GET takes the gateway's longer way: the server's requests on that stream (sampling,
// elicitation) are lost unless the gateway holds the call until the stream is open.
const RUNS = [{ streamDelayMs: 250 }, { streamDelayMs: 0 }, { streamDelayMs: 0 }];

describe('MCP conformance suite', () => {
  it('passes every server scenario through /mcp/{server} but the baseline\'s, run after run', async (t) => {
    const server = await startEverythingServer({ t });
    // An MCP-only gateway: no models.
    const config = gatewayConfig({ providers: [mcpProvider('everything', server.url)] });
    const gw = await startTahua({ t, config });
    for (const [i, { streamDelayMs }] of RUNS.entries()) {
      server.state.streamDelayMs = streamDelayMs;
      const out = mkdtempSync(join(tmpdir(), 'tahua-mcp-conformance-'));
      t.after(() => rmSync(out, { recursive: true, force: true }));
      // Not execFileSync: the upstream server runs in this process.
      const run = await promisify(execFile)(process.execPath,
        [CLI, 'server', '--url', `${gw.url}/mcp/everything`, '--suite', 'all', '--expected-failures', BASELINE, '-o', out],
        { timeout: 240_000, maxBuffer: 16 << 20 }).catch((e) => e);
      // The score, from the suite's own result files: one folder per scenario.
      let passed = 0;
      let checks = 0;
      let failedChecks = 0;
      const failed = [];
      const scenarios = readdirSync(out);
      for (const dir of scenarios) {
        const list = JSON.parse(readFileSync(join(out, dir, 'checks.json'), 'utf8'));
        const failures = list.filter((c) => c.status === 'FAILURE');
        checks += list.filter((c) => c.status === 'SUCCESS' || c.status === 'FAILURE').length;
        failedChecks += failures.length;
        if (failures.length === 0) ++passed;
        else failed.push(`${dir}: ${failures.map((c) => c.errorMessage).join('; ')}`);
      }
      const what = `run ${i + 1}${streamDelayMs ? ` (GET served ${streamDelayMs} ms late)` : ''}`;
      t.diagnostic(`conformance through tahua, ${what}: ${passed}/${scenarios.length} scenarios, ${checks - failedChecks}/${checks} checks`);
      assert.equal(run.code ?? 0, 0, `${what}: the suite failed beyond its baseline:\n${failed.join('\n')}\n${run.stdout}\n${run.stderr}`);
      assert.ok(scenarios.length >= 32, `${what}: every scenario ran (${scenarios.length})`);
    }
  });
});
