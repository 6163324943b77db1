// The origin server on the server side of the link: the project's reference server (`catp serve`, whose
// plain HTTP/1.1 side stock Chromium uses; the same process answers DHTTP/CATP for the other transports,
// so all four meet one server), or Debian's nginx (`--server nginx`: a stock HTTP/1.1 server for the
// stock browser; HTTP transports only), or Caddy over https (the `h3` transport's origin, lab/caddy.ts).
import { type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { type Link } from '../link';
import { CADDY_HINT, caddyEnv, findCaddy, makeCertificate, writeCaddyfile } from '../caddy';
import { NGINX, writeNginxConfig } from '../nginx';
import { LabError } from '../errors';

export type ServerKind = 'catp' | 'nginx' | 'caddy';


/** The repository root (where package.json and bin/catp.js are), from this file's location. */
export function repoRoot(): string {
  let dir = __dirname;
  for (let i = 0; i < 6; i++) {
    if (fs.existsSync(path.join(dir, 'package.json')) && fs.existsSync(path.join(dir, 'bin', 'catp.js'))) return dir;
    dir = path.dirname(dir);
  }
  throw new LabError('LAB_ERR_NO_REPO', `cannot find the repository root above ${__dirname}`);
}

/** `node bin/catp.js`: the built command line (dist/), as a command and its first arguments. */
export function catpCommand(): { cmd: string; args: string[] } {
  const root = repoRoot();
  if (!fs.existsSync(path.join(root, 'dist', 'cli', 'main.js'))) throw new LabError('LAB_ERR_NOT_BUILT', 'the project is not built (dist/cli/main.js is missing): run npm run build');
  return { cmd: process.execPath, args: [path.join(root, 'bin', 'catp.js')] };
}

export interface Origin {
  kind: ServerKind;
  port: number;
  /** https origins (caddy): the SPKI hash of its certificate, the only one the measuring browser trusts */
  spki?: string;
  close(): Promise<void>;
}

/** Whether the server side listens on `port`: TCP (state LISTEN), and with `udp` also a UDP socket bound to it. */
async function listening(link: Link, port: number, udp = false): Promise<boolean> {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  const bound = async (table: string, state: string) => {
    const { stdout } = await link.runIn('server', 'cat', [table], 5000);
    return stdout.split('\n').some((l) => {
      const f = l.trim().split(/\s+/);
      return f[1]?.endsWith(`:${hexPort}`) && f[3] === state;
    });
  };
  // a UDP socket shows as state 07 (unconnected)
  return (await bound('/proc/net/tcp', '0A')) && (!udp || (await bound('/proc/net/udp', '07')));
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => child.kill('SIGKILL'), 3000);
    child.once('close', () => {
      clearTimeout(t);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

/**
 * Warms our server's caches for one page and transport, as a busy origin's are warm: one load from inside the
 * server's namespace (local, so nothing crosses the emulated link or shows in its log and capture). The server
 * encodes a page's CATP frames, codes its in-order stream, and compresses its HTTP body per coding, once per file
 * version at the best setting (seconds for a large page); without this, every measured load would start by waiting
 * for that. `catp`: a CATP load; `inorder`: an in-order load (it offers br, as the browser's does); `tcp`: HTTP
 * with br (what our tcp transport asks for); `chromium`: gzip (what Chromium asks for over http://).
 */
export async function warmOrigin(link: Link, origin: Origin, urlPath: string, transport: string, timeoutMs = 120_000): Promise<void> {
  if (origin.kind !== 'catp') return;
  const { cmd, args } = catpCommand();
  const at = `${link.serverAddress}:${origin.port}${urlPath}`;
  const dhttp = transport === 'catp' || transport === 'inorder';
  const get = dhttp ? ['--bind', WARM_UP_ADDRESS, `--${transport}`, `dhttp://${at}`]
    : transport === 'tcp' ? ['-H', 'Accept-Encoding: br', `http://${at}`]
      : transport === 'chromium' ? ['-H', 'Accept-Encoding: gzip, deflate', `http://${at}`]
        : null;
  if (get === null) return;
  if (dhttp) await addWarmUpAddress(link);
  await link.runIn('server', cmd, [...args, 'get', '--no-store', '-o', '/dev/null', ...get], timeoutMs);
}

/**
 * The warm-up's DHTTP source: an address of the server's namespace outside the client's /24 (10.77.0.0/24). The
 * server keeps loss statistics per client /24 (server/channel-choice.ts); a warm-up from the client's own prefix
 * left in them whatever its cold encode made it do (sessions 56 and 68: resends that sent the measured load's small
 * answers over TCP with no loss on the link).
 */
export const WARM_UP_ADDRESS = '10.78.0.2';

async function addWarmUpAddress(link: Link): Promise<void> {
  const r = await link.runIn('server', 'ip', ['addr', 'replace', `${WARM_UP_ADDRESS}/32`, 'dev', 'lo'], 5000);
  if (r.code !== 0) throw new LabError('LAB_ERR_WARM_UP_ADDRESS', `could not add the warm-up's address ${WARM_UP_ADDRESS} in the server's namespace: ${r.stderr.trim()}`);
}

/** Starts the server on the server side, serving root at serverAddress:port; resolves once it listens (TCP). */
/** `pacing`: our server's (`catp serve --pacing`; 'fixed' only for the oracle-rate ablation). */
export async function startOrigin(link: Link, kind: ServerKind, root: string, port = 8080, timeoutMs = 15_000, pacing: 'discover' | 'fixed' = 'discover'): Promise<Origin> {
  let child: ChildProcess;
  let dir: string | undefined;
  let spki: string | undefined;
  if (kind === 'caddy') {
    const caddy = findCaddy(repoRoot());
    if (!caddy) throw new LabError('LAB_ERR_NO_CADDY', CADDY_HINT);
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-st-caddy-'));
    const tls = makeCertificate(dir, link.serverAddress);
    spki = tls.spki;
    const conf = writeCaddyfile(dir, { address: link.serverAddress, port, root, tls });
    child = link.spawnIn('server', caddy, ['run', '--config', conf, '--adapter', 'caddyfile'], { stdio: ['ignore', 'ignore', 'pipe'], env: caddyEnv(dir) });
  } else if (kind === 'catp') {
    const { cmd, args } = catpCommand();
    // --cold-encode best: the warm-up load leaves the best-quality frames in the cache, so every measured load
    // gets the same frames (by default a cold page is served from a fast encoding until the best one is ready).
    child = link.spawnIn('server', cmd, [...args, 'serve', root, '--host', link.serverAddress, '--port', String(port), '--cold-encode', 'best', '--pacing', pacing, '--quiet'], { stdio: ['ignore', 'ignore', 'pipe'] });
  } else {
    if (!NGINX) throw new LabError('LAB_ERR_NO_NGINX', 'nginx not found: apt-get install nginx-light');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-st-nginx-'));
    const conf = writeNginxConfig(dir, `${link.serverAddress}:${port}`, root);
    child = link.spawnIn('server', NGINX, ['-p', dir, '-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  }
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    if (stderr.length < 4096) stderr += d;
  });
  const cleanup = () => {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  };
  const until = Date.now() + timeoutMs;
  try {
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) throw new LabError('LAB_ERR_ORIGIN_EXITED', `the ${kind} server exited: ${stderr.trim() || 'no message'}`);
      if (await listening(link, port, kind === 'caddy')) break;
      if (Date.now() > until) throw new LabError('LAB_ERR_ORIGIN_TIMEOUT', `the ${kind} server did not listen on port ${port} within ${timeoutMs} ms: ${stderr.trim()}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  } catch (err) {
    await stopChild(child);
    cleanup();
    throw err;
  }
  return {
    kind,
    port,
    ...(spki !== undefined ? { spki } : {}),
    async close() {
      await stopChild(child);
      cleanup();
    },
  };
}
