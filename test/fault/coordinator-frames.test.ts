// Fault injection: an agent with a valid token floods the coordinator (its own process) with bad
// frames — not JSON, not an object, unknown types, broken schemas, binary, oversized, job
// messages before hello, and after hello messages about jobs it was never given (including the
// job another agent is running right now). Each such connection is closed with the documented
// code (protocol/src/close-codes.ts: BAD_FRAME 4400, TOO_LARGE 4413), and nothing else is
// affected: a real agent's deployment runs to `success` meanwhile with its exact output, that
// agent is never disconnected, and /healthz answers 200 throughout.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { CloseCode, encodeFrame, MAX_FRAME_BYTES, PROTOCOL_VERSION } from '../../protocol/src/index.ts';
import { connectPg } from '../helpers/database.ts';
import {
  type Closed,
  expectExactLog,
  faultCoordinator,
  launchAgent,
  logLines,
  numberedLines,
  RawAgent,
  sleep,
} from '../helpers/faults-coordinator.ts';

const fault = faultCoordinator({
  // 2 s of silence drops a connection: tolerant of a busy CI machine, far below the default.
  AGENT_HEARTBEAT_MS: '1000',
  AGENT_LEASE_MS: '5000',
  SCHEDULER_INTERVAL_MS: '100',
  // The flood is the point here: keep the log to warnings.
  LOG_LEVEL: 'warn',
});
const { agents, raws } = fault;

/** Polls /healthz (as a probe: no cookie) until stopped; every status and the slowest answer. */
function watchHealth(everyMs = 25) {
  const statuses: number[] = [];
  let slowestMs = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const started = Date.now();
      try {
        const res = await fetch(`${fault.coordinator.url}/healthz`);
        await res.arrayBuffer();
        statuses.push(res.status);
      } catch {
        statuses.push(0);
      }
      slowestMs = Math.max(slowestMs, Date.now() - started);
      await sleep(everyMs);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { statuses, slowestMs };
    },
  };
}

interface BadFrame {
  kind: string;
  /** Say hello (and get welcome) first. */
  afterHello: boolean;
  send(raw: RawAgent): void;
  expected: number;
}

const JOB = () => randomUUID();
const text = (kind: string, frame: string, expected: number = CloseCode.BAD_FRAME): BadFrame => ({
  kind,
  afterHello: false,
  send: (raw) => raw.sendRaw(frame),
  expected,
});
const message = (kind: string, make: () => Record<string, unknown>, afterHello: boolean): BadFrame => ({
  kind,
  afterHello,
  send: (raw) => raw.send(make()),
  expected: CloseCode.BAD_FRAME,
});

