// FinishedLogs: the finished deployments' logs GET /deploy/:id keeps, bounded by size.
import { describe, expect, it } from 'vitest';
import { FinishedLogs } from '../../coordinator/src/modules/deployment/finished-logs.ts';

const text = (n: number) => 'x'.repeat(n); // 2 bytes a character as counted

describe('FinishedLogs', () => {
  it('gives back what was kept, and nothing for what was not', () => {
    const kept = new FinishedLogs(1000);
    kept.set('a', '[1]');
    expect(kept.get('a')).toBe('[1]');
    expect(kept.get('b')).toBeUndefined();
  });

  it('lets the least recently read go first when over its size', () => {
    const kept = new FinishedLogs(1000); // room for two of 200 characters, not three
    kept.set('a', text(200));
    kept.set('b', text(200));
    expect(kept.get('a')).toBeDefined(); // now b is the least recent
    kept.set('c', text(200));
    expect(kept.get('b')).toBeUndefined();
    expect(kept.get('a')).toBeDefined();
    expect(kept.get('c')).toBeDefined();
    expect(kept.size).toBe(2);
  });

  it('keeps nothing larger than its whole size, and drops nothing for it', () => {
    const kept = new FinishedLogs(1000);
    kept.set('a', text(100));
    kept.set('huge', text(501));
    expect(kept.get('huge')).toBeUndefined();
    expect(kept.get('a')).toBeDefined();
  });

  it('counts a replaced text once', () => {
    const kept = new FinishedLogs(1000);
    kept.set('a', text(200));
    kept.set('a', text(200));
    kept.set('b', text(200));
    expect(kept.size).toBe(2);
  });
});
