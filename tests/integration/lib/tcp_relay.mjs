// A TCP relay on loopback that a test can cut and restore: the link between two regions
// (or anything else that should see a network partition). Cut: every open connection is
// dropped and new ones are closed as soon as they are accepted, so a client sees
// "connection reset" at once rather than hanging (a partition it can tell apart).
import net from 'node:net';

export async function startRelay(targetPort, { t, host = '127.0.0.1' } = {}) {
  const open = new Set();
  let cut = false;
  const server = net.createServer((client) => {
    if (cut) return client.destroy();
    const upstream = net.connect(targetPort, host);
    open.add(client);
    open.add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((resolve) => server.listen(0, host, resolve));
  const relay = {
    port: server.address().port,
    get cutNow() {
      return cut;
    },
    cut() {
      cut = true;
      for (const s of open) s.destroy();
      open.clear();
    },
    restore() {
      cut = false;
    },
    close() {
      relay.cut();
      return new Promise((resolve) => server.close(resolve));
    },
  };
  if (t) t.after(() => relay.close());
  return relay;
}
