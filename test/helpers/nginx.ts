// Runs Debian's nginx (a real HTTP/1.1 server that knows nothing of DHTTP) on a free loopback port.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { NGINX, writeNginxConfig } from '../../lab/nginx';

export interface Nginx {
  port: number;
  close(): Promise<void>;
}

export async function freePort(): Promise<number> {
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

/** Runs nginx on `conf` (written in `dir`) until `port` answers; close() stops it and removes `dir`. */
export async function runNginx(dir: string, conf: string, port: number): Promise<Nginx> {
  if (!NGINX) throw new Error('nginx not found: install Debian package nginx-light (or nginx)');
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

export async function startNginx(root: string): Promise<Nginx> {
  const dir = mkdtempSync(join(tmpdir(), 'catp-nginx-'));
  const port = await freePort();
  return runNginx(dir, writeNginxConfig(dir, `127.0.0.1:${port}`, root), port);
}
