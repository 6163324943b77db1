// The load records renderers hand over (silent time, frames, savings), kept for whoever waits for one
// (`--record`, the tests), with the host's own savings figures in place of the renderer's; and the file a
// record the user saves is written to.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

import type { LoadRecord, LoadSavings } from '../../protocol/browser/api';
import { HostError } from '../errors';

/** Loads remembered as redirected to a next hop, and loads whose savings are kept: the most recent. */
const MAX_REDIRECT_LINKS = 256;
const MAX_SAVINGS = 64;

export class LoadRecords {
  private readonly records = new Map<number, LoadRecord>();
  private readonly waiters = new Map<number, ((r: LoadRecord) => void)[]>();
  /** A load that redirected → the load of its next hop: its record is the final hop's. */
  private readonly redirectedTo = new Map<number, number>();
  /** Savings of recent loads, as the host counted them. */
  private readonly savingsByLoad = new Map<number, LoadSavings>();

  /** A load's savings so far (copied): they replace the renderer's in its record. */
  noteSavings(loadId: number, savings: LoadSavings): void {
    this.savingsByLoad.set(loadId, { ...savings });
    if (this.savingsByLoad.size > MAX_SAVINGS) this.savingsByLoad.delete(this.savingsByLoad.keys().next().value as number);
  }

  /** The record a renderer handed over: kept, and given to whoever waits for it. */
  deliver(record: LoadRecord): void {
    // the host's figures are the reference (a sub-resource's DTD hit may have come after the renderer's last)
    const mine = this.savingsByLoad.get(record.loadId);
    if (mine) record.savings = { ...mine };
    this.records.set(record.loadId, record);
    const waiting = this.waiters.get(record.loadId) ?? [];
    this.waiters.delete(record.loadId);
    for (const w of waiting) w(record);
  }

  /** A load redirected to the load `hop`: whoever waits for its record gets the next hop's. */
  redirected(loadId: number, hop: number): void {
    this.redirectedTo.set(loadId, hop);
    if (this.redirectedTo.size > MAX_REDIRECT_LINKS) this.redirectedTo.delete(this.redirectedTo.keys().next().value as number);
    const waiting = this.waiters.get(loadId);
    if (waiting !== undefined) {
      this.waiters.delete(loadId);
      this.waiters.set(hop, [...(this.waiters.get(hop) ?? []), ...waiting]);
    }
  }

  /** The record of a load (waits for it); for a load that redirected, its last hop's. */
  recordOf(first: number, timeoutMs: number): Promise<LoadRecord> {
    let loadId = first;
    for (let next = this.redirectedTo.get(loadId); next !== undefined; next = this.redirectedTo.get(loadId)) loadId = next;
    const have = this.records.get(loadId);
    if (have) return Promise.resolve(have);
    return new Promise((ok, fail) => {
      const timer = setTimeout(() => fail(new HostError('HOST_ERR_RECORD_TIMEOUT', `no load record for load ${loadId} within ${timeoutMs} ms`)), timeoutMs);
      const list = this.waiters.get(loadId) ?? [];
      list.push((r) => {
        clearTimeout(timer);
        ok(r);
      });
      this.waiters.set(loadId, list);
    });
  }
}

/** Writes a record the user asked to save (`save-record`) as JSON into `dir`; returns its path. */
export function writeRecordFile(dir: string, record: LoadRecord): string {
  const full = resolve(dir);
  mkdirSync(full, { recursive: true });
  const path = join(full, `load-${new Date().toISOString().replace(/[:.]/g, '-')}-${Number(record.loadId) | 0}.json`);
  writeFileSync(path, JSON.stringify(record, null, 1));
  return path;
}
