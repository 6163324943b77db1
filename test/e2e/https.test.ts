// https:// and a real legacy server (issue "Browse the real web", items 1–3): Debian's nginx on loopback with a test
// CA made here (openssl), trusted through CATP_EXTRA_CA_CERTS. A page, its stylesheet and its image load over TLS
// on the browser's own path (the `tcp` transport) and through the host (sub-resources); an expired certificate,
// one for another name and one from an unknown issuer stop the load with an error that says which; nginx's gzip
// answers decode; a 301 → 302 → 200 chain ends on the right URL; a redirect loop stops.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';

import { DhttpHost } from '../../app';
import { BrowserService } from '../../app/browser/service';
import type { BrowserEvent } from '../../protocol/browser/api';
import { getHeader } from '../../protocol/dhttp';
import { NGINX } from '../../lab/nginx';
import { describeIf } from '../helpers/requires';

jest.setTimeout(60_000);
const OPENSSL = ['/usr/bin/openssl'].find((p) => existsSync(p));
const maybe = describeIf(NGINX !== undefined && OPENSSL !== undefined, 'nginx and openssl (apt-get install nginx-light openssl)');

const PAGE = `<!doctype html><title>tls</title><link rel=stylesheet href=style.css><p>over TLS ${'and compressed '.repeat(200)}</p><img src=dot.png>`;
const CSS = 'p { color: rgb(1, 2, 3) }';
const PNG = Buffer.from('89504e470d0a1a0a0000000d4948445200000001000000010806000000', 'hex');

