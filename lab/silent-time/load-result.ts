// One measured load of `catp silent-time`: what the runner produces (run.ts), the load log stores (load-log.ts)
// and the report summarizes (report.ts). Its own module, so those three do not import each other for it.

export interface LoadResult {
  page: string;
  pageBytes: number;
  transport: string;
  loss: number;
  rep: number;
  seed: number;
  ok: boolean;
  error?: string;
  method?: string;
  /** all times in ms after the request */
  silentMs: number | null;
  silentGap: { fromMs: number; toMs: number } | null;
  firstPaintMs: number | null;
  completionMs: number | null;
  loadEventMs: number | null;
  updates: number;
  updateTimesMs: number[];
  frames: number;
  /** error bound: longest interval between consecutive observations from the request to the last update */
  samplingMaxMs: number | null;
  samplingMedianMs: number | null;
  floorMs: number | null;
  floorGap: { fromMs: number; toMs: number } | null;
  /** D: mean gap between useful arrivals */
  meanGapMs: number | null;
  /** D / (1 - p) */
  expectedMs: number | null;
  usefulPackets: number;
  duplicatePackets: number;
  unmatchedPackets: number;
  droppedToClient: { loss: number; queue: number; other: number };
  /** the request: the emulator's arrival time of the client's first packet to the server port */
  requestSource: 'link-log' | 'transport' | 'navigation';
  /** ms from issuing the navigation to the request on the wire */
  navToRequestMs: number | null;
  /** visible changes between the request and the first packet from the server reaching the client: not content, not counted */
  changesBeforeReply?: number;
  pageHeight?: number;
  /** the protocol the page came over, where the transport knows it (chromium, h3: the navigation's nextHopProtocol) */
  protocol?: string;
  /**
   * Cross-check (our browser): the renderer's own paint markers after the request (ms), their silent time,
   * and the largest distance from a compositor update to the nearest marker (ms). Absent for chromium.
   */
  markerTimesMs?: number[];
  markerSilentMs?: number | null;
  crossCheckMs?: number | null;
  warnings: string[];
}
