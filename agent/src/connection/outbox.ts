// Everything the agent sends leaves through one queue, in the order it was sent: control
// messages as they are, output as lazy entries that read their bytes (from memory or a spool
// file) only when the socket is ready for them, so waiting output costs no memory here. While
// not connected the queue simply waits; it leaves after the next welcome, behind the re-sent
// unacknowledged output.
import type { AgentMessage } from '@deckhand/protocol';

export interface OutboxEntry {
  /** The next frame to write, or undefined when this entry has nothing (more) to send. */
  next(): AgentMessage | undefined;
  /** Runs after each frame of this entry is handed to a socket. */
  written?(message: AgentMessage): void;
}

/** An entry for one message; `onWritten` runs once it is handed to a socket. */
export function messageEntry(message: AgentMessage, onWritten?: () => void): OutboxEntry {
  let sent = false;
  const entry: OutboxEntry = {
    next: () => {
      if (sent) return undefined;
      sent = true;
      return message;
    },
  };
  if (onWritten) entry.written = () => onWritten();
  return entry;
}

export class Outbox {
  #entries: OutboxEntry[] = [];

  get size(): number {
    return this.#entries.length;
  }

  push(entry: OutboxEntry): void {
    this.#entries.push(entry);
  }

  /** Puts entries in front of everything waiting (the re-sent output after a reconnect). */
  unshift(entries: readonly OutboxEntry[]): void {
    this.#entries.unshift(...entries);
  }

  /** The next frame with the entry it came from, skipping (and forgetting) exhausted entries. */
  take(): { message: AgentMessage; entry: OutboxEntry } | undefined {
    while (this.#entries.length > 0) {
      const entry = this.#entries[0]!;
      const message = entry.next();
      if (message !== undefined) return { message, entry };
      this.#entries.shift();
    }
    return undefined;
  }
}
