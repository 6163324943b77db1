// A load's arrival bookkeeping: each arriving CATP / in-order frame or TCP chunk as the WireFrame the renderer
// records (missing and repaired counts for the HUD and the load record).
import type { WireFrame } from '../../protocol/browser/api';
import type { FrameRecord } from '../../protocol/catp';

/** Per-load arrival bookkeeping: which seqs came, how many are missing below the highest, how many filled a gap. */
export class ArrivalStats {
  private readonly seen = new Set<number>();
  private maxSeq = -1;
  private repaired = 0;
  received = 0;
  bytes = 0;

  frame(record: FrameRecord, atEpochMs: number): WireFrame {
    this.received++;
    this.bytes += record.bytes;
    if (record.accepted && record.seq !== null && !this.seen.has(record.seq)) {
      this.seen.add(record.seq);
      if (record.seq < this.maxSeq) this.repaired++;
      if (record.seq > this.maxSeq) this.maxSeq = record.seq;
    }
    const f: WireFrame = {
      atEpochMs,
      seq: record.seq,
      kind: record.kind,
      bytes: record.bytes,
      accepted: record.accepted,
      useful: record.displayable.length > 0,
      missing: this.maxSeq + 1 - this.seen.size,
      repaired: this.repaired,
      received: this.received,
    };
    if (record.code !== undefined) f.code = record.code;
    return f;
  }

  chunk(bytes: number, atEpochMs: number, useful: boolean): WireFrame {
    this.received++;
    this.bytes += bytes;
    return { atEpochMs, seq: this.received - 1, kind: 'tcp', bytes, accepted: true, useful, missing: 0, repaired: 0, received: this.received };
  }
}
