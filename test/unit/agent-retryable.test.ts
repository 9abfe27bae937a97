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
