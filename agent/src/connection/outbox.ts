// Messages sent while the connection is not ready (connecting, or waiting for `welcome`): they
// leave in the order they were sent, right after the next welcome.
import type { AgentMessage } from '@deckhand/protocol';

export interface OutboxEntry {
  message: AgentMessage;
  /** Runs when the message is written to a socket (output streams track what went out). */
  onWritten?: () => void;
}

export class Outbox {
  #entries: OutboxEntry[] = [];

  get size(): number {
    return this.#entries.length;
  }

  push(entry: OutboxEntry): void {
    this.#entries.push(entry);
  }

  /** Hands every waiting entry to `write`, oldest first, and forgets them. */
  drain(write: (entry: OutboxEntry) => void): void {
    const entries = this.#entries;
    this.#entries = [];
    for (const entry of entries) write(entry);
  }
}
