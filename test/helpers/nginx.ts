// Runs Debian's nginx (a real HTTP/1.1 server that knows nothing of DHTTP) on a free loopback port.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p));

export interface Nginx {
  port: number;
  close(): Promise<void>;
}

async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((ok) => srv.listen(0, '127.0.0.1', ok));
  const { port } = srv.address() as net.AddressInfo;
  await new Promise<void>((ok) => srv.close(() => ok()));
  return port;
}

async function waitForPort(port: number, child: ChildProcess, deadlineMs: number): Promise<void> {
  const until = Date.now() + deadlineMs;
  while (Date.now() < until) {
    if (child.exitCode !== null) throw new Error(`nginx exited with ${child.exitCode}`);
    const ok = await new Promise<boolean>((done) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        done(true);
      });
      s.on('error', () => done(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('nginx did not start listening in time');
}

export async function startNginx(root: string): Promise<Nginx> {
  if (!NGINX) throw new Error('nginx not found: install Debian package nginx-light (or nginx)');
  const dir = mkdtempSync(join(tmpdir(), 'catp-nginx-'));
  mkdirSync(join(dir, 'tmp'));
  const port = await freePort();
  const conf = join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    `daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path ${dir}/tmp;
  proxy_temp_path ${dir}/tmp;
  fastcgi_temp_path ${dir}/tmp;
  uwsgi_temp_path ${dir}/tmp;
  scgi_temp_path ${dir}/tmp;
  types { text/html html; text/plain txt; application/octet-stream bin; }
  server {
    listen 127.0.0.1:${port};
    root ${root};
  }
}
`,
  );
  const child = spawn(NGINX, ['-p', dir, '-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  try {
    await waitForPort(port, child, 5000);
  } catch (err) {
    child.kill('SIGKILL');
    throw new Error(`${(err as Error).message}: ${stderr}`);
  }
  return {
    port,
    close: async () => {
      if (child.exitCode === null) {
        const exited = new Promise((ok) => child.once('exit', ok));
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
