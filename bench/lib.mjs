// What the node benchmarks share (bench/mcp.mjs, bench/realtime.mjs): CPU time read from
// /proc, waiting for a port, and tahua and nginx started the same way, one worker each,
// pinned to one CPU, so their CPU per unit of work compares.
import { spawn, execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

export const HZ = Number(execFileSync('getconf', ['CLK_TCK']).toString());
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// User + system clock ticks a process has used (fields 14 and 15 of /proc/PID/stat).
export function cpuTicks(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]);
}

export async function waitPort(url) {
  for (let i = 0; i < 100; ++i) {
    try {
      if ((await fetch(url)).status < 500) return;
    } catch {}
    await sleep(50);
  }
  throw new Error(`${url} did not come up`);
}

// tahua with config `yaml` (its listener on `port`), on `cpu`; `children` collects it.
export async function startTahua({ bin, yaml, port, cpu, tmp, children }) {
  writeFileSync(join(tmp, 'tahua.yaml'), yaml);
  const tahua = spawn('taskset', ['-c', String(cpu), bin, '--config', join(tmp, 'tahua.yaml')], { stdio: 'ignore' });
  children.push(tahua);
  await waitPort(`http://127.0.0.1:${port}/healthz`);
  return tahua;
}

// nginx, one worker on `cpu`, listening on `port` with `location` (the proxying) and
// /healthz; `upstream` goes in its http block. Returns the worker's pid (whose CPU counts).
export async function startNginx({ port, cpu, tmp, children, location, upstream = '' }) {
  const dir = join(tmp, 'nginx');
  mkdirSync(join(dir, 'logs'), { recursive: true });
  writeFileSync(join(dir, 'nginx.conf'), `daemon off; worker_processes 1; pid ${dir}/nginx.pid;
error_log ${dir}/logs/error.log warn;
events { worker_connections 1024; }
http { access_log off; client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/f; uwsgi_temp_path ${dir}/u; scgi_temp_path ${dir}/s;
  ${upstream}
  server { listen 127.0.0.1:${port};
    location = /healthz { return 200 'ok'; }
    location / { ${location} } } }
`);
  const nginx = spawn('taskset', ['-c', String(cpu), 'nginx', '-p', dir, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'logs', 'error.log')],
    { stdio: 'ignore' });
  children.push(nginx);
  await waitPort(`http://127.0.0.1:${port}/healthz`);
  await sleep(200);
  return Number(execFileSync('pgrep', ['-P', String(nginx.pid)]).toString().trim().split('\n')[0]);
}
