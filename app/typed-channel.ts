// A diagnostics_channel whose messages have one type: the host publishes through it and the measurement tools
// subscribe through it, so both sides agree on the message without casting `unknown` at every subscriber.
import diagnostics from 'node:diagnostics_channel';

export class TypedChannel<T> {
  private readonly channel: diagnostics.Channel;

  constructor(readonly name: string) {
    this.channel = diagnostics.channel(name);
  }

  get hasSubscribers(): boolean {
    return this.channel.hasSubscribers;
  }

  publish(message: T): void {
    this.channel.publish(message);
  }

  /** Calls `fn` with every message until the returned function is called. */
  subscribe(fn: (message: T) => void): () => void {
    // Only this class publishes under the name (the channels are ours and in-process): its messages are T.
    const handler = (message: unknown) => fn(message as T);
    this.channel.subscribe(handler);
    return () => {
      this.channel.unsubscribe(handler);
    };
  }
}