function sh(cwd: string, ...args: string[]): void {
  execFileSync(OPENSSL as string, args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** A test CA and three leaf certificates for 127.0.0.1: good, expired, and one for another name. */
function makeCerts(dir: string): void {
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

async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((ok) => srv.listen(0, '127.0.0.1', ok));
  const { port } = srv.address() as net.AddressInfo;
  await new Promise<void>((ok) => srv.close(() => ok()));
  return port;
}

maybe('https:// against nginx with a test CA', () => {
  let dir: string;
  let nginx: ChildProcess;
  const ports: Record<'good' | 'expired' | 'wrong' | 'plain', number> = { good: 0, expired: 0, wrong: 0, plain: 0 };
  let host: DhttpHost;
  const before = process.env.CATP_EXTRA_CA_CERTS;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'catp-https-'));
    const root = join(dir, 'www');
    mkdirSync(join(root), { recursive: true });
    writeFileSync(join(root, 'page.html'), PAGE);
    writeFileSync(join(root, 'style.css'), CSS);
    writeFileSync(join(root, 'dot.png'), PNG);
    makeCerts(dir);
    for (const k of Object.keys(ports) as (keyof typeof ports)[]) ports[k] = await freePort();
    mkdirSync(join(dir, 'tmp'));
    const server = (port: number, cert: string | null) => `
  server {
    listen 127.0.0.1:${port}${cert ? ' ssl' : ''};
    ${cert ? `ssl_certificate ${dir}/${cert}.pem; ssl_certificate_key ${dir}/${cert}.key;` : ''}
    root ${root};
    gzip on; gzip_types text/css; gzip_min_length 20;
    location = /r1 { return 301 /r2; }
    location = /r2 { return 302 /page.html; }
    location = /loop { return 302 /loop; }
  }`;
    writeFileSync(join(dir, 'nginx.conf'), `daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path ${dir}/tmp; proxy_temp_path ${dir}/tmp; fastcgi_temp_path ${dir}/tmp; uwsgi_temp_path ${dir}/tmp; scgi_temp_path ${dir}/tmp;
  types { text/html html; text/css css; image/png png; }
  ${server(ports.good, 'good')}
  ${server(ports.expired, 'expired')}
  ${server(ports.wrong, 'wrong')}
  ${server(ports.plain, null)}
}
`);
    nginx = spawn(NGINX as string, ['-p', dir, '-c', join(dir, 'nginx.conf')], { stdio: 'ignore' });
    for (let i = 0; i < 100; i++) {
      const up = await new Promise<boolean>((ok) => {
        const s = net.connect(ports.plain, '127.0.0.1', () => (s.destroy(), ok(true)));
        s.on('error', () => ok(false));
      });
      if (up) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    process.env.CATP_EXTRA_CA_CERTS = join(dir, 'ca.pem');
    host = new DhttpHost();
  });

  afterAll(async () => {
    if (before === undefined) delete process.env.CATP_EXTRA_CA_CERTS;
    else process.env.CATP_EXTRA_CA_CERTS = before;
    host?.close();
    if (nginx && nginx.exitCode === null) {
      const exited = new Promise((ok) => nginx.once('exit', ok));
      nginx.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  });

  /** Navigate the browser service and wait for the navigation's end. */
  async function navigate(url: string): Promise<{ end: BrowserEvent; events: BrowserEvent[] }> {
    const s = new BrowserService({ host, store: null });
    const events: BrowserEvent[] = [];
    s.attach((e) => events.push(e));
    try {
      s.navigate(url);
      const until = Date.now() + 20_000;
      for (;;) {
        const end = events.find((e) => e.type === 'complete' || e.type === 'error');
        if (end) return { end, events };
        if (Date.now() > until) throw new Error(`no end for ${url}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    } finally {
      s.close();
    }
  }
  const text = (events: BrowserEvent[]) => events.filter((e) => e.type === 'text').map((e) => (e as { text: string }).text).join('');

  test('a page over TLS in the browser (its tcp path), and its stylesheet (gzip) and image through the host', async () => {
    const base = `https://127.0.0.1:${ports.good}`;
    const { end, events } = await navigate(`${base}/page.html`);
    expect(end.type).toBe('complete');
    expect(text(events)).toBe(PAGE);
    expect((events.find((e) => e.type === 'load-started') as { transport: string }).transport).toBe('tcp');
    const css = await host.fetch(`${base}/style.css`);
    expect(css.channel).toBe('https');
    expect(Buffer.from(css.response.body).toString()).toBe(CSS);
    const png = await host.fetch(`${base}/dot.png`);
    expect(Buffer.from(png.response.body).equals(PNG)).toBe(true);
    expect(getHeader(png.response.headers, 'content-type')).toBe('image/png');
  });

  test.each([
    ['expired', 'HTTP_ERR_TLS_CERT_EXPIRED', /has expired/],
    ['wrong', 'HTTP_ERR_TLS_WRONG_NAME', /another name/],
  ] as const)('a certificate that is %s stops the load with an error that says so', async (which, code, message) => {
    const { end } = await navigate(`https://127.0.0.1:${ports[which]}/page.html`);
    expect(end).toMatchObject({ type: 'error', code });
    expect((end as { message: string }).message).toMatch(message);
    await expect(host.fetch(`https://127.0.0.1:${ports[which]}/style.css`)).rejects.toMatchObject({ code });
  });

  test('a CA the browser does not trust: unknown issuer', async () => {
    delete process.env.CATP_EXTRA_CA_CERTS;
    try {
      const { end } = await navigate(`https://127.0.0.1:${ports.good}/page.html`);
      expect(end).toMatchObject({ type: 'error', code: 'HTTP_ERR_TLS_UNKNOWN_ISSUER' });
    } finally {
      process.env.CATP_EXTRA_CA_CERTS = join(dir, 'ca.pem');
    }
  });

  test.each(['https', 'http'] as const)("nginx's 301 → 302 → 200 over %s ends on the right URL; a loop stops", async (scheme) => {
    const base = `${scheme}://127.0.0.1:${scheme === 'https' ? ports.good : ports.plain}`;
    const { end, events } = await navigate(`${base}/r1`);
    expect(end.type).toBe('complete');
    const started = events.filter((e) => e.type === 'load-started') as { url: string }[];
    expect(started.map((e) => e.url)).toEqual([`${base}/r1`, `${base}/r2`, `${base}/page.html`]);
    expect(text(events)).toBe(PAGE);
    expect((await navigate(`${base}/loop`)).end).toMatchObject({ type: 'error', code: 'HOST_ERR_REDIRECT_LOOP' });
  });
});
