// Masking secrets in a byte stream: every occurrence of a masked value becomes `[MASKED]`, also
// when the value arrives split across two chunks. The masker holds back the last (longest mask −
// 1) bytes of what it was given until more arrives or the stream ends, since they may be the
// start of a secret. Shared by the runners, so output is masked before it leaves the host.

export const MASK = Buffer.from('[MASKED]');

export interface Masker {
  /** Masked bytes that are safe to emit now. */
  push(chunk: Buffer): Buffer;
  /** The rest, at the end of the stream. */
  flush(): Buffer;
}

export function createMasker(values: readonly string[]): Masker {
  const needles = [...new Set(values.filter((v) => v.length > 0))]
    .map((v) => Buffer.from(v))
    .sort((a, b) => b.length - a.length);
  if (needles.length === 0) return { push: (chunk) => chunk, flush: () => Buffer.alloc(0) };
  const keep = needles[0]!.length - 1;
  let pending = Buffer.alloc(0);

  // Replaces every needle in buf; returns the masked bytes and how many input bytes they cover.
  function mask(buf: Buffer, final: boolean): { out: Buffer; consumed: number } {
    const parts: Buffer[] = [];
    let from = 0;
    let i = 0;
    // Positions from which a needle could still start without being complete in buf are held back.
    const limit = final ? buf.length : Math.max(0, buf.length - keep);
    for (;;) {
      // The earliest occurrence of any needle (the longest where two start together).
      let at = -1;
      let length = 0;
      for (const n of needles) {
        const found = buf.indexOf(n, i);
        if (found !== -1 && found < limit && (at === -1 || found < at)) {
          at = found;
          length = n.length;
        }
      }
      if (at === -1) break;
      parts.push(buf.subarray(from, at), MASK);
      i = at + length;
      from = i;
    }
    const consumed = Math.max(from, limit);
    parts.push(buf.subarray(from, consumed));
    return { out: Buffer.concat(parts), consumed };
  }

  return {
    push(chunk) {
      const buf = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      const { out, consumed } = mask(buf, false);
      pending = Buffer.from(buf.subarray(consumed));
      return out;
    },
    flush() {
      const { out } = mask(pending, true);
      pending = Buffer.alloc(0);
      return out;
    },
  };
}
