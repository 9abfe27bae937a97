// The agent⇄coordinator contract: every frame validated in both directions, bad frames answered
// with a result (never a throw), and the step plan every runner shares.
import { describe, expect, it } from 'vitest';
import {
  CloseCode,
  decodeAgentFrame,
  decodeCoordinatorFrame,
  encodeFrame,
  MAX_CHUNK_BYTES,
  MAX_FRAME_BYTES,
  planSteps,
  runPlan,
  type StepResult,
} from '../../protocol/src/index.ts';

const JOB = '0b7c6a8e-2f4d-4a7e-9c1b-5d3e2f1a0b9c';

describe('decoding frames from an agent', () => {
  it('accepts each valid message', () => {
    const frames = [
      {
        type: 'hello',
        protocolVersion: 1,
        agentVersion: '0.1.0',
        hostname: 'web-1',
        labels: ['web'],
        runningJobs: [],
      },
      { type: 'job.accepted', jobId: JOB },
      { type: 'step.started', jobId: JOB, step: 0, cmd: 'git checkout --force abc' },
      {
        type: 'step.output',
        jobId: JOB,
        step: 1,
        seq: 0,
        offset: 0,
        data: Buffer.from('hi\n'),
      },
      { type: 'step.finished', jobId: JOB, step: 1, exitCode: 0, signal: null, outputBytes: 3 },
      { type: 'job.finished', jobId: JOB, status: 'success' },
    ];
    for (const frame of frames) {
      const encoded = encodeFrame(frame as never);
      if (frame.type === 'step.output') {
        // Output travels as a binary frame (header + raw bytes), never as JSON.
        expect(Buffer.isBuffer(encoded)).toBe(true);
        expect(decodeAgentFrame(encoded, true)).toEqual({ ok: true, message: frame });
        continue;
      }
      expect(decodeAgentFrame(JSON.stringify(frame))).toEqual({ ok: true, message: frame });
      expect(decodeAgentFrame(Buffer.from(encoded))).toEqual({ ok: true, message: frame });
    }
  });

  it.each([
    ['not JSON', '{"type":', 'frame is not valid JSON'],
    ['not an object', '[1,2]', 'frame is not a JSON object'],
    ['null', 'null', 'frame is not a JSON object'],
    ['no type', '{}', 'unknown message type undefined'],
    ['an unknown type', '{"type":"rm -rf"}', 'unknown message type "rm -rf"'],
    [
      'a coordinator message',
      JSON.stringify({ type: 'job.cancel', jobId: JOB, reason: 'x' }),
      'unknown message type "job.cancel"',
    ],
    [
      'a bad id',
      JSON.stringify({ type: 'job.accepted', jobId: 'nope' }),
      'job.accepted: jobId must match format "uuid"',
    ],
    [
      'step.output as JSON text (it is a binary frame)',
      JSON.stringify({ type: 'step.output', jobId: JOB, step: 0, seq: 0, offset: 0, data: '' }),
      'unknown message type "step.output"',
    ],
    [
      'a negative offset',
      JSON.stringify({ type: 'step.started', jobId: JOB, step: -1, cmd: 'x' }),
      'step.started: step',
    ],
    [
      'an unknown job result',
      JSON.stringify({ type: 'job.finished', jobId: JOB, status: 'great' }),
      'job.finished: status',
    ],
  ])('refuses %s with BAD_FRAME and a reason', (_name, raw, error) => {
    const result = decodeAgentFrame(raw);
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.code).toBe(CloseCode.BAD_FRAME);
      expect(result.error).toContain(error);
    }
  });

  it('refuses a frame past the size limit with TOO_LARGE', () => {
    const result = decodeAgentFrame(`{"type":"hello","x":"${'a'.repeat(MAX_FRAME_BYTES)}"}`);
    expect(result).toMatchObject({ ok: false, code: CloseCode.TOO_LARGE });
  });

  it('refuses binary that is not a buffer or string', () => {
    expect(decodeAgentFrame(42)).toMatchObject({ ok: false, code: CloseCode.BAD_FRAME });
  });

  describe('binary step.output frames', () => {
    const output = {
      type: 'step.output' as const,
      jobId: JOB,
      step: 3,
      seq: 7,
      offset: 2 ** 40,
      data: Buffer.from('ok\n'),
    };

    it('carry the header fields and the raw bytes', () => {
      const frame = encodeFrame(output) as Buffer;
      expect(frame.length).toBe(33 + 3);
      expect(frame.subarray(33).toString()).toBe('ok\n');
      expect(decodeAgentFrame(frame, true)).toEqual({ ok: true, message: output });
    });

    it.each([
      ['a frame shorter than its header', (f: Buffer) => f.subarray(0, 20), 'not a step.output frame'],
      [
        'an unknown frame kind',
        (f: Buffer) => Buffer.concat([Buffer.from([9]), f.subarray(1)]),
        'not a step.output frame',
      ],
      ['a step out of range', (f: Buffer) => (f.writeUInt32BE(10_001, 17), f), 'step is out of range'],
      [
        'an offset past 2^53',
        (f: Buffer) => (f.writeBigUInt64BE(2n ** 60n, 25), f),
        'offset is out of range',
      ],
    ])('refuses %s with BAD_FRAME', (_name, spoil, error) => {
      const result = decodeAgentFrame(spoil(Buffer.from(encodeFrame(output) as Buffer)), true);
      expect(result).toMatchObject({ ok: false, code: CloseCode.BAD_FRAME });
      if (!result.ok) expect(result.error).toContain(error);
    });

    it('refuses more than MAX_CHUNK_BYTES of output with TOO_LARGE', () => {
      const big = encodeFrame({ ...output, data: Buffer.alloc(MAX_CHUNK_BYTES + 1) }) as Buffer;
      expect(decodeAgentFrame(big, true)).toMatchObject({ ok: false, code: CloseCode.TOO_LARGE });
    });
  });
});

