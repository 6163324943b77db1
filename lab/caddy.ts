// Caddy as the lab's HTTP/3 origin (the `h3` transport): a production web server that speaks HTTP/1.1, 2 and 3
// on one port and compresses on the fly (zstd, gzip) as real sites do. Built from its Go module at a pinned
// version (`npm run lab:caddy`, which .ci/run calls), found at CATP_CADDY, <repo>/.tools/bin/caddy, or on PATH.
// Chosen over aioquic's HTTP/3 server because that one is an example program (an ASGI demo app), not a server
// anyone deploys; Caddy serves a large share of the web's HTTP/3. Its certificate is made here for the run
// (openssl, the server's IP address as its name), and the measuring Chromium trusts it by its SPKI hash only.
import { execFileSync } from 'node:child_process';
import { createHash, X509Certificate } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';

export const CADDY_MODULE = 'github.com/caddyserver/caddy/v2/cmd/caddy';
export const CADDY_VERSION = 'v2.11.9';

/** The Caddy binary to run, or null (the h3 transport then says how to get one). `root`: the repository's. */
export function findCaddy(root: string, env: NodeJS.ProcessEnv = process.env): string | null {
  if (env.CATP_CADDY) return fs.existsSync(env.CATP_CADDY) ? env.CATP_CADDY : null;
  const local = path.join(root, '.tools', 'bin', 'caddy');
  if (fs.existsSync(local)) return local;
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    const p = path.join(dir, 'caddy');
    if (dir && fs.existsSync(p)) return p;
  }
  return null;
}

export const CADDY_HINT = `Caddy not found: run npm run lab:caddy (go install ${CADDY_MODULE}@${CADDY_VERSION} into .tools/bin; needs Go), or set CATP_CADDY`;

export interface LabCertificate {
  cert: string;
  key: string;
  /** base64 sha-256 of the certificate's SubjectPublicKeyInfo (Chromium's --ignore-certificate-errors-spki-list) */
  spki: string;
}

/** A self-signed certificate for `ip` (P-256, valid two days), written into `dir`. */
export function makeCertificate(dir: string, ip: string): LabCertificate {
  const cert = path.join(dir, 'cert.pem');
  const key = path.join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
    '-subj', '/CN=catp-lab-h3', '-addext', `subjectAltName=IP:${ip}`, '-keyout', key, '-out', cert], { stdio: 'ignore' });
  const der = new X509Certificate(fs.readFileSync(cert)).publicKey.export({ type: 'spki', format: 'der' });
  return { cert, key, spki: createHash('sha256').update(der).digest('base64') };
}

/**
 * Writes `dir/Caddyfile`: `root` served at https://address:port (TCP for HTTP/1.1 and 2, UDP for HTTP/3), no admin
 * endpoint, nothing written outside `dir`, compressed as a stock Caddy site compresses (`encode`: zstd, else gzip).
 */
export function writeCaddyfile(dir: string, o: { address: string; port: number; root: string; tls: LabCertificate }): string {
  const file = path.join(dir, 'Caddyfile');
  fs.writeFileSync(file, `{
\tadmin off
\tpersist_config off
\tauto_https disable_redirects
\tskip_install_trust
\tstorage file_system ${dir}/data
\tservers {
\t\tprotocols h1 h2 h3
\t}
}
https://${o.address}:${o.port} {
\tbind ${o.address}
\ttls ${o.tls.cert} ${o.tls.key}
\troot * ${o.root}
\tencode zstd gzip
\tfile_server
}
`);
  return file;
}

/** The environment Caddy runs with: its home, config and data inside `dir`. */
export function caddyEnv(dir: string): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir, XDG_CONFIG_HOME: path.join(dir, 'config'), XDG_DATA_HOME: path.join(dir, 'data') };
}
