// Protocol v2 on the agent, per job: `job.cancel` with `as`, masking secrets in output, the
// per-command timeout, and releases (build folder per deployment, atomic `current`, health check
// with switch-back, rollback, pruning). The real agent process against a fake coordinator.
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { JobAssign } from '@deckhand/protocol';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createRepo,
  FakeCoordinator,
  headOf,
  jobAssign,
  processAlive,
  startAgent,
  type TestAgent,
  TEST_TOKEN,
  type TestRepo,
} from '../helpers/fake-coordinator.ts';

let root: string;
let repo: TestRepo;
let commit: string;
const running: { fake: FakeCoordinator; agent: TestAgent }[] = [];

beforeAll(() => {
  root = mkdtempSync(path.join(os.tmpdir(), 'deckhand-agent-control-'));
  repo = createRepo(path.join(root, 'repo'));
  commit = repo.commit({ VERSION: '1\n', healthy: 'yes\n' }, 'first');
});

afterEach(async () => {
  for (const { fake, agent } of running.splice(0)) {
    await agent.stop();
    await fake.close();
  }
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

async function connectedAgent(): Promise<{ fake: FakeCoordinator; agent: TestAgent }> {
  const fake = await FakeCoordinator.start({ token: TEST_TOKEN, autoAck: true });
  const agent = startAgent(fake, mkdtempSync(path.join(root, 'agent-')));
  running.push({ fake, agent });
  await fake.waitFor('hello').catch((err: Error) => {
    throw new Error(`${err.message}\n${agent.output()}`);
  });
  return { fake, agent };
}

function stepsOf(fake: FakeCoordinator, jobId: string): string[] {
  return fake
    .messages('step.started')
    .filter((m) => m.jobId === jobId)
    .map((m) => `${m.step} ${m.cmd}`);
}

async function run(fake: FakeCoordinator, job: JobAssign) {
  fake.send(job);
  return fake.waitFor('job.finished', (m) => m.jobId === job.jobId, 20_000);
}

describe('job.cancel with `as`', () => {
  it('ends the job with the status and reason given (timed_out: the deployment’s deadline)', async () => {
    const { fake } = await connectedAgent();
    const job = jobAssign({ url: repo.url, commit, commands: ['echo started; sleep 600', 'echo never'] });
    fake.send(job);
    await fake.until(() => fake.output(job.jobId, 1).toString() === 'started\n', 'the command');
    fake.send({
      type: 'job.cancel',
      jobId: job.jobId,
      reason: 'the deployment ran past its 10 min deadline',
      as: 'timed_out',
    });
    const finished = await fake.waitFor('job.finished', (m) => m.jobId === job.jobId);
    expect(finished).toEqual({
      type: 'job.finished',
      jobId: job.jobId,
      status: 'timed_out',
      reason: 'the deployment ran past its 10 min deadline',
    });
    expect(fake.messages('step.finished').find((m) => m.jobId === job.jobId && m.step === 1)).toMatchObject({
      exitCode: null,
      signal: 'SIGTERM',
      error: 'timed out: the deployment ran past its 10 min deadline',
    });
    expect(stepsOf(fake, job.jobId)).toHaveLength(2);
  });
});

describe('masking', () => {
  it('replaces every masked value with [MASKED], whole, split across writes, and inside a line', async () => {
    const { fake } = await connectedAgent();
    const secret = 's3cr3t-Value-42';
    const job = jobAssign({
      url: repo.url,
      commit,
      env: { API_TOKEN: secret },
      masks: [secret, 'other-secret'],
      commands: [
        [
          'echo "whole: $API_TOKEN"',
          // Split in two writes with more than the 100 ms batching interval between them.
          "printf 'split: s3cr3t-'; sleep 0.4; printf 'Value-42\\n'",
          'echo "inline:prefix${API_TOKEN}suffix and more"',
          'printf "at the very end %s" "$API_TOKEN"',
        ].join('; '),
        'echo "to stderr $API_TOKEN" >&2',
      ],
    });
    const finished = await run(fake, job);
    expect(finished.status).toBe('success');
    const expected =
      'whole: [MASKED]\nsplit: [MASKED]\ninline:prefix[MASKED]suffix and more\nat the very end [MASKED]';
    const out = fake.output(job.jobId, 1).toString();
    expect(out).toBe(expected);
    expect(fake.output(job.jobId, 2).toString()).toBe('to stderr [MASKED]\n');
    // No frame carries any part of it that could be glued back together either.
    const frames = fake.messages('step.output').filter((m) => m.jobId === job.jobId);
    for (const f of frames) expect(f.data.toString()).not.toContain('s3cr3t');
    expect(frames.filter((f) => f.step === 1).length).toBeGreaterThan(1);
    // Offsets and outputBytes count the masked bytes.
    expect(
      fake.messages('step.finished').find((m) => m.jobId === job.jobId && m.step === 1)!.outputBytes,
    ).toBe(Buffer.byteLength(expected));
  });
});

describe('the command timeout', () => {
  it('stops a command running past commandTimeoutMs like a cancel; the job ends timed_out', async () => {
    const { fake } = await connectedAgent();
    const cmd = 'trap "" TERM; sleep 600 & echo "pids $$ $!"; wait';
    const job = jobAssign({
      url: repo.url,
      commit,
      commandTimeoutMs: 1_200,
      commands: ['true', cmd, 'echo never'],
    });
    fake.send(job);
    await fake.until(() => /pids \d+ \d+/.test(fake.output(job.jobId, 2).toString()), 'the pids');
    const [, shell, background] = /pids (\d+) (\d+)/.exec(fake.output(job.jobId, 2).toString())!.map(Number);
    const finished = await fake.waitFor('job.finished', (m) => m.jobId === job.jobId);
    expect(finished).toEqual({
      type: 'job.finished',
      jobId: job.jobId,
      status: 'timed_out',
      reason: `command 2 (${cmd}) timed out after 1.2 s`,
    });
    // TERM was ignored: the grace (500 ms in these tests), then KILL to the whole group.
    expect(fake.messages('step.finished').find((m) => m.jobId === job.jobId && m.step === 2)).toMatchObject({
      exitCode: null,
      signal: 'SIGKILL',
      error: 'timed out after 1.2 s',
    });
    await fake.until(
      () => !processAlive(shell!) && !processAlive(background!),
      'the processes to be gone',
      2_000,
    );
    expect(stepsOf(fake, job.jobId).map((s) => s.split(' ')[0])).toEqual(['0', '1', '2']);
  });

  it('says milliseconds below a second, and applies to the health check too', async () => {
    const { fake } = await connectedAgent();
    const job = jobAssign({
      url: repo.url,
      commit,
      commandTimeoutMs: 300,
      commands: ['true'],
      releases: { keep: 3, healthCheck: 'sleep 5' },
    });
    const finished = await run(fake, job);
    expect(finished).toMatchObject({
      status: 'timed_out',
      reason: 'the health check (sleep 5) timed out after 300 ms',
    });
    expect(fake.messages('step.finished').find((m) => m.jobId === job.jobId && m.step === 3)).toMatchObject({
      error: 'timed out after 300 ms',
    });
  });
});

describe('releases', () => {
  it('builds each deployment in its own release, switches current atomically, switches back, rolls back and prunes', async () => {
    const { fake, agent } = await connectedAgent();
    const project = { id: randomUUID(), name: 'site' };
    const dir = path.join(agent.workDir, 'site');
    const releases = { keep: 2, healthCheck: 'cat VERSION; grep -qx yes healthy' };
    const current = () => readlinkSync(path.join(dir, 'current'));
    const kept = () => readdirSync(path.join(dir, 'releases')).sort();
    const deploy = (c: string, commands: string[]) =>
      jobAssign({ url: repo.url, commit: c, project, commands, releases });

    // 1: a good deploy. Commands run in releases/<id>; current points there afterwards.
    const one = deploy(commit, ['pwd', 'echo built > build.txt']);
    expect(await run(fake, one)).toMatchObject({ status: 'success' });
    const id1 = one.deploymentId;
    expect(stepsOf(fake, one.jobId)).toEqual([
      `0 git checkout --force --detach ${commit}`,
      '1 pwd',
      '2 echo built > build.txt',
      `3 ln -sfn releases/${id1} current`,
      `4 ${releases.healthCheck}`,
    ]);
    expect(fake.output(one.jobId, 1).toString()).toBe(`${path.join(dir, 'releases', id1)}\n`);
    expect(current()).toBe(`releases/${id1}`);
    expect(headOf(path.join(dir, 'releases', id1))).toBe(commit);
    expect(readFileSync(path.join(dir, 'current', 'build.txt'), 'utf8')).toBe('built\n');
    expect(existsSync(path.join(dir, 'repo', '.git'))).toBe(true);
    expect(fake.output(one.jobId, 3).toString()).toContain(`current -> releases/${id1}\n`);
    expect(fake.output(one.jobId, 4).toString()).toBe('1\n');

    // 2: a command fails: nothing is activated.
    const two = deploy(commit, ['exit 1']);
    expect(await run(fake, two)).toMatchObject({
      status: 'failed',
      reason: 'command 1 (exit 1) exited with code 1',
    });
    expect(current()).toBe(`releases/${id1}`);

    // 3: the health check fails: current goes back to release 1, and the log says so.
    const unhealthy = repo.commit({ VERSION: '3\n', healthy: 'no\n' }, 'unhealthy');
    const three = deploy(unhealthy, []);
    expect(await run(fake, three)).toMatchObject({
      status: 'failed',
      reason: `the health check (${releases.healthCheck}) exited with code 1`,
    });
    expect(current()).toBe(`releases/${id1}`);
    const checkLog = fake.output(three.jobId, 2).toString();
    expect(checkLog).toBe(`3\nswitched current back to releases/${id1}\n`);
    expect(fake.output(three.jobId, 1).toString()).toContain(
      `current -> releases/${three.deploymentId} (was releases/${id1})`,
    );

    // 4: good again. keep: 2 prunes the oldest beyond two (never current, nor the release a
    // failing health check would switch back to): release 2 goes.
    const good = repo.commit({ VERSION: '4\n', healthy: 'yes\n' }, 'fourth');
    const four = deploy(good, []);
    expect(await run(fake, four)).toMatchObject({ status: 'success' });
    expect(current()).toBe(`releases/${four.deploymentId}`);
    expect(fake.output(four.jobId, 1).toString()).toContain(`removed releases/${two.deploymentId}`);
    expect(kept()).toEqual([id1, three.deploymentId, four.deploymentId].sort());

    // A rollback to release 1: activate + health check only.
    const back = jobAssign({
      url: repo.url,
      commit: good,
      project,
      commands: [],
      releases,
      kind: 'rollback',
      rollbackTo: id1,
    });
    expect(await run(fake, back)).toMatchObject({ status: 'success' });
    expect(stepsOf(fake, back.jobId)).toEqual([
      `0 ln -sfn releases/${id1} current`,
      `1 ${releases.healthCheck}`,
    ]);
    expect(current()).toBe(`releases/${id1}`);
    expect(fake.output(back.jobId, 1).toString()).toBe('1\n');

    // 5: another deploy prunes release 3 (release 1 is what a failed check would return to).
    const five = deploy(good, []);
    expect(await run(fake, five)).toMatchObject({ status: 'success' });
    expect(kept()).toEqual([id1, four.deploymentId, five.deploymentId].sort());
    // git's own worktree list follows.
    const worktrees = readdirSync(path.join(dir, 'repo', '.git', 'worktrees')).sort();
    expect(worktrees).toEqual([id1, four.deploymentId, five.deploymentId].sort());

    // A rollback to a release that is gone fails clearly, and current stays.
    const gone = jobAssign({
      url: repo.url,
      commit: good,
      project,
      commands: [],
      releases,
      kind: 'rollback',
      rollbackTo: two.deploymentId,
    });
    const failed = await run(fake, gone);
    expect(failed.status).toBe('failed');
    expect(failed.reason).toBe(
      `switching the release failed: release ${two.deploymentId} is gone (${path.join(dir, 'releases', two.deploymentId)} does not exist)`,
    );
    expect(current()).toBe(`releases/${five.deploymentId}`);
  });

  it('without releases builds in the project folder itself, as before', async () => {
    const { fake, agent } = await connectedAgent();
    const job = jobAssign({
      url: repo.url,
      commit,
      project: { id: randomUUID(), name: 'plain' },
      commands: ['pwd'],
    });
    expect(await run(fake, job)).toMatchObject({ status: 'success' });
    expect(fake.output(job.jobId, 1).toString()).toBe(`${path.join(agent.workDir, 'plain')}\n`);
    expect(existsSync(path.join(agent.workDir, 'plain', 'current'))).toBe(false);
    expect(stepsOf(fake, job.jobId)).toHaveLength(2);
  });
});