/** The 200 bad frames: each kind, round robin. `victimJob` is the job a real agent is running. */
function badFrames(victimJob: string): BadFrame[] {
  const helloFields = {
    protocolVersion: PROTOCOL_VERSION,
    agentVersion: 'x',
    hostname: 'h',
    labels: [],
    runningJobs: [],
  };
  const oversized = `{"type":"hello","pad":"${'x'.repeat(MAX_FRAME_BYTES + 512 * 1024)}"}`;
  const kinds: BadFrame[] = [
    text('not JSON', '{"type":'),
    text('not JSON (plain text)', 'hello coordinator'),
    text('not JSON (invalid UTF-8 as text)', '\u0000\u0001\uFFFD{'),
    text('not an object (array)', '[1,2,3]'),
    text('not an object (number)', '42'),
    text('not an object (null)', 'null'),
    text('no type', '{}'),
    message('unknown type', () => ({ type: 'rm -rf' }), false),
    message(
      'a coordinator message',
      () => ({ type: 'job.cancel', jobId: JOB(), reason: 'x', as: 'cancelled' }),
      false,
    ),
    message(
      'hello with a wrong schema',
      () => ({ type: 'hello', ...helloFields, protocolVersion: 'two' }),
      false,
    ),
    message('hello missing fields', () => ({ type: 'hello', protocolVersion: PROTOCOL_VERSION }), false),
    text(
      'step.output as JSON text (output is a binary frame)',
      JSON.stringify({ type: 'step.output', jobId: JOB(), step: 0, seq: 0, offset: 0, data: 'aGkK' }),
    ),
    message(
      'job.finished with an unknown status',
      () => ({ type: 'job.finished', jobId: JOB(), status: 'great' }),
      false,
    ),
    {
      kind: 'binary frame',
      afterHello: false,
      send: (raw) => raw.sendRaw(Buffer.from('{"type":"hello"}'), true),
      expected: CloseCode.BAD_FRAME,
    },
    {
      kind: 'binary step.output with a step out of range',
      afterHello: false,
      send: (raw) => {
        const frame = Buffer.from(
          encodeFrame({
            type: 'step.output',
            jobId: JOB(),
            step: 0,
            seq: 0,
            offset: 0,
            data: Buffer.from('x'),
          }),
        );
        frame.writeUInt32BE(0xffffffff, 17);
        raw.sendRaw(frame, true);
      },
      expected: CloseCode.BAD_FRAME,
    },
    text('oversized (1.5 MiB)', oversized, CloseCode.TOO_LARGE),
    message(
      'step.started before hello',
      () => ({ type: 'step.started', jobId: victimJob, step: 1, cmd: 'x' }),
      false,
    ),
    message(
      'job.finished before hello',
      () => ({ type: 'job.finished', jobId: victimJob, status: 'failed' }),
      false,
    ),
    // After welcome: messages about jobs this agent was never given.
    message('job.accepted for an unknown job', () => ({ type: 'job.accepted', jobId: JOB() }), true),
    message("job.accepted for another agent's job", () => ({ type: 'job.accepted', jobId: victimJob }), true),
    message(
      "step.started for another agent's job",
      () => ({ type: 'step.started', jobId: victimJob, step: 1, cmd: 'echo pwned' }),
      true,
    ),
    message(
      "step.output into another agent's job",
      () => ({
        type: 'step.output',
        jobId: victimJob,
        step: 1,
        seq: 0,
        offset: 0,
        data: Buffer.from('INJECTED\n'),
      }),
      true,
    ),
    message(
      "step.finished for another agent's job",
      () => ({ type: 'step.finished', jobId: victimJob, step: 1, exitCode: 1, signal: null, outputBytes: 0 }),
      true,
    ),
    message(
      "job.finished for another agent's job",
      () => ({ type: 'job.finished', jobId: victimJob, status: 'failed', reason: 'forged' }),
      true,
    ),
    message('hello twice', () => ({ type: 'hello', ...helloFields }), true),
  ];
  return Array.from({ length: 200 }, (_, i) => kinds[i % kinds.length]!);
}

/** One connection, one bad frame: how it was closed (or why it was not). */
async function sendBad(token: string, bad: BadFrame): Promise<{ kind: string; closed: Closed | string }> {
  const raw = new RawAgent(fault.coordinator.url, token);
  raws.push(raw);
  try {
    await raw.opened;
    if (bad.afterHello) {
      raw.hello();
      await raw.next('welcome', () => true, 10_000);
    }
    const before = raw.received.length;
    bad.send(raw);
    const closed = await Promise.race([raw.closed, sleep(10_000).then(() => 'not closed within 10 s')]);
    // Nothing is answered to a bad frame but the close.
    const answered = raw.received.slice(before).filter((m) => m.type !== 'welcome');
    if (answered.length > 0) return { kind: bad.kind, closed: `answered ${JSON.stringify(answered)}` };
    return { kind: bad.kind, closed };
  } catch (err) {
    return { kind: bad.kind, closed: `failed: ${(err as Error).message}` };
  } finally {
    raw.close();
  }
}

