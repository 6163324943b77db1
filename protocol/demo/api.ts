// The contract between `catp demo`'s host side (lab/demo/) and its page (renderer/demo.ts): the settings of a
// run, what each pane reports, and the messages over the demo's WebSocket. Types and a validator only.
import type { LoadRecord } from '../browser/api';

export const DEMO_TRANSPORTS = ['catp', 'inorder', 'tcp'] as const;
export type DemoTransport = (typeof DEMO_TRANSPORTS)[number];

export interface DemoSettings {
  /** what to load: a page of demo/site, corpus:NAME, an HTML file, or an http(s):// URL */
  page: string;
  /** random loss each way, 0..0.3 */
  loss: number;
  /** one-way propagation delay, ms */
  delayMs: number;
  /** bottleneck rate, IP bytes/s */
  rate: number;
  /** mean loss-burst length in packets; 1 = independent (Bernoulli) losses */
  burst: number;
  seed: number;
}

export const DEFAULT_SETTINGS: Omit<DemoSettings, 'seed'> = { page: '', loss: 0.15, delayMs: 40, rate: 50_000, burst: 1 };

export const SETTING_LIMITS = {
  loss: [0, 0.3],
  delayMs: [0, 1000],
  rate: [1000, 100_000_000],
  burst: [1, 50],
  seed: [0, 2 ** 31 - 1],
} as const;

/** Settings the demo refuses (DEMO_ERR_SETTINGS), with what was wrong. */
export class DemoSettingsError extends Error {
  readonly code = 'DEMO_ERR_SETTINGS';
  constructor(message: string) {
    super(message);
    this.name = 'DemoSettingsError';
  }
}

/** Checks settings from the command line or the page (which is not trusted to send sane ones). */
export function checkSettings(s: unknown): DemoSettings {
  const o = (typeof s === 'object' && s !== null ? s : {}) as Record<string, unknown>;
  const num = (k: keyof typeof SETTING_LIMITS, int = false): number => {
    const v = o[k];
    const [lo, hi] = SETTING_LIMITS[k];
    if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi || (int && !Number.isInteger(v))) {
      throw new DemoSettingsError(`${k} must be ${int ? 'a whole number' : 'a number'} from ${lo} to ${hi}, got ${JSON.stringify(v)}`);
    }
    return v;
  };
  if (typeof o.page !== 'string' || o.page.length > 2048) throw new DemoSettingsError('page must be a string (a page name, corpus:NAME, a file or a URL)');
  return { page: o.page, loss: num('loss'), delayMs: num('delayMs'), rate: num('rate', true), burst: num('burst'), seed: num('seed', true) };
}

export interface PaneResult {
  transport: DemoTransport;
  outcome: LoadRecord['outcome'] | 'failed';
  error?: string;
  silentTimeMs: number | null;
  /** the longest silent gap, epoch ms */
  silentGap: { from: number; to: number } | null;
  firstPaintMs: number | null;
  completeMs: number | null;
  networkFloorMs: number | null;
  frames: number;
  missing: number;
  repaired: number;
  visibleUpdates: number;
  /** from the emulator's log: the indices (k-th packet of the direction) its random loss dropped, and packets seen */
  lost: { c2s: number[]; s2c: number[] };
  packets: { c2s: number; s2c: number };
}

export interface DemoRun {
  runId: number;
  settings: DemoSettings;
  page: { name: string; bytes: number };
  /** when the three panes were told to load (epoch ms) */
  startedAtEpochMs: number;
  panes: PaneResult[];
  /** the links ran in a user namespace (not as root) */
  rootless: boolean;
}

export interface PaneView {
  transport: DemoTransport;
  /** what the pane's frame opens */
  appUrl: string;
}

export interface PageChoice {
  /** what to put in the page field to get it */
  value: string;
  label: string;
  bytes: number;
  group: 'demo site' | 'real pages (corpus)';
}

/** Messages the demo page gets. */
export type DemoEvent =
  | { type: 'init'; settings: DemoSettings; pages: PageChoice[]; transports: readonly DemoTransport[] }
  | { type: 'progress'; runId: number; message: string }
  | { type: 'panes'; runId: number; panes: PaneView[] }
  | { type: 'started'; runId: number; atEpochMs: number }
  | { type: 'pane-done'; runId: number; pane: PaneResult }
  | { type: 'run'; run: DemoRun }
  | { type: 'filmstrip'; runId: number; intervalMs: number; frames: { dataUrl: string; width: number; height: number }[]; ticks: number[] }
  | { type: 'error'; runId: number | null; code: string; message: string };

/** Messages the demo page sends. */
export type DemoCommand = { type: 'run'; settings: DemoSettings };
