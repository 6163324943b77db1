// A CATP or in-order load as the renderer's events: CATP frames build the tree here, as DOM operations the
// renderer only applies (one `dom` event per frame); in-order frames' raw bytes become decoded `text`; every
// frame ends with its `frame` record.
import type { BrowserEvent } from '../../protocol/browser/api';
import { CatpTreeBuilder, type FrameRecord, type StreamEvent } from '../../protocol/catp';
import { StreamingHtmlDecoder } from '../../protocol/html-encoding';
import { realtimeNs } from '../../native';
import { ArrivalStats } from './arrival-stats';
import { DomOpRecorder } from './dom-recorder';
import type { PageNames } from './page-names';

export class StreamLoadEvents {
  private readonly stats = new ArrivalStats();
  // in-order: the page's raw bytes, no headers: its encoding from the bytes (BOM, <meta>), else UTF-8
  private readonly decoder = new StreamingHtmlDecoder();
  private textOffset = 0;
  private readonly recorder: DomOpRecorder;
  private readonly tree: CatpTreeBuilder<number>;
  private blockCount = -1;
  /** Blocks filled since the last `dom` event. */
  private filled: number[] = [];
  /** Blocks the payload store filled so far. */
  reused = 0;

  /** `names` learns the URLs the tree names (the frame may fetch only those). */
  constructor(private readonly loadId: number, private readonly requestAtEpochMs: number, names: PageNames) {
    this.recorder = new DomOpRecorder(names);
    this.tree = new CatpTreeBuilder(this.recorder);
  }

  /** A frame that arrived and what it did: its text, then its DOM operations, then its record. */
  frame(record: FrameRecord, events: StreamEvent[]): BrowserEvent[] {
    const out: BrowserEvent[] = [];
    let pieces = 0;
    let blocks = 0;
    for (const ev of events) {
      switch (ev.type) {
        case 'index-piece':
          this.tree.apply(ev);
          pieces++;
          break;
        case 'index-complete':
          this.blockCount = ev.blocks;
          break;
        case 'block-filled':
          this.tree.apply(ev);
          blocks++;
          this.filled.push(ev.block);
          break;
        case 'prefix-extended': {
          const text = this.decoder.push(ev.bytes, ev.length >= ev.total);
          if (text.length === 0) break; // held until the <meta> prescan has its 1,024 bytes
          out.push({ type: 'text', loadId: this.loadId, text, offset: this.textOffset, total: ev.total });
          this.textOffset += text.length;
          break;
        }
        default:
          break;
      }
    }
    this.takeDom(out, pieces, blocks);
    const requestAt = this.requestAtEpochMs;
    const atEpochMs = record.kernelAtMs !== null ? requestAt + record.kernelAtMs : requestAt + record.atMs;
    out.push({ type: 'frame', loadId: this.loadId, frame: this.stats.frame(record, atEpochMs) });
    return out;
  }

  /** Blocks the host filled from the payload store (never sent): their DOM operations. */
  localFill(events: StreamEvent[]): BrowserEvent[] {
    const out: BrowserEvent[] = [];
    let blocks = 0;
    for (const ev of events) {
      if (ev.type !== 'block-filled') continue;
      this.reused++;
      this.tree.apply(ev);
      blocks++;
      this.filled.push(ev.block);
    }
    this.takeDom(out, 0, blocks);
    return out;
  }

  private takeDom(out: BrowserEvent[], pieces: number, blocks: number): void {
    if (this.recorder.pending > 0) {
      out.push({
        type: 'dom', loadId: this.loadId, atEpochMs: Number(realtimeNs()) / 1e6, ops: this.recorder.take(), pieces, blocks,
        filled: this.filled, blockCount: this.blockCount,
      });
    }
    this.filled = [];
  }
}
