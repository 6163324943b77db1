// Debian's nginx as a stock HTTP/1.1 origin (it knows nothing of DHTTP): where it is, and a throwaway config
// that keeps everything (pid, logs, temp files) inside one directory of ours, single process, no daemon.
import * as fs from 'node:fs';
import * as path from 'node:path';

export const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => fs.existsSync(p));

/**
 * Writes `dir/nginx.conf` with the given `server { ... }` blocks (and `types`, default the pages' own) and returns
 * its path; run `nginx -p dir -c conf`. Everything nginx writes stays in `dir`.
 */
export function writeNginxServers(dir: string, servers: string, types = 'text/html html htm; text/css css; text/plain txt; image/png png; image/svg+xml svg; image/jpeg jpg jpeg; application/javascript js;'): string {
  fs.mkdirSync(path.join(dir, 'tmp'), { recursive: true });
  const conf = path.join(dir, 'nginx.conf');
  fs.writeFileSync(conf, `daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 64; }
http {
  access_log off;
  sendfile on;
  client_body_temp_path ${dir}/tmp;
  proxy_temp_path ${dir}/tmp;
  fastcgi_temp_path ${dir}/tmp;
  uwsgi_temp_path ${dir}/tmp;
  scgi_temp_path ${dir}/tmp;
  types { ${types} }
  default_type application/octet-stream;
${servers}
}
`);
  return conf;
}

/** Writes `dir/nginx.conf` serving `root` on `listen` (address:port) and returns its path. */
export function writeNginxConfig(dir: string, listen: string, root: string): string {
  return writeNginxServers(dir, `  server {
    listen ${listen};
    root ${root};
  }`);
}
