// The load log: one JSON line per finished load, appended as it finishes, so a run of hours survives an
// interruption (a crash, a closed terminal, a session that ends) and can be resumed: loads already in the
// log for the same settings are not measured again. The first line holds the settings; a log written with
// other settings is refused rather than mixed in.
import * as fs from 'node:fs';
import * as zlib from 'node:zlib';

import { type LoadResult } from './load-result';

export const LOAD_LOG_VERSION = 1;

export class LoadLogError extends Error {
  readonly code: 'LOAD_LOG_BAD' | 'LOAD_LOG_SETTINGS';
  constructor(code: LoadLogError['code'], message: string) {
    super(message);
    this.name = 'LoadLogError';
    this.code = code;
  }
}

/** What identifies one load: the same key in a resumed run means the same measurement. */
export function loadKey(r: Pick<LoadResult, 'page' | 'transport' | 'loss' | 'rep' | 'seed'>): string {
  return JSON.stringify([r.page, r.transport, r.loss, r.rep, r.seed]);
}

interface Header {
  type: 'settings';
  version: number;
  settings: unknown;
}

export interface LoadLog {
  /** Loads read from an existing log (by {@link loadKey}); the last line for a key wins. */
  readonly previous: ReadonlyMap<string, LoadResult>;
  /** Lines in the existing log that could not be read (a line torn by a crash mid-write). */
  readonly tornLines: number;
  append(r: LoadResult): void;
  close(): void;
}

function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) =>
    x && typeof x === 'object' && !Array.isArray(x) ? Object.fromEntries(Object.entries(x as Record<string, unknown>).sort(([a], [b]) => a.localeCompare(b))) : x,
  );
}

/** A gzipped log (docs/results keeps them so) is read as it is, up to this many bytes unpacked. */
const MAX_GUNZIPPED_BYTES = 1 << 30;

/** Reads the load lines of a log file, plain or gzipped (for reporting without measuring). */
export function readLoadLog(file: string): { settings: unknown; loads: LoadResult[]; tornLines: number } {
  let bytes: Buffer;
  try {
    bytes = fs.readFileSync(file);
  } catch (err) {
    throw new LoadLogError('LOAD_LOG_BAD', `cannot read the load log ${file}: ${(err as Error).message}`);
  }
  if (bytes[0] === 0x1f && bytes[1] === 0x8b) {
    try {
      bytes = zlib.gunzipSync(bytes, { maxOutputLength: MAX_GUNZIPPED_BYTES });
    } catch (err) {
      throw new LoadLogError('LOAD_LOG_BAD', `${file}: a gzip file that does not unpack: ${(err as Error).message}`);
    }
  }
  const text = bytes.toString('utf8');
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  if (lines.length === 0) throw new LoadLogError('LOAD_LOG_BAD', `${file} is empty`);
  let header: Header;
  try {
    header = JSON.parse(lines[0]!) as Header;
  } catch {
    throw new LoadLogError('LOAD_LOG_BAD', `${file}: the first line is not a settings line`);
  }
  if (header?.type !== 'settings' || header.version !== LOAD_LOG_VERSION) {
    throw new LoadLogError('LOAD_LOG_BAD', `${file}: not a catp silent-time load log (version ${LOAD_LOG_VERSION})`);
  }
  const loads: LoadResult[] = [];
  let torn = 0;
  for (const line of lines.slice(1)) {
    try {
      const v = JSON.parse(line) as { type?: string; load?: LoadResult };
      if (v.type === 'load' && v.load && typeof v.load.page === 'string') loads.push(v.load);
      else torn++;
    } catch {
      torn++;
    }
  }
  return { settings: header.settings, loads, tornLines: torn };
}

/**
 * Opens (or creates) the log at `file` for a run with `settings`. An existing log must have been written
 * with the same settings.
 */
export function openLoadLog(file: string, settings: unknown): LoadLog {
  const previous = new Map<string, LoadResult>();
  let torn = 0;
  if (fs.existsSync(file) && fs.statSync(file).size > 0) {
    const old = readLoadLog(file);
    if (canonical(old.settings) !== canonical(settings)) {
      throw new LoadLogError('LOAD_LOG_SETTINGS', `${file} was written by a run with other settings; resume with the same options or give another --log file`);
    }
    for (const r of old.loads) previous.set(loadKey(r), r);
    torn = old.tornLines;
  }
  const fd = fs.openSync(file, 'a');
  // A torn last line (crash mid-write) must not swallow the next record: start on a fresh line.
  if (fs.fstatSync(fd).size === 0) {
    fs.writeSync(fd, JSON.stringify({ type: 'settings', version: LOAD_LOG_VERSION, settings } satisfies Header) + '\n');
  } else {
    const buf = Buffer.alloc(1);
    const rfd = fs.openSync(file, 'r');
    fs.readSync(rfd, buf, 0, 1, fs.fstatSync(rfd).size - 1);
    fs.closeSync(rfd);
    if (buf[0] !== 0x0a) fs.writeSync(fd, '\n');
  }
  let open = true;
  return {
    previous,
    tornLines: torn,
    append(r) {
      if (!open) return;
      // One write per line: a crash leaves at most the last line torn, which the reader skips.
      fs.writeSync(fd, JSON.stringify({ type: 'load', load: r }, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v)) + '\n');
      fs.fsyncSync(fd);
    },
    close() {
      if (!open) return;
      open = false;
      fs.closeSync(fd);
    },
  };
}
