// The SSH runner's output pump: every byte written reaches storage once, in order, at the right
// offsets — also what is written while a slow store is in flight — masked (also across writes),
// at least every 100 ms, and reading pauses while too much waits.
import { describe, expect, it } from 'vitest';
import { OutputPump } from '../../coordinator/src/modules/ssh/output-pump.ts';

function recorder(delayMs: number) {
  const stored: Array<{ offset: number; data: Buffer }> = [];
  let failures = 0;
  return {
    stored,
    failNext(n: number) {
      failures = n;
    },
    store: async (chunks: Array<{ offset: number; data: Buffer }>) => {
      await new Promise((r) => setTimeout(r, delayMs));
      if (failures > 0) {
        failures--;
        throw new Error('database unavailable');
      }
      for (const c of chunks) stored.push({ offset: c.offset, data: Buffer.from(c.data) });
    },
    text: () => Buffer.concat(stored.map((c) => c.data)).toString(),
  };
}

describe('the SSH output pump', () => {
  it('stores every byte once, in order, at its offset, also what arrives during a slow store', async () => {
    const r = recorder(30);
    const pump = new OutputPump({ masks: [], store: r.store, onStoreError: () => 'retry' });
    let expected = '';
    for (let i = 0; i < 200; i++) {
      const line = `line ${i}\n`;
      expected += line;
      pump.write(Buffer.from(line));
      if (i % 20 === 0) await new Promise((res) => setTimeout(res, 15));
    }
    const big = 'x'.repeat(600 * 1024);
    expected += big;
    pump.write(Buffer.from(big));
    expect(await pump.finish()).toBe(Buffer.byteLength(expected));
    expect(r.text()).toBe(expected);
    let offset = 0;
    for (const c of r.stored) {
      expect(c.offset).toBe(offset);
      offset += c.data.length;
    }
  });

  it('stores live output within about 100 ms, without waiting for the end', async () => {
    const r = recorder(0);
    const pump = new OutputPump({ masks: [], store: r.store, onStoreError: () => 'retry' });
    pump.write(Buffer.from('first\n'));
    await new Promise((res) => setTimeout(res, 250));
    expect(r.text()).toBe('first\n');
    pump.write(Buffer.from('second\n'));
    await new Promise((res) => setTimeout(res, 250));
    expect(r.text()).toBe('first\nsecond\n');
    await pump.finish();
  });

  it('masks secrets, also split across writes, and retries a failed store', async () => {
    const r = recorder(5);
    r.failNext(2);
    const pump = new OutputPump({ masks: ['sk-live-secret'], store: r.store, onStoreError: () => 'retry' });
    pump.write(Buffer.from('key=sk-live-'));
    pump.write(Buffer.from('secret done\n'));
    await pump.finish();
    expect(r.text()).toBe('key=[MASKED] done\n');
  });

  it('asks to pause reading while too much waits, and to resume once stored', async () => {
    const r = recorder(50);
    const pump = new OutputPump({ masks: [], store: r.store, onStoreError: () => 'retry' });
    pump.write(Buffer.alloc(5 * 1024 * 1024, 97));
    expect(pump.over).toBe(true);
    await new Promise<void>((resolve) => pump.onceBelow(resolve));
    expect(pump.over).toBe(false);
    await pump.finish();
    expect(r.text().length).toBe(5 * 1024 * 1024);
  });
});
