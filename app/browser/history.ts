// The session history: the entries Back and Forward move between, and the one being shown.
import type { Transport } from '../../protocol/browser/api';

export interface HistoryEntry {
  url: string;
  /** The transport the navigation asked for (none: the service chooses by scheme). */
  transport: Transport | undefined;
}

export class History {
  private readonly entries: HistoryEntry[] = [];
  private index = -1;

  /** The entry being shown; undefined before the first navigation. */
  get current(): HistoryEntry | undefined {
    return this.entries[this.index];
  }

  get canBack(): boolean {
    return this.index > 0;
  }

  get canForward(): boolean {
    return this.index < this.entries.length - 1;
  }

  /** A new navigation: it becomes the current entry, and the entries ahead of the old one are dropped. */
  push(entry: HistoryEntry): HistoryEntry {
    this.entries.splice(this.index + 1);
    this.entries.push(entry);
    this.index = this.entries.length - 1;
    return entry;
  }

  /** Steps back; undefined (and no step) at the first entry. */
  back(): HistoryEntry | undefined {
    return this.canBack ? this.entries[--this.index] : undefined;
  }

  /** Steps forward; undefined (and no step) at the last entry. */
  forward(): HistoryEntry | undefined {
    return this.canForward ? this.entries[++this.index] : undefined;
  }

  /**
   * The current page redirected: its entry becomes the URL it led to (what the address bar shows, what Back
   * returns to). Returns that entry, undefined when there is none.
   */
  redirectCurrent(url: string): HistoryEntry | undefined {
    const entry = this.current;
    if (entry !== undefined) entry.url = url;
    return entry;
  }
}
