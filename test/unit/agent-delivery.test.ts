// Protocol v2 on the agent, across connections: ends re-sent until `job.ack`, jobs kept through
// short disconnects and abandoned after `abandonAfterMs`, and unacknowledged output bounded in
// memory (spool files, backpressure). The real agent process against a fake coordinator.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createRepo,
  FakeCoordinator,
  type FakeCoordinatorOptions,
  jobAssign,
  processAlive,
  startAgent,
  type TestAgent,
  TEST_TOKEN,
} from '../helpers/fake-coordinator.ts';

let root: string;
let url: string;
let commit: string;
const running: { fake: FakeCoordinator; agent: TestAgent }[] = [];

beforeAll(() => {
  root = mkdtempSync(path.join(os.tmpdir(), 'deckhand-agent-delivery-'));
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
  args: string[] = [],
): Promise<{ fake: FakeCoordinator; agent: TestAgent }> {
  const fake = await FakeCoordinator.start({ token: TEST_TOKEN, autoAck: true, ...fakeOpts });
  const agent = startAgent(fake, mkdtempSync(path.join(root, 'agent-')), { args });
  running.push({ fake, agent });
  await fake.waitFor('hello').catch((err: Error) => {
    throw new Error(`${err.message}\n${agent.output()}`);
  });
  await new Promise((r) => setTimeout(r, 100)); // the welcome
  return { fake, agent };
}

/** Non-output messages about a job on one connection, as `type step`. */
function trace(fake: FakeCoordinator, jobId: string, conn: number): string[] {
  return fake.received
    .filter((r) => r.conn === conn)
    .map((r) => r.message)
    .filter((m) => 'jobId' in m && m.jobId === jobId && m.type !== 'step.output')
    .map((m) => ('step' in m ? `${m.type} ${m.step}` : m.type));
}

function vmRssBytes(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('VmRSS:'))!;
  return Number(/(\d+)/.exec(line)![1]) * 1024;
}

describe('job ends until job.ack', () => {
  it('re-sends the ends of a job whose job.ack never came after a reconnect, and forgets it after job.ack', async () => {
    // The coordinator drops the connection right after job.finished arrives, without acknowledging it.
    let dropped = false;
    const { fake } = await start({
      ackJobs: false,
      onFrame: (m) => {
        if (m.type === 'job.finished' && !dropped) {
          dropped = true;
          return 'drop';
        }
      },
    });
    const job = jobAssign({ url, commit, commands: ['echo one', 'echo two'] });
    fake.send(job);
    await fake.until(() => fake.messages('hello').length === 2, 'a second hello');
    // Still held: listed in hello, on its last step with all of its output.
    expect(fake.messages('hello', 1)[0]!.runningJobs).toEqual([{ jobId: job.jobId, step: 2, offset: 4 }]);
    await fake.until(() => trace(fake, job.jobId, 1).includes('job.finished'), 'job.finished again');
    // Every step's end again, in order, then the job's; the output was acknowledged, so none of it.
    expect(trace(fake, job.jobId, 1)).toEqual([
      'step.finished 0',
      'step.finished 1',
      'step.finished 2',
      'job.finished',
    ]);
    expect(fake.messages('step.output', 1)).toEqual([]);
    expect(fake.messages('job.finished')).toEqual([
      { type: 'job.finished', jobId: job.jobId, status: 'success' },
      { type: 'job.finished', jobId: job.jobId, status: 'success' },
    ]);

    fake.send({ type: 'job.ack', jobId: job.jobId });
    await new Promise((r) => setTimeout(r, 200));
    fake.dropConnection();
    await fake.until(() => fake.messages('hello').length === 3, 'a third hello');
    expect(fake.messages('hello', 2)[0]!.runningJobs).toEqual([]);
    await new Promise((r) => setTimeout(r, 300));
    expect(fake.received.filter((r) => r.conn === 2).map((r) => r.message.type)).toEqual(['hello']);
  });
});

