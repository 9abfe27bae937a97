// The agent's reconnect rules: which ends are fatal, the backoff, and where it connects.
import { CloseCode } from '@deckhand/protocol';
import { describe, expect, it } from 'vitest';
import { agentSocketUrl } from '../../agent/src/connection/coordinator-url.ts';
import { Backoff, classifyDisconnect } from '../../agent/src/connection/retryable.ts';
import { runProcess } from '../../agent/src/executor/process.ts';

describe('retryable or fatal', () => {
  it.each([
    [{ kind: 'http', status: 401 } as const],
    [{ kind: 'http', status: 403 } as const],
    [{ kind: 'closed', code: CloseCode.UNAUTHORIZED, reason: '' } as const],
    [
      {
        kind: 'closed',
        code: CloseCode.VERSION_MISMATCH,
        reason: '',
        rejectReason: 'upgrade the agent',
      } as const,
    ],
  ])('%o is fatal, with what to do', (d) => {
    const verdict = classifyDisconnect(d);
    expect(verdict.retry).toBe(false);
    if (!verdict.retry) expect(verdict.message).toMatch(/Register the agent again|Upgrade|upgrade/);
  });

  it.each([
    [{ kind: 'http', status: 404 } as const],
    [{ kind: 'http', status: 503 } as const],
    [{ kind: 'closed', code: CloseCode.GOING_AWAY, reason: '' } as const],
    [{ kind: 'closed', code: 1006, reason: 'connect ECONNREFUSED' } as const],
    [{ kind: 'closed', code: CloseCode.BAD_FRAME, reason: 'x' } as const],
    [{ kind: 'local', reason: 'no welcome within 10000 ms' } as const],
  ])('%o is retried', (d) => {
    expect(classifyDisconnect(d).retry).toBe(true);
  });

  it('retries a replaced connection only slowly', () => {
    expect(classifyDisconnect({ kind: 'closed', code: CloseCode.REPLACED, reason: '' })).toMatchObject({
      retry: true,
      minDelayMs: 30_000,
    });
  });
});

describe('backoff', () => {
  it('doubles from 500 ms up to 30 s with full jitter, and starts over after a reset', () => {
    const top = new Backoff({ random: () => 0.999999 });
    const ceilings = Array.from({ length: 10 }, () => top.next());
    expect(ceilings).toEqual([499, 999, 1999, 3999, 7999, 15999, 29999, 29999, 29999, 29999]);
    top.reset();
    expect(top.next()).toBe(499);
    expect(new Backoff({ random: () => 0 }).next()).toBe(0);
  });

  it('retries a coordinator that went away after 0.5–1.5 s, steadily, for 20 s, then backs off again', () => {
    expect(classifyDisconnect({ kind: 'closed', code: CloseCode.GOING_AWAY, reason: 'x' })).toMatchObject({
      retry: true,
      goingAway: true,
    });
    expect(classifyDisconnect({ kind: 'closed', code: 1006, reason: '' })).not.toHaveProperty('goingAway');

    let now = 1_000;
    let random = 0.999999;
    const backoff = new Backoff({ random: () => random, now: () => now });
    // Some failures first: the exponential ceiling has grown.
    for (let i = 0; i < 5; i++) backoff.next();
    expect(backoff.next()).toBe(15_999);

    backoff.goingAway();
    // Every retry within the window, however many failed, lands in [500, 1500).
    const delays: number[] = [];
    for (let i = 0; i < 12; i++) {
      delays.push(backoff.next());
      now += 1_000;
    }
    expect(delays).toEqual(Array(12).fill(1_499));
    random = 0;
    expect(backoff.next()).toBe(500);

    // Past the window: exponential again, from the base.
    now += 20_000;
    random = 0.999999;
    expect([backoff.next(), backoff.next(), backoff.next()]).toEqual([499, 999, 1999]);

    // A welcome ends the window too.
    backoff.goingAway();
    backoff.reset();
    expect(backoff.next()).toBe(499);
  });
});

describe('the socket URL', () => {
  it.each([
    ['http://127.0.0.1:3000', 'ws://127.0.0.1:3000/agent/ws'],
    ['https://deploy.example.com/', 'wss://deploy.example.com/agent/ws'],
    ['https://example.com/deckhand/?x=1', 'wss://example.com/deckhand/agent/ws'],
    ['wss://example.com/agent/ws', 'wss://example.com/agent/ws'],
  ])('%s → %s', (base, expected) => {
    expect(agentSocketUrl(new URL(base)).href).toBe(expected);
  });
});

describe('a step that cannot start', () => {
  it('ends with an error instead of throwing', async () => {
    const proc = runProcess('/nonexistent/bash', ['-c', 'true'], { cwd: '/', env: {}, onOutput: () => {} });
    expect(await proc.result).toMatchObject({
      exitCode: null,
      signal: null,
      error: expect.stringMatching(/ENOENT/),
    });
  });
});