describe('decoding frames from the coordinator', () => {
  it('accepts a job assignment and refuses an agent message', () => {
    const assign = {
      type: 'job.assign',
      jobId: JOB,
      deploymentId: JOB,
      project: { id: JOB, name: 'web' },
      repository: {
        url: '/srv/git/web.git',
        branch: 'main',
        commit: 'a'.repeat(40),
        sshKey: null,
        knownHosts: null,
      },
      commands: ['make'],
      env: { A: 'b' },
      kind: 'deploy',
      rollbackTo: null,
      releases: null,
      commandTimeoutMs: null,
      masks: [],
    };
    expect(decodeCoordinatorFrame(JSON.stringify(assign))).toEqual({ ok: true, message: assign });
    expect(decodeCoordinatorFrame(JSON.stringify({ type: 'job.accepted', jobId: JOB }))).toMatchObject({
      ok: false,
    });
    expect(
      decodeCoordinatorFrame(
        JSON.stringify({ ...assign, repository: { ...assign.repository, commit: 'main' } }),
      ),
    ).toMatchObject({
      ok: false,
    });
  });
});

describe('the step plan', () => {
  const plan = planSteps({ commit: 'c'.repeat(40), commands: ['npm ci', 'npm test', 'npm run deploy'] });

  it('checks out the commit first, then runs each command in order', () => {
    expect(plan.map((s) => [s.index, s.kind, s.cmd])).toEqual([
      [0, 'checkout', `git checkout --force --detach ${'c'.repeat(40)}`],
      [1, 'command', 'npm ci'],
      [2, 'command', 'npm test'],
      [3, 'command', 'npm run deploy'],
    ]);
  });

  it('stops at the first failure and skips the rest', async () => {
    const ran: number[] = [];
    const outcome = await runPlan(plan, async (step): Promise<StepResult> => {
      ran.push(step.index);
      return step.index === 2 ? { exitCode: 3, signal: null } : { exitCode: 0, signal: null };
    });
    expect(ran).toEqual([0, 1, 2]);
    expect(outcome).toMatchObject({ status: 'failed', reason: 'command 2 (npm test) exited with code 3' });
    if (outcome.status === 'failed') expect(outcome.skipped.map((s) => s.index)).toEqual([3]);
  });

  it('treats a signal or a start error as a failure', async () => {
    const killed = await runPlan(plan, async () => ({ exitCode: null, signal: 'SIGKILL' }));
    expect(killed).toMatchObject({ status: 'failed', reason: 'the checkout was killed by SIGKILL' });
    const broken = await runPlan(plan, async () => ({ exitCode: 0, signal: null, error: 'git not found' }));
    expect(broken).toMatchObject({ status: 'failed', reason: 'the checkout failed: git not found' });
  });

  it('succeeds when every step exits 0, resuming from a given step', async () => {
    const ran: number[] = [];
    const outcome = await runPlan(
      plan,
      async (s) => {
        ran.push(s.index);
        return { exitCode: 0, signal: null };
      },
      { from: 2 },
    );
    expect(outcome).toEqual({ status: 'success' });
    expect(ran).toEqual([2, 3]);
  });
});