describe('leases', () => {
  it('keeps a job running through a disconnect shorter than abandonAfterMs and delivers all of it', async () => {
    const { fake } = await start({ abandonAfterMs: 4_000 });
    const job = jobAssign({
      url,
      commit,
      commands: ['for i in $(seq 1 40); do echo "tick $i"; sleep 0.05; done'],
    });
    fake.send(job);
    await fake.until(() => fake.output(job.jobId, 1).includes('tick 5'), 'some ticks');
    fake.refuseUpgrades(503);
    fake.dropConnection();
    await new Promise((r) => setTimeout(r, 1_000));
    fake.acceptUpgrades();
    const finished = await fake.waitFor('job.finished', (m) => m.jobId === job.jobId);
    expect(finished).toEqual({ type: 'job.finished', jobId: job.jobId, status: 'success' });
    expect(fake.output(job.jobId, 1).toString()).toBe(
      Array.from({ length: 40 }, (_, i) => `tick ${i + 1}\n`).join(''),
    );
  });

  it('cut off for longer than abandonAfterMs: kills the process group and reports abandoned after reconnecting', async () => {
    const { fake } = await start({ abandonAfterMs: 1_500 });
    const job = jobAssign({
      url,
      commit,
      commands: ['trap "" TERM; sleep 600 & echo "pids $$ $!"; wait', 'echo never'],
    });
    fake.send(job);
    await fake.until(() => /pids \d+ \d+/.test(fake.output(job.jobId, 1).toString()), 'the pids');
    const [, shell, background] = /pids (\d+) (\d+)/.exec(fake.output(job.jobId, 1).toString())!.map(Number);
    fake.refuseUpgrades(503);
    fake.dropConnection();
    const droppedAt = Date.now();
    await new Promise((r) => setTimeout(r, 1_000));
    expect(processAlive(shell!) && processAlive(background!)).toBe(true); // not yet
    // abandonAfterMs, then TERM (ignored), the 500 ms grace and KILL to the whole group.
    await fake.until(() => !processAlive(shell!) && !processAlive(background!), 'the group to die', 5_000);
    expect(Date.now() - droppedAt).toBeGreaterThanOrEqual(1_500);
    expect(fake.messages('job.finished')).toEqual([]);

    fake.acceptUpgrades();
    const finished = await fake.waitFor('job.finished', (m) => m.jobId === job.jobId, 20_000);
    const reason = 'cut off from the coordinator for more than 1.5 s';
    expect(finished).toEqual({ type: 'job.finished', jobId: job.jobId, status: 'abandoned', reason });
    expect(fake.received.find((r) => r.message === finished)!.conn).toBeGreaterThanOrEqual(1);
    expect(fake.messages('step.finished').find((m) => m.jobId === job.jobId && m.step === 1)).toMatchObject({
      signal: 'SIGKILL',
      error: `abandoned: ${reason}`,
    });
    expect(
      fake
        .messages('step.started')
        .filter((m) => m.jobId === job.jobId)
        .map((m) => m.step),
    ).toEqual([0, 1]);
  });
});

describe('unacknowledged output', () => {
  it('spools past the memory bound, pauses the command past the unacked bound, and delivers every byte once', async () => {
    const memory = 2 * 1024 * 1024;
    const maxUnacked = 8 * 1024 * 1024;
    const { fake, agent } = await start({ autoAck: false, ackJobs: true }, [
      '--spool-memory-bytes',
      String(memory),
      '--max-unacked-bytes',
      String(maxUnacked),
    ]);
    const lines = 2_000_000; // 15 bytes each: 30 MB
    const job = jobAssign({ url, commit, commands: [`seq -f 'line %09.0f' 1 ${lines}`] });
    const spool = path.join(agent.workDir, '.deckhand', 'spool');
    let maxRss = 0;
    const sampler = setInterval(() => {
      maxRss = Math.max(maxRss, vmRssBytes(agent.child.pid!));
    }, 50);
    try {
      fake.send(job);
      // Nothing is acknowledged: the agent sends up to the unacked bound and stops there.
      await fake.until(() => fake.stored(job.jobId, 1) >= maxUnacked - 512 * 1024, 'the first 8 MiB', 20_000);
      await new Promise((r) => setTimeout(r, 1_000));
      const held = fake.stored(job.jobId, 1);
      // The pause comes at most one full frame (256 KiB) and one pipe read (64 KiB) past the bound.
      expect(held).toBeLessThanOrEqual(maxUnacked + 256 * 1024 + 64 * 1024);
      expect(fake.messages('step.finished').filter((m) => m.step === 1)).toEqual([]);
      expect(readdirSync(spool).length).toBeGreaterThan(0); // past 2 MiB it is on disk

      // Acknowledging lets it go on.
      const acker = setInterval(() => fake.ackStored(), 50);
      try {
        const finished = await fake.waitFor('job.finished', (m) => m.jobId === job.jobId, 30_000);
        expect(finished.status).toBe('success');
        await fake.until(
          () => existsSync(spool) && readdirSync(spool).length === 0,
          'the spool emptied',
          5_000,
        );
      } finally {
        clearInterval(acker);
      }
    } finally {
      clearInterval(sampler);
    }
    // Every byte exactly once, in order: one connection, contiguous offsets, no repeats.
    const frames = fake.messages('step.output').filter((m) => m.jobId === job.jobId && m.step === 1);
    let offset = 0;
    for (const f of frames) {
      expect(f.offset).toBe(offset);
      offset += f.data.length;
    }
    const expected = Array.from({ length: lines }, (_, i) => `line ${String(i + 1).padStart(9, '0')}\n`).join(
      '',
    );
    expect(offset).toBe(expected.length);
    expect(fake.output(job.jobId, 1).toString() === expected).toBe(true);
    expect(fake.connections).toBe(1);
    expect(maxRss).toBeGreaterThan(0);
    expect(maxRss).toBeLessThan(200 * 1024 * 1024);
  });
});
