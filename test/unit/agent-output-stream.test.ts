// A step's output stream: batching (timer or size), the chunk limit, offsets and sequence
// numbers, and what is kept for re-sending until acknowledged (in memory, then in spool files).
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MAX_CHUNK_BYTES, type StepOutput } from '@deckhand/protocol';
import { describe, expect, it } from 'vitest';
import { OutputBudget } from '../../agent/src/output/budget.ts';
import { OutputStream } from '../../agent/src/output/output-stream.ts';
import { SpooledOutput } from '../../agent/src/output/unacked-output.ts';

/** A stream whose entries are written at once (like a connected socket), or left waiting. */
function collect(opts: { written?: boolean } = {}) {
  const sent: StepOutput[] = [];
  const stream = new OutputStream({
    jobId: '00000000-0000-4000-8000-000000000001',
    step: 1,
    send: (entry) => {
      if (opts.written === false) return;
      for (let m = entry.next(); m; m = entry.next()) {
        sent.push(m as StepOutput);
        entry.written?.(m);
      }
    },
  });
  return { stream, sent, bytes: (f: StepOutput) => f.data };
}

describe('output batching', () => {
  it('sends the first output after a quiet spell at once, and gathers a burst for up to 100 ms', async () => {
    const { stream, sent, bytes } = collect();
    stream.write(Buffer.from('a'));
    expect(sent).toHaveLength(1);
    stream.write(Buffer.from('b'));
    stream.write(Buffer.from('c\n'));
    expect(sent).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 150));
    expect(sent).toHaveLength(2);
    expect(sent.map((f) => [f.seq, f.offset, f.step])).toEqual([
      [0, 0, 1],
      [1, 1, 1],
    ]);
    expect(bytes(sent[1]!).toString()).toBe('bc\n');
  });

  it('sends the first write at once, then a full frame at once, in chunks of at most MAX_CHUNK_BYTES with contiguous offsets', () => {
    const { stream, sent, bytes } = collect();
    stream.write(Buffer.alloc(64 * 1024, 1));
    expect(sent).toHaveLength(1);
    stream.write(Buffer.alloc(MAX_CHUNK_BYTES * 2 + 5, 2));
    expect(sent.map((f) => [f.seq, f.offset, bytes(f).length])).toEqual([
      [0, 0, 64 * 1024],
      [1, 64 * 1024, MAX_CHUNK_BYTES],
      [2, 64 * 1024 + MAX_CHUNK_BYTES, MAX_CHUNK_BYTES],
      [3, 64 * 1024 + 2 * MAX_CHUNK_BYTES, 5],
    ]);
    expect(stream.finish()).toBe(64 * 1024 + 2 * MAX_CHUNK_BYTES + 5);
  });

  it('flushes everything on finish and ignores writes after it', () => {
    const { stream, sent } = collect();
    stream.write(Buffer.from('tail'));
    expect(stream.finish()).toBe(4);
    expect(sent).toHaveLength(1);
    stream.write(Buffer.from('late'));
    expect(stream.finish()).toBe(4);
  });
});

describe('unacknowledged output', () => {
  it('re-sends what was written and not acknowledged, from the acknowledged offset', () => {
    const { stream, bytes } = collect();
    stream.write(Buffer.alloc(70_000, 1)); // chunk 0: [0, 70000)
    stream.write(Buffer.alloc(70_000, 2)); // chunk 1: [70000, 140000), gathered...
    stream.flush(); // ... and sent
    stream.ack(100_000);
    const again = stream.unackedFrames();
    expect(again.map((f) => [f.seq, f.offset, bytes(f).length])).toEqual([[1, 100_000, 40_000]]);
    expect(stream.settled).toBe(false);
    stream.finish();
    stream.ack(140_000);
    expect(stream.unackedFrames()).toEqual([]);
    expect(stream.settled).toBe(true);
  });

  it('leaves frames still waiting in the outbox (not yet written) to the outbox', () => {
    const { stream } = collect({ written: false });
    stream.write(Buffer.alloc(70_000, 1));
    expect(stream.unackedFrames()).toEqual([]);
  });
});

describe('the spool', () => {
  it('keeps output in memory up to the budget, then in a spool file that is deleted once acknowledged', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'deckhand-spool-'));
    try {
      const budget = new OutputBudget({ memoryLimit: 100, unackedLimit: 250 });
      const store = new SpooledOutput({ budget, spoolDir: dir, name: 'job-1' });
      store.append({ seq: 0, offset: 0, bytes: Buffer.alloc(80, 'a') });
      store.append({ seq: 1, offset: 80, bytes: Buffer.alloc(80, 'b') }); // past the memory budget
      store.append({ seq: 2, offset: 160, bytes: Buffer.alloc(90, 'c') });
      expect(budget.memoryBytes).toBe(80);
      expect(budget.unackedBytes).toBe(250);
      expect(budget.over).toBe(true);
      expect(readdirSync(dir)).toEqual(['job-1-0.spool']);
      // Read back from memory and from the file, trimmed to the range asked for.
      expect(store.chunks(70, 170).map((c) => [c.seq, c.offset, c.bytes.toString()])).toEqual([
        [0, 70, 'a'.repeat(10)],
        [1, 80, 'b'.repeat(80)],
        [2, 160, 'c'.repeat(10)],
      ]);
      let resumed = false;
      budget.onceBelow(() => (resumed = true));
      store.ack(120); // part of the spooled chunk
      expect(resumed).toBe(true);
      expect(store.chunkAt(0, 250)).toMatchObject({ seq: 1, offset: 120 });
      expect(store.chunkAt(0, 250)!.bytes.toString()).toBe('b'.repeat(40));
      expect(readdirSync(dir)).toHaveLength(1);
      store.ack(250);
      expect(readdirSync(dir)).toEqual([]);
      expect([budget.memoryBytes, budget.unackedBytes]).toEqual([0, 0]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
