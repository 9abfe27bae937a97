// The agent daemon's connection: reconnecting without losing output, the fatal refusals (exit 2),
// bad frames, dead connections and a graceful stop. The real `deckhand-agent` process against a
// fake coordinator (a real WebSocket server).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CloseCode } from '@deckhand/protocol';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createRepo,
  FakeCoordinator,
  type FakeCoordinatorOptions,
  jobAssign,
  startAgent,
  type TestAgent,
  TEST_TOKEN,
} from '../helpers/fake-coordinator.ts';

let root: string;
let url: string;
let commit: string;
const running: { fake: FakeCoordinator; agent: TestAgent }[] = [];

beforeAll(() => {
  root = mkdtempSync(path.join(os.tmpdir(), 'deckhand-agent-conn-'));
  const repo = createRepo(path.join(root, 'repo'));
  url = repo.url;
  commit = repo.commit({ 'file.txt': 'content\n' });
});

afterEach(async () => {
  for (const { fake, agent } of running.splice(0)) {
    await agent.stop();
    await fake.close();
  }
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

async function start(
  fakeOpts: Partial<FakeCoordinatorOptions> = {},
  agentOpts: { token?: string } = {},
): Promise<{ fake: FakeCoordinator; agent: TestAgent }> {
  const fake = await FakeCoordinator.start({ token: TEST_TOKEN, ...fakeOpts });
  const agent = startAgent(fake, mkdtempSync(path.join(root, 'agent-')), agentOpts);
  running.push({ fake, agent });
  return { fake, agent };
}

describe('reconnecting', () => {
  it('says hello again after a close, then re-sends unacknowledged output and the outbox in order', async () => {
    const { fake } = await start({ autoAck: false });
    await fake.waitFor('hello');
    // Step 2 prints, then waits for the test's go-ahead, so it is surely running at the reconnect.
    const go = path.join(root, 'go-ahead');
    const job = jobAssign({
      url,
      commit,
      env: { GO: go },
      commands: [
        'for i in $(seq 1 10); do echo "one $i"; sleep 0.05; done',
        'for i in $(seq 1 40); do echo "two $i"; sleep 0.02; done; while [ ! -e "$GO" ]; do sleep 0.05; done',
      ],
    });
    fake.send(job);
    // Acknowledge step 1's first chunk, let a few more go out unacknowledged, then drop the connection.
    const first = await fake.waitFor('step.output', (m) => m.jobId === job.jobId && m.step === 1);
    const acked = first.offset + first.data.length;
    fake.send({ type: 'output.ack', jobId: job.jobId, step: 1, offset: acked });
    await fake.until(() => fake.output(job.jobId, 1).length > acked + 10, 'more output');
    // The coordinator goes away and stays away for a while (step 1 ends, step 2 starts meanwhile).
    fake.refuseUpgrades(503);
    fake.closeConnection(CloseCode.GOING_AWAY, 'restarting');
    await fake.until(() => fake.closes.length === 1, 'the close');
    // After GOING_AWAY the agent retries within 0.5–1.5 s, and keeps retrying while refused.
    await fake.until(() => fake.refusedUpgrades.length >= 2, 'two refused reconnects');
    fake.acceptUpgrades();

    await fake.until(() => fake.messages('hello', 1).length === 1, 'hello on a second connection');
    const hello = fake.messages('hello', 1)[0]!;
    expect(hello.runningJobs).toEqual([{ jobId: job.jobId, step: 2, offset: expect.any(Number) }]);
    writeFileSync(go, '');
    await fake.waitFor('job.finished', (m) => m.jobId === job.jobId);

    // Nothing lost: both steps complete, byte for byte.
    const lines = (name: string, n: number) =>
      Array.from({ length: n }, (_, i) => `${name} ${i + 1}\n`).join('');
    expect(fake.output(job.jobId, 1).toString()).toBe(lines('one', 10));
    expect(fake.output(job.jobId, 2).toString()).toBe(lines('two', 40));
    expect(fake.messages('job.finished')).toEqual([
      { type: 'job.finished', jobId: job.jobId, status: 'success' },
    ]);

    // On the new connection: hello first, then what the old connection may have lost, steps in
    // order (all of the checkout's output and its step.finished again — the job has no job.ack
    // yet —, step 1's output from the acknowledged offset, contiguous), then what waited in the
    // outbox (step 1's end, step 2) in order.
    const second = fake.received.filter((r) => r.conn === 1).map((r) => r.message);
    expect(second[0]!.type).toBe('hello');
    const labels = second
      .slice(1)
      .map((m) =>
        m.type === 'step.output' ? `output ${m.step}` : `${m.type} ${'step' in m ? m.step : ''}`.trim(),
      );
    const collapsed = labels.filter((l, i) => l !== labels[i - 1]);
    expect(collapsed).toEqual([
      'output 0',
      'step.finished 0',
      'output 1',
      'step.finished 1',
      'step.started 2',
      'output 2',
      'step.finished 2',
      'job.finished',
    ]);
    const resent = second.filter((m) => m.type === 'step.output' && m.step === 1);
    let offset = acked;
    for (const m of resent) {
      if (m.type !== 'step.output') continue;
      expect(m.offset).toBe(offset);
      offset += m.data.length;
    }
    expect(offset).toBe(lines('one', 10).length);
  });

  it('detects a silent coordinator (no pings for twice the heartbeat) and reconnects', async () => {
    const { fake } = await start({ heartbeatMs: 200, ping: false });
    await fake.waitFor('hello');
    await fake.until(
      () => fake.connections >= 2 && fake.messages('hello').length >= 2,
      'a second hello',
      5_000,
    );
    expect(fake.closes[0]!.code).toBe(1006); // terminated, no close handshake
  });
});

describe('refusals that stop the agent', () => {
  it('exits with code 2 when the token is refused on the upgrade (HTTP 401)', async () => {
    const { fake, agent } = await start({}, { token: 'dha_wrong' });
    const { code } = await agent.exited;
    expect(code).toBe(2);
    expect(agent.output()).toMatch(/refused the agent token \(HTTP 401\).*Register the agent again/);
    expect(fake.refusedUpgrades).toEqual([401]); // tried once, never again
  });

  it('exits with code 2 on a version mismatch, passing on the coordinator’s reason', async () => {
    const { fake, agent } = await start({
      onHello: () => ({
        reject: 'coordinator speaks protocol 2: upgrade the agent',
        code: CloseCode.VERSION_MISMATCH,
      }),
    });
    const { code } = await agent.exited;
    expect(code).toBe(2);
    expect(agent.output()).toContain('coordinator speaks protocol 2: upgrade the agent');
    expect(fake.messages('hello')).toHaveLength(1);
  });

  it('exits with code 2 when the token is revoked on a live connection (UNAUTHORIZED)', async () => {
    const { fake, agent } = await start();
    await fake.waitFor('hello');
    await new Promise((r) => setTimeout(r, 100));
    fake.closeConnection(CloseCode.UNAUTHORIZED, 'token revoked');
    expect((await agent.exited).code).toBe(2);
    expect(agent.output()).toMatch(/revoked/);
  });
});

describe('bad frames from the coordinator', () => {
  it('closes that connection with BAD_FRAME, reconnects, and keeps working', async () => {
    const { fake, agent } = await start({ autoAck: true });
    await fake.waitFor('hello');
    await new Promise((r) => setTimeout(r, 100));
    fake.sendRaw('{"type":"job.assign","jobId":"not-a-uuid"');
    await fake.until(() => fake.closes.length === 1, 'the close');
    expect(fake.closes[0]).toMatchObject({ code: CloseCode.BAD_FRAME });
    await fake.until(() => fake.messages('hello').length === 2, 'a second hello');
    await new Promise((r) => setTimeout(r, 100));
    fake.send({ type: 'output.ack', jobId: 'x', step: 0, offset: 0 } as never); // schema breach: not a uuid
    await fake.until(() => fake.closes.length === 2, 'the second close');
    expect(fake.closes[1]).toMatchObject({ code: CloseCode.BAD_FRAME });
    await fake.until(() => fake.messages('hello').length === 3, 'a third hello');
    await new Promise((r) => setTimeout(r, 100));
    const job = jobAssign({ url, commit, commands: ['echo still here'] });
    fake.send(job);
    const finished = await fake.waitFor('job.finished', (m) => m.jobId === job.jobId);
    expect(finished.status).toBe('success');
    expect(agent.child.exitCode).toBeNull();
  });
});

describe('stopping', () => {
  it('on SIGTERM cancels running jobs, reports them, closes normally and exits 0', async () => {
    const { fake, agent } = await start({ autoAck: true });
    await fake.waitFor('hello');
    await new Promise((r) => setTimeout(r, 100));
    const job = jobAssign({ url, commit, commands: ['echo started; sleep 600'] });
    fake.send(job);
    await fake.until(() => fake.output(job.jobId, 1).toString() === 'started\n', 'the command');
    agent.child.kill('SIGTERM');
    expect((await agent.exited).code).toBe(0);
    expect(fake.messages('job.finished')).toEqual([
      { type: 'job.finished', jobId: job.jobId, status: 'cancelled', reason: 'the agent received SIGTERM' },
    ]);
    await fake.until(() => fake.closes.length === 1, 'the close');
    expect(fake.closes[0]!.code).toBe(CloseCode.NORMAL);
  });
});
