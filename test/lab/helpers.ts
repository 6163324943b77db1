// Shared by the lab tests: the support check, statistics, and the sink's output.
import { labSupport } from '../../lab/link';

/** Fails (never skips) with the reason when this machine cannot run the link. */
export function requireLab(): void {
  const s = labSupport();
  if (!s.ok) throw new Error(`the lab tests need root or unprivileged user namespaces with /dev/net/tun: ${s.reason}`);
}

export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.round(q * (sorted.length - 1))));
  return sorted[i]!;
}

export function sortedNums(xs: Iterable<number>): number[] {
  return [...xs].sort((a, b) => a - b);
}

/** Mean length of the runs of consecutive dropped indices. */
export function meanBurst(dropped: readonly number[]): number {
  if (dropped.length === 0) return 0;
  let runs = 1;
  for (let i = 1; i < dropped.length; i++) if (dropped[i] !== dropped[i - 1]! + 1) runs++;
  return dropped.length / runs;
}

export interface SinkRecord {
  seq: number;
  sendNs: bigint;
  recvNs: bigint;
  len: number;
}

export function sinkRecords(lines: readonly string[]): SinkRecord[] {
  const out: SinkRecord[] = [];
  for (const l of lines) {
    const f = l.split(' ');
    if (f.length !== 4) continue;
    out.push({ seq: Number(f[0]), sendNs: BigInt(f[1]!), recvNs: BigInt(f[2]!), len: Number(f[3]) });
  }
  return out;
}

/** Tcp counters of the namespace the text came from (/proc/net/snmp or /proc/net/netstat). */
export function snmpCounters(text: string, prefix: 'Tcp' | 'TcpExt'): Record<string, number> {
  const lines = text.split('\n').filter((l) => l.startsWith(`${prefix}:`));
  const out: Record<string, number> = {};
  for (let i = 0; i + 1 < lines.length; i += 2) {
    const names = lines[i]!.split(/\s+/).slice(1);
    const vals = lines[i + 1]!.split(/\s+/).slice(1);
    names.forEach((n, j) => (out[n] = Number(vals[j])));
  }
  return out;
}
