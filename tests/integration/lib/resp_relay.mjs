// A relay between the gateway and a real Redis that reads the commands going through
// (RESP arrays) and, for the first command a test's `cutAfter(args)` picks, forwards it
// and then cuts that connection: Redis runs the command, its answer never comes back.
// The one fault that tells "not applied" from "applied, answer lost" apart. Or, with
// `delayNext`, holds a picked command back for a while (a slow write at a chosen moment).
// SCRIPT LOAD texts are seen on their way, so a test names scripts by their text
// (`shaOf(text => ...)`) rather than by a hash it would have to know.
import net from 'node:net';
import { createHash } from 'node:crypto';

// One command at the start of `buf`: { args, end }, or null when it has not all come.
function parseCommand(buf) {
  const line = (at) => {
    const nl = buf.indexOf('\r\n', at);
    return nl < 0 ? null : { text: buf.toString('latin1', at, nl), next: nl + 2 };
  };
  const head = line(0);
  if (!head) return null;
  if (head.text[0] !== '*') throw new Error(`not a RESP array: ${head.text.slice(0, 20)}`);
  const n = Number(head.text.slice(1));
  const args = [];
  let at = head.next;
  for (let i = 0; i < n; i += 1) {
    const len = line(at);
    if (!len) return null;
    const size = Number(len.text.slice(1));
    if (buf.length < len.next + size + 2) return null;
    args.push(buf.subarray(len.next, len.next + size));
    at = len.next + size + 2;
  }
  return { args, end: at };
}

export async function startRespRelay(targetPort, { t, host = '127.0.0.1' } = {}) {
  const scripts = new Map();  // sha1 -> text
  const open = new Set();
  let pick = null;
  let cuts = 0;
  let delays = 0;
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, host);
    open.add(client);
    open.add(upstream);
    let pending = Buffer.alloc(0);
    let cut = false;
    let held = false;  // a delayed command and what came after it wait here
    const drop = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', drop).on('close', () => { if (!cut) drop(); });
    upstream.on('error', drop).on('close', drop);
    upstream.on('data', (d) => { if (!cut) client.write(d); });
    const feed = () => {
      let sent = 0;
      for (;;) {
        const cmd = parseCommand(pending.subarray(sent));
        if (!cmd) break;
        const args = cmd.args;
        const name = args[0].toString('latin1').toUpperCase();
        if (name === 'SCRIPT' && args[1]?.toString('latin1').toUpperCase() === 'LOAD') {
          const text = args[2].toString('utf8');
          scripts.set(createHash('sha1').update(text).digest('hex'), text);
        }
        const start = sent;
        sent += cmd.end;
        if (pick && pick(args.map((a) => a.toString('latin1')))) {
          const { delay } = pick;
          pick = null;
          if (delay !== undefined) {
            // Everything before this command goes now; it and what follows, later.
            delays += 1;
            upstream.write(pending.subarray(0, start));
            pending = pending.subarray(start);
            held = true;
            setTimeout(() => {
              held = false;
              if (!cut) feed();
            }, delay).unref();
            return;
          }
          cuts += 1;
          // Everything up to this command reaches Redis; then the client's side goes, and
          // Redis sees the end of the stream after it has read (and run) the command.
          cut = true;
          upstream.end(pending.subarray(0, sent));
          client.destroy();
          open.delete(client);
          return;
        }
      }
      if (sent > 0) {
        upstream.write(pending.subarray(0, sent));
        pending = pending.subarray(sent);
      }
    };
    client.on('data', (d) => {
      if (cut) return;
      pending = Buffer.concat([pending, d]);
      if (!held) feed();
    });
  });
  await new Promise((resolve) => server.listen(0, host, resolve));
  const relay = {
    port: server.address().port,
    get url() { return `redis://${host}:${relay.port}`; },
    get cuts() { return cuts; },
    get delays() { return delays; },
    // The sha1 of the first script loaded so far whose text `match` accepts.
    shaOf(match) {
      for (const [sha, text] of scripts) if (match(text)) return sha;
      return null;
    },
    // The next command (its arguments as strings) that `predicate` accepts is run and its
    // connection cut before the answer.
    cutAfter(predicate) { pick = predicate; },
    // The next command that `predicate` accepts (and everything after it on its
    // connection) reaches Redis `ms` later: a slow store, at the moment a test picks.
    delayNext(predicate, ms) {
      pick = (args) => predicate(args);
      pick.delay = ms;
    },
    close() {
      for (const s of open) s.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
  if (t) t.after(() => relay.close());
  return relay;
}