describe('a flood of 200 bad frames from an agent with a valid token', () => {
  it('closes each connection with its documented code while a real deployment succeeds untouched', async () => {
    const { token: steadyToken } = await fault.admin.registerAgent('steady', ['steady']);
    const steady = await launchAgent(fault.coordinator.url, steadyToken);
    agents.push(steady);
    // Flooders: several agents, so that connections after hello do not replace each other.
    const flooders = await Promise.all(
      ['flood-1', 'flood-2', 'flood-3', 'flood-4'].map((n) => fault.admin.registerAgent(n, ['flood'])),
    );
    await fault.admin.waitForOnline(['steady']);
    const { cmd, expected } = numberedLines(240, 50); // ~12 s: the flood fits well inside it
    const projectId = await fault.admin.createProject({
      name: 'steady',
      forge_url: fault.repo.url,
      commands: [cmd],
      target: { agents: { names: ['steady'] } },
    });
    const deployId = await fault.admin.deploy(projectId);
    await fault.admin.waitForOutput(deployId, cmd);
    const victimJob = await jobOf(deployId);

    const health = watchHealth();
    const floodStartedAt = Date.now();
    const frames = badFrames(victimJob);
    const results: Array<{ kind: string; expected: number; closed: Closed | string }> = [];
    // Before hello: many at once. After hello: one connection per flooder at a time.
    const early = frames.filter((f) => !f.afterHello);
    const late = frames.filter((f) => f.afterHello);
    const earlyRun = (async () => {
      for (let i = 0; i < early.length; i += 20) {
        const wave = early.slice(i, i + 20);
        const done = await Promise.all(
          wave.map((bad, j) => sendBad(flooders[j % flooders.length]!.token, bad)),
        );
        done.forEach((d, j) => results.push({ ...d, expected: wave[j]!.expected }));
      }
    })();
    const lateRuns = flooders.map(async (flooder, f) => {
      for (let i = f; i < late.length; i += flooders.length) {
        const d = await sendBad(flooder.token, late[i]!);
        results.push({ ...d, expected: late[i]!.expected });
      }
    });
    await Promise.all([earlyRun, ...lateRuns]);
    const floodEndedAt = Date.now();
    const during = await fault.admin.detail(deployId);
    const { statuses, slowestMs } = await health.stop();

    expect(results).toHaveLength(200);
    const wrong = results
      .filter((r) => typeof r.closed === 'string' || r.closed.code !== r.expected)
      .map((r) => `${r.kind}: expected ${r.expected}, got ${JSON.stringify(r.closed)}`);
    expect(wrong).toEqual([]);
    // The flood happened while the deployment ran, and did not end it.
    expect(during.deployment.status, 'the flood should overlap the deployment').toBe('running');
    expect(statuses.length).toBeGreaterThan(10);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);

    const detail = await fault.admin.waitForEnd(deployId, 30_000);
    expect(detail.deployment.status, JSON.stringify(detail.deployment)).toBe('success');
    await expectExactLog(fault.db.url, detail, cmd, expected);
    // The real agent never lost its connection, and the coordinator is still alive.
    const drops = [
      ...logLines(steady, 'disconnected from the coordinator').map((l) => `agent: ${String(l.reason)}`),
      ...logLines(fault.coordinator.proc, 'agent silent for a heartbeat: dropping its connection').map(
        (l) => `coordinator: dropped ${String(l.agent)} as silent`,
      ),
    ];
    expect(logLines(steady, 'connected'), drops.join('\n')).toHaveLength(1);
    expect(fault.coordinator.proc.child.exitCode).toBeNull();
    expect((await fetch(`${fault.coordinator.url}/healthz`)).status).toBe(200);
    console.log(
      `flood: 200 bad frames in ${floodEndedAt - floodStartedAt} ms, ` +
        `${statuses.length} health checks, slowest ${slowestMs} ms`,
    );
  }, 90_000);

  it('a frame past the WebSocket limit (3 MiB) is also closed with TOO_LARGE (4413), as documented', async () => {
    const { token } = await fault.admin.registerAgent('huge', ['huge']);
    const raw = new RawAgent(fault.coordinator.url, token);
    raws.push(raw);
    await raw.opened;
    raw.sendRaw(`{"type":"hello","pad":"${'x'.repeat(3 * MAX_FRAME_BYTES)}"}`);
    const closed = await Promise.race([raw.closed, sleep(10_000).then(() => null)]);
    expect(closed).not.toBeNull();
    expect(closed!.code, `closed with ${closed!.code} ${closed!.reason}`).toBe(CloseCode.TOO_LARGE);
    expect((await fetch(`${fault.coordinator.url}/healthz`)).status).toBe(200);
  });

  it('a 1 MiB frame that breaks its schema does not stall the coordinator (/healthz within 500 ms)', async () => {
    const { token } = await fault.admin.registerAgent('staller', ['staller']);
    const head = `{"type":"hello","protocolVersion":${PROTOCOL_VERSION},"agentVersion":"x","hostname":"h","runningJobs":[],"labels":[`;
    const count = Math.floor((MAX_FRAME_BYTES - head.length - 2) / 4);
    const frame = `${head}${Array.from({ length: count }, () => '"a"').join(',')}]}`;
    const raw = new RawAgent(fault.coordinator.url, token);
    raws.push(raw);
    await raw.opened;
    const health = watchHealth(10);
    await sleep(200);
    raw.sendRaw(frame);
    const closed = await Promise.race([raw.closed, sleep(10_000).then(() => null)]);
    await sleep(200);
    const { statuses, slowestMs } = await health.stop();
    expect(closed?.code).toBe(CloseCode.BAD_FRAME);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    expect(slowestMs, 'the event loop was blocked while one frame was judged').toBeLessThan(500);
  });
});

async function jobOf(deployId: string): Promise<string> {
  const client = await connectPg(fault.db.url);
  try {
    const { rows } = await client.query('select id from deployment_jobs where deployment_id = $1', [
      deployId,
    ]);
    expect(rows).toHaveLength(1);
    return rows[0].id as string;
  } finally {
    await client.end();
  }
}
