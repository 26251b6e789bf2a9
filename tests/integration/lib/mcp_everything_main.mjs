// Runs the MCP everything server by hand, e.g. to point the conformance suite at it:
//   node tests/integration/lib/mcp_everything_main.mjs [port]
//   npx conformance server --url <printed url>
import { startEverythingServer } from './mcp_everything_server.mjs';

const { url, stop } = await startEverythingServer({ port: Number(process.argv[2] ?? 0) });
console.log(url);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, async () => {
    await stop();
    process.exit(0);
  });
}
