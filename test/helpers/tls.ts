// A test CA made with openssl, leaf certificates for 127.0.0.1 (good, expired, for another name), and Debian's nginx
// serving a directory over TLS with each of them and over plain HTTP (gzip on, a 301 -> 302 -> page chain at /r1, a
// redirect loop at /loop). Used by the https tests in e2e/ and browser/.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

import { NGINX, writeNginxServers } from '../../lab/nginx';
import { freePort, runNginx } from './nginx';

export const OPENSSL = ['/usr/bin/openssl'].find((p) => existsSync(p));
export const tlsLabPresent = NGINX !== undefined && OPENSSL !== undefined;

function sh(cwd: string, ...args: string[]): void {
  execFileSync(OPENSSL as string, args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** A test CA (ca.pem) and three leaf certificates for 127.0.0.1 in `dir`: good, expired, and one for another name. */
export function makeCerts(dir: string): void {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  sh(dir, 'req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=catp test CA',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  writeFileSync(join(dir, 'ip.ext'), 'subjectAltName=IP:127.0.0.1\n');
  writeFileSync(join(dir, 'wrong.ext'), 'subjectAltName=DNS:wrong.example\n');
  for (const leaf of ['good', 'wrong', 'expired']) sh(dir, 'req', ...ec, '-keyout', `${leaf}.key`, '-out', `${leaf}.csr`, '-subj', `/CN=${leaf}`);
  sh(dir, 'x509', '-req', '-in', 'good.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'good.pem', '-days', '2', '-extfile', 'ip.ext');
  sh(dir, 'x509', '-req', '-in', 'wrong.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'wrong.pem', '-days', '2', '-extfile', 'wrong.ext');
  // an expired one needs explicit dates: `openssl ca` takes them
  mkdirSync(join(dir, 'issued'));
  writeFileSync(join(dir, 'index.txt'), '');
  writeFileSync(join(dir, 'serial'), '1000\n');
  writeFileSync(join(dir, 'ca.cnf'), `[ca]\ndefault_ca=t\n[t]\ndatabase=${dir}/index.txt\nnew_certs_dir=${dir}/issued\nserial=${dir}/serial\ndefault_md=sha256\npolicy=p\n[p]\ncommonName=supplied\n`);
  sh(dir, 'ca', '-batch', '-config', 'ca.cnf', '-cert', 'ca.pem', '-keyfile', 'ca.key', '-in', 'expired.csr', '-out', 'expired.pem',
    '-startdate', '20200101000000Z', '-enddate', '20200102000000Z', '-extfile', 'ip.ext', '-notext');
}

export interface TlsLab {
  /** The CA's PEM file (trust it with CATP_EXTRA_CA_CERTS). */
  caFile: string;
  /** `good2`: a second origin with the good certificate (another https:// origin than `good`). */
  ports: Record<'good' | 'good2' | 'expired' | 'wrong' | 'plain', number>;
  /** Adds a file to what nginx serves. */
  write(name: string, body: string | Buffer): void;
  close(): Promise<void>;
}

/** nginx serving `files` over TLS (three certificates) and plain HTTP, with the test CA. */
export async function startTlsLab(files: Record<string, string | Buffer>): Promise<TlsLab> {
  const dir = mkdtempSync(join(tmpdir(), 'catp-https-'));
  const root = join(dir, 'www');
  mkdirSync(root, { recursive: true });
  const write = (name: string, body: string | Buffer) => {
    mkdirSync(dirname(join(root, name)), { recursive: true });
    writeFileSync(join(root, name), body);
  };
  for (const [name, body] of Object.entries(files)) write(name, body);
  makeCerts(dir);
  const ports = { good: await freePort(), good2: await freePort(), expired: await freePort(), wrong: await freePort(), plain: await freePort() };
  const server = (port: number, cert: string | null) => `
  server {
    listen 127.0.0.1:${port}${cert ? ' ssl' : ''};
    ${cert ? `ssl_certificate ${dir}/${cert}.pem; ssl_certificate_key ${dir}/${cert}.key;` : ''}
    root ${root};
    gzip on; gzip_types text/css; gzip_min_length 20;
    location = /r1 { return 301 /r2; }
    location = /r2 { return 302 /page.html; }
    location = /loop { return 302 /loop; }
    location /fonts/cors/ { add_header Access-Control-Allow-Origin *; }
  }`;
  const conf = writeNginxServers(dir, [server(ports.good, 'good'), server(ports.good2, 'good'), server(ports.expired, 'expired'), server(ports.wrong, 'wrong'), server(ports.plain, null)].join('\n'));
  const nginx = await runNginx(dir, conf, ports.plain);
  return {
    caFile: join(dir, 'ca.pem'),
    ports,
    write,
    close: () => nginx.close(),
  };
}
