// The agent daemon running jobs: the real `deckhand-agent` process against a fake coordinator
// (a real WebSocket server), checking out from a real git remote and running real commands.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type JobFinished, MAX_CHUNK_BYTES, PROTOCOL_VERSION, type StepStarted } from '@deckhand/protocol';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createRepo,
  FakeCoordinator,
  headOf,
  jobAssign,
  processAlive,
  startAgent,
  type TestAgent,
  type TestRepo,
} from '../helpers/fake-coordinator.ts';

let root: string;
let repo: TestRepo;
let firstCommit: string;
let secondCommit: string;
const running: { fake: FakeCoordinator; agent: TestAgent }[] = [];

beforeAll(() => {
  root = mkdtempSync(path.join(os.tmpdir(), 'deckhand-agent-jobs-'));
  repo = createRepo(path.join(root, 'repo'));
  firstCommit = repo.commit({ 'file.txt': 'first version\n', 'deploy.sh': 'echo deploying\n' }, 'first');
  secondCommit = repo.commit({ 'file.txt': 'second version\n' }, 'second');
});

afterEach(async () => {
  for (const { fake, agent } of running.splice(0)) {
    await agent.stop();
    await fake.close();
  }
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

async function connectedAgent(
  opts: { args?: string[]; env?: Record<string, string>; autoAck?: boolean; workDir?: string } = {},
): Promise<{ fake: FakeCoordinator; agent: TestAgent }> {
  const fake = await FakeCoordinator.start({
    token: 'dha_test_token_0123456789',
    autoAck: opts.autoAck ?? true,
  });
  const workDir = opts.workDir ?? mkdtempSync(path.join(root, 'agent-'));
  const agent = startAgent(fake, workDir, { args: opts.args ?? [], env: opts.env ?? {} });
  running.push({ fake, agent });
  await fake.waitFor('hello').catch((err: Error) => {
    throw new Error(`${err.message}\n${agent.output()}`);
  });
  // The welcome is on its way; a frame sent now arrives after it.
  return { fake, agent };
}

/** The types (and steps) of a job's messages, in the order received. */
function trace(fake: FakeCoordinator, jobId: string): string[] {
  return fake.received
    .map((r) => r.message)
    .filter((m) => 'jobId' in m && m.jobId === jobId && m.type !== 'step.output')
    .map((m) => ('step' in m ? `${m.type} ${m.step}` : m.type));
}

describe('the handshake', () => {
  it('says hello with its protocol and agent versions, hostname, labels and no running jobs', async () => {
    const { fake } = await connectedAgent({ args: ['--labels', 'web, eu'] });
    const pkg = JSON.parse(
      readFileSync(path.join(import.meta.dirname, '../../agent/package.json'), 'utf8'),
    ) as {
      version: string;
    };
    expect(fake.messages('hello')).toEqual([
      {
        type: 'hello',
        protocolVersion: PROTOCOL_VERSION,
        agentVersion: pkg.version,
        hostname: os.hostname(),
        labels: ['web', 'eu'],
        runningJobs: [],
      },
    ]);
    expect(fake.received).toHaveLength(1);
  });
});

describe('a job that succeeds', () => {
  it('checks out the exact commit, then streams each command’s output byte for byte', async () => {
    const { fake, agent } = await connectedAgent();
    const job = jobAssign({
      url: repo.url,
      commit: firstCommit, // not the branch tip: the agent must not just take the newest
      project: { id: randomUUID(), name: 'web' },
      commands: [
        'cat file.txt',
        "echo out-1; sleep 0.1; echo err-1 >&2; sleep 0.1; printf 'multi\\nline\\ncaf\\xc3\\xa9 no newline'",
        'bash deploy.sh',
      ],
    });
    fake.send(job);
    const finished = await fake.waitFor('job.finished', (m) => m.jobId === job.jobId);
    expect(finished).toEqual({ type: 'job.finished', jobId: job.jobId, status: 'success' });
    expect(trace(fake, job.jobId)).toEqual([
      'job.accepted',
      'step.started 0',
      'step.finished 0',
      'step.started 1',
      'step.finished 1',
      'step.started 2',
      'step.finished 2',
      'step.started 3',
      'step.finished 3',
      'job.finished',
    ]);

    const projectDir = path.join(agent.workDir, 'web');
    expect(headOf(projectDir)).toBe(firstCommit);
    expect(readFileSync(path.join(projectDir, 'file.txt'), 'utf8')).toBe('first version\n');

    const started = fake.messages('step.started').filter((m) => m.jobId === job.jobId);
    expect(started.map((m) => m.cmd)).toEqual([
      `git checkout --force --detach ${firstCommit}`,
      ...job.commands,
    ]);
    expect(fake.output(job.jobId, 1).toString()).toBe('first version\n');
    expect(fake.output(job.jobId, 2)).toEqual(
      Buffer.from('out-1\nerr-1\nmulti\nline\ncaf\u00e9 no newline', 'utf8'),
    );
    expect(fake.output(job.jobId, 3).toString()).toBe('deploying\n');
    // The checkout's log shows the git commands and what git said.
    const checkoutLog = fake.output(job.jobId, 0).toString();
    expect(checkoutLog).toContain('$ git clone --no-checkout');
    expect(checkoutLog).toContain(`$ git checkout --force --detach ${firstCommit}`);

    for (const step of [0, 1, 2, 3]) {
      const chunks = fake.messages('step.output').filter((m) => m.jobId === job.jobId && m.step === step);
      const done = fake.messages('step.finished').find((m) => m.jobId === job.jobId && m.step === step)!;
      // Offsets contiguous from 0, sequence numbers from 0, and outputBytes the total.
      let offset = 0;
      chunks.forEach((c, i) => {
        expect(c.seq).toBe(i);
        expect(c.offset).toBe(offset);
        offset += c.data.length;
      });
      expect(done).toMatchObject({ exitCode: 0, signal: null, outputBytes: offset });
      expect(done.error).toBeUndefined();
    }
  });

  it('fetches and moves to a newer commit on the next job, in the same folder', async () => {
    const { fake, agent } = await connectedAgent();
    const project = { id: randomUUID(), name: 'api' };
    for (const commit of [firstCommit, secondCommit]) {
      const job = jobAssign({ url: repo.url, commit, project, commands: ['cat file.txt'] });
      fake.send(job);
      await fake.waitFor('job.finished', (m) => m.jobId === job.jobId && m.status === 'success');
      expect(headOf(path.join(agent.workDir, 'api'))).toBe(commit);
    }
    expect(readFileSync(path.join(agent.workDir, 'api', 'file.txt'), 'utf8')).toBe('second version\n');
  });
});

describe('the command environment', () => {
  it('passes the agent’s environment, the job’s env and the DECKHAND_* variables, never the token', async () => {
    const { fake, agent } = await connectedAgent({
      env: { FROM_AGENT: 'agent-side', DECKHAND_TOKEN: 'dha_must_not_leak' },
    });
    const project = { id: randomUUID(), name: 'envy' };
    const job = jobAssign({
      url: repo.url,
      commit: secondCommit,
      project,
      env: { GREETING: 'hello world', QUOTED: `it's "x"`, DECKHAND_JOB_ID: 'spoofed' },
      commands: [
        'printf "%s|" "$FROM_AGENT" "$GREETING" "$QUOTED" "$DECKHAND_DEPLOYMENT_ID" "$DECKHAND_JOB_ID" "$DECKHAND_COMMIT" "$DECKHAND_BRANCH" "$DECKHAND_PROJECT" "$DECKHAND_PROJECT_ID" "${DECKHAND_TOKEN-unset}"',
      ],
    });
    fake.send(job);
    await fake.waitFor('job.finished', (m) => m.jobId === job.jobId && m.status === 'success');
    expect(fake.output(job.jobId, 1).toString().split('|')).toEqual([
      'agent-side',
      'hello world',
      `it's "x"`,
      job.deploymentId,
      job.jobId,
      secondCommit,
      'main',
      'envy',
      project.id,
      'unset',
      '',
    ]);
    expect(agent.output()).not.toContain('hello world');
    expect(agent.output()).not.toContain('dha_must_not_leak');
    expect(agent.output()).not.toContain('dha_test_token_0123456789');
  });
});

describe('a deploy key', () => {
  it('is written with mode 0600 and handed to ssh through GIT_SSH_COMMAND, paths quoted', async () => {
    // A stand-in `ssh` that records how git called it, then fails as an unreachable host would.
    const bin = mkdtempSync(path.join(root, 'bin-'));
    const record = path.join(bin, 'ssh-args');
    writeFileSync(path.join(bin, 'ssh'), `#!/bin/sh\nprintf '%s\\n' "$@" > '${record}'\nexit 255\n`, {
      mode: 0o755,
    });
    const { fake, agent } = await connectedAgent({
      workDir: mkdtempSync(path.join(root, `it's a dir `)),
      env: { PATH: `${bin}:${process.env.PATH}` },
    });
    const project = { id: randomUUID(), name: 'keyed' };
    const job = jobAssign({
      url: 'ssh://git@forge.invalid/acme/web.git',
      commit: secondCommit,
      project,
      commands: ['echo never'],
    });
    job.repository.sshKey =
      '-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n-----END OPENSSH PRIVATE KEY-----';
    job.repository.knownHosts = 'forge.invalid ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample';
    fake.send(job);
    const finished = await fake.waitFor('job.finished', (m) => m.jobId === job.jobId);
    expect(finished).toMatchObject({ status: 'failed', reason: 'the checkout exited with code 128' });

    const keyFile = path.join(agent.workDir, '.deckhand', 'keys', project.id);
    expect(statSync(keyFile).mode & 0o777).toBe(0o600);
    expect(readFileSync(keyFile, 'utf8')).toBe(`${job.repository.sshKey}\n`);
    expect(readFileSync(`${keyFile}.known_hosts`, 'utf8')).toBe(`${job.repository.knownHosts}\n`);
    const args = readFileSync(record, 'utf8').split('\n');
    expect(args.slice(0, 12)).toEqual([
      '-i',
      keyFile,
      '-o',
      'IdentitiesOnly=yes',
      '-o',
      'StrictHostKeyChecking=yes',
      '-o',
      'BatchMode=yes',
      '-o',
      `UserKnownHostsFile=${keyFile}.known_hosts`,
      '-o',
      'GlobalKnownHostsFile=/dev/null',
    ]);
    expect(args).toContain('git@forge.invalid');
    expect(agent.output()).not.toContain('not a real key');
  });
});

describe('a job that fails', () => {
  it('reports the exit code, finishes failed with the reason, and starts nothing after', async () => {
    const { fake } = await connectedAgent();
    const job = jobAssign({
      url: repo.url,
      commit: secondCommit,
      commands: ['echo before', 'echo oops >&2; exit 3', 'echo never > never.txt'],
    });
    fake.send(job);
    const finished = await fake.waitFor('job.finished', (m) => m.jobId === job.jobId);
    expect(finished).toEqual({
      type: 'job.finished',
      jobId: job.jobId,
      status: 'failed',
      reason: 'command 2 (echo oops >&2; exit 3) exited with code 3',
    });
    expect(fake.messages('step.finished').find((m) => m.jobId === job.jobId && m.step === 2)).toMatchObject({
      exitCode: 3,
      signal: null,
      outputBytes: 5,
    });
    expect(fake.output(job.jobId, 2).toString()).toBe('oops\n');
    expect(trace(fake, job.jobId)).not.toContain('step.started 3');
  });

  it('fails at the checkout when the commit does not exist, with git’s message in the log', async () => {
    const { fake } = await connectedAgent();
    const job = jobAssign({ url: repo.url, commit: 'f'.repeat(40), commands: ['echo never'] });
    fake.send(job);
    const finished = await fake.waitFor('job.finished', (m) => m.jobId === job.jobId);
    expect(finished.status).toBe('failed');
    expect(finished.reason).toMatch(/^the checkout exited with code \d+$/);
    expect(fake.output(job.jobId, 0).toString()).toMatch(/fatal|error/i);
    expect(trace(fake, job.jobId)).toEqual([
      'job.accepted',
      'step.started 0',
      'step.finished 0',
      'job.finished',
    ]);
  });
});

describe('output streaming', () => {
  it('sends output while the command runs, in frames no more than ~100 ms apart', async () => {
    const { fake } = await connectedAgent();
    const job = jobAssign({
      url: repo.url,
      commit: secondCommit,
      commands: ['for i in $(seq 1 20); do echo "tick $i"; sleep 0.05; done'],
    });
    fake.send(job);
    await fake.waitFor('job.finished', (m) => m.jobId === job.jobId && m.status === 'success');
    const frames = fake.received.filter(
      (r) => r.message.type === 'step.output' && r.message.jobId === job.jobId && r.message.step === 1,
    );
    expect(frames.length).toBeGreaterThanOrEqual(5);
    const gaps = frames.slice(1).map((f, i) => f.at - frames[i]!.at);
    expect(Math.max(...gaps)).toBeLessThan(200);
    const finishedAt = fake.received.find(
      (r) => r.message.type === 'step.finished' && r.message.jobId === job.jobId && r.message.step === 1,
    )!.at;
    expect(finishedAt - frames[0]!.at).toBeGreaterThan(500);
    const expected = Array.from({ length: 20 }, (_, i) => `tick ${i + 1}\n`).join('');
    expect(fake.output(job.jobId, 1).toString()).toBe(expected);
  });

  it('splits a burst of output into chunks no larger than MAX_CHUNK_BYTES', async () => {
    const { fake } = await connectedAgent();
    const total = 3 * MAX_CHUNK_BYTES + 12_345;
    const job = jobAssign({
      url: repo.url,
      commit: secondCommit,
      commands: [`head -c ${total} /dev/urandom | base64 -w 100`],
    });
    fake.send(job);
    await fake.waitFor('job.finished', (m) => m.jobId === job.jobId && m.status === 'success');
    const chunks = fake.messages('step.output').filter((m) => m.jobId === job.jobId && m.step === 1);
    expect(chunks.length).toBeGreaterThan(4);
    for (const c of chunks) expect(c.data.length).toBeLessThanOrEqual(MAX_CHUNK_BYTES);
    const out = fake.output(job.jobId, 1);
    const lines = Math.ceil((Math.ceil(total / 3) * 4) / 100);
    expect(out.length).toBe(Math.ceil(total / 3) * 4 + lines);
    expect(
      fake.messages('step.finished').find((m) => m.jobId === job.jobId && m.step === 1)!.outputBytes,
    ).toBe(out.length);
  });
});

describe('cancelling a job', () => {
  it('stops the whole process group (SIGTERM, then SIGKILL) and finishes cancelled', async () => {
    const { fake } = await connectedAgent();
    const job = jobAssign({
      url: repo.url,
      commit: secondCommit,
      commands: ['trap "" TERM; sleep 600 & echo "pids $$ $!"; sleep 600', 'echo never'],
    });
    fake.send(job);
    await fake.until(() => /pids \d+ \d+/.test(fake.output(job.jobId, 1).toString()), 'the pids');
    const [, shell, background] = /pids (\d+) (\d+)/.exec(fake.output(job.jobId, 1).toString())!.map(Number);
    expect(processAlive(shell!)).toBe(true);
    expect(processAlive(background!)).toBe(true);

    const cancelledAt = Date.now();
    fake.send({
      type: 'job.cancel',
      jobId: job.jobId,
      reason: 'cancelled by t@example.com',
      as: 'cancelled',
    });
    const finished = await fake.waitFor('job.finished', (m) => m.jobId === job.jobId);
    expect(finished).toEqual({
      type: 'job.finished',
      jobId: job.jobId,
      status: 'cancelled',
      reason: 'cancelled by t@example.com',
    });
    // Everything ignored SIGTERM, so it took the grace period (500 ms here) and a SIGKILL.
    expect(Date.now() - cancelledAt).toBeGreaterThanOrEqual(450);
    const step = fake.messages('step.finished').find((m) => m.jobId === job.jobId && m.step === 1)!;
    expect(step).toMatchObject({
      exitCode: null,
      signal: 'SIGKILL',
      error: 'cancelled: cancelled by t@example.com',
    });
    await fake.until(
      () => !processAlive(shell!) && !processAlive(background!),
      'the processes to be gone',
      2_000,
    );
    expect(trace(fake, job.jobId)).not.toContain('step.started 2');
  });
});

describe('several jobs', () => {
  it('runs jobs of different projects side by side, and one project’s jobs one at a time', async () => {
    const { fake } = await connectedAgent();
    const slowProject = { id: randomUUID(), name: 'slow' };
    const slow = jobAssign({
      url: repo.url,
      commit: secondCommit,
      project: slowProject,
      commands: ['sleep 1.5'],
    });
    const quick = jobAssign({
      url: repo.url,
      commit: secondCommit,
      project: { id: randomUUID(), name: 'quick' },
      commands: ['echo quick'],
    });
    const sameFolder = jobAssign({
      url: repo.url,
      commit: secondCommit,
      project: slowProject,
      commands: ['echo next'],
    });
    fake.send(slow);
    await fake.waitFor('step.started', (m) => m.jobId === slow.jobId && m.step === 1);
    fake.send(quick);
    fake.send(sameFolder);
    await fake.waitFor('job.finished', (m) => m.jobId === sameFolder.jobId);
    const order = fake.received
      .map((r) => r.message)
      .filter(
        (m): m is JobFinished | StepStarted =>
          m.type === 'job.finished' || (m.type === 'step.started' && m.step === 0),
      )
      .map((m) => `${m.type} ${[slow, quick, sameFolder].findIndex((j) => j.jobId === m.jobId)}`);
    // Labels are `<message> <job>`: 0 slow, 1 quick (another project), 2 the slow project again.
    expect(order).toEqual([
      'step.started 0',
      'step.started 1',
      'job.finished 1',
      'job.finished 0',
      'step.started 2',
      'job.finished 2',
    ]);
    expect(fake.messages('job.finished').map((m) => m.status)).toEqual(['success', 'success', 'success']);
  });
});
