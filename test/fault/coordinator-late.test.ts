// Fault injection: messages that arrive after their job has ended. A job given up as lost (its
// agent silent past the lease) or cancelled (and confirmed) receives, from its own agent, output,
// step and job ends after the fact — re-sent by an agent's outbox, or plainly wrong. None of it
// changes the stored state; the connection stays open (a late message is not a protocol
// violation); output is acknowledged and dropped, and job.finished is answered with job.ack so
// the agent can forget the job.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobAssign } from '../../protocol/src/index.ts';
import { startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { Admin, RawAgent, sleep, waitFor } from '../helpers/faults-coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { ENTRY_OUTPUT, sql } from '../helpers/sql.ts';

const LEASE_MS = 1_500;
const HEARTBEAT_MS = 300;

let coordinator: TestCoordinator;
let admin: Admin;
let repo: TestRepo;
const raws: RawAgent[] = [];

beforeAll(async () => {
  coordinator = await startCoordinator({
    AGENT_HEARTBEAT_MS: String(HEARTBEAT_MS),
    AGENT_LEASE_MS: String(LEASE_MS),
    AGENT_ABANDON_GRACE_MS: '30000',
    SCHEDULER_INTERVAL_MS: '100',
  });
  admin = await Admin.signUp(coordinator.url);
  repo = await createTestRepo();
  await repo.commit({ 'app.txt': 'v1\n' }, 'first');
});

afterAll(async () => {
  for (const raw of raws) raw.close();
  // Let the coordinator record those disconnects before it stops (see coordinator-shutdown.test.ts).
  await sleep(500);
  await coordinator?.close();
  await repo?.remove();
}, 30_000);

/** A raw agent with a deployment assigned to it: the job it was given. */
async function rawAgentWithJob(
  name: string,
): Promise<{ raw: RawAgent; token: string; assign: JobAssign; deployId: string }> {
  const { token } = await admin.registerAgent(name, [name]);
  const raw = await RawAgent.welcomed(coordinator.url, token);
  raws.push(raw);
  const projectId = await admin.createProject({
    name: `p-${name}`,
    forge_url: repo.url,
    commands: ['echo one', 'echo two'],
    target: { agents: { names: [name] } },
  });
  const deployId = await admin.deploy(projectId);
  const assign = await raw.next('job.assign', (m) => m.deploymentId === deployId, 15_000);
  return { raw, token, assign, deployId };
}

/** Sends step.output and waits for the acknowledgement of that step up to `end`. */
async function output(raw: RawAgent, jobId: string, step: number, offset: number, text: string, seq = 0) {
  const from = raw.received.length;
  raw.send({ type: 'step.output', jobId, step, seq, offset, data: Buffer.from(text) });
  return raw.next('output.ack', (a) => a.jobId === jobId && a.step === step, 5_000, from);
}

/** Everything stored about a deployment: its row, its jobs, its entries with their bytes. */
async function snapshot(deployId: string) {
  const [deployment] = await sql(
    coordinator,
    'select status, reason, finished_at, cancel_requested_at from deployments where id = ?',
    [deployId],
  );
  const jobs = await sql(
    coordinator,
    'select id, status, reason, finished_at from deployment_jobs where deployment_id = ?',
    [deployId],
  );
  const entries = await sql(
    coordinator,
    `select seq, cmd, status, success, exit_code, signal, ${ENTRY_OUTPUT} as output, output_bytes, finished_at,
            (select count(*)::int from log_chunks c where c.log_entry_id = e.id) as chunks
       from log_entries e where deployment_id = ? order by seq`,
    [deployId],
  );
  return { deployment, jobs, entries };
}

/** After the late messages: the connection is still open, well past two heartbeats. */
async function expectStillOpen(raw: RawAgent) {
  await sleep(3 * HEARTBEAT_MS);
  expect(raw.isOpen, 'the late messages closed the connection').toBe(true);
}

describe('messages about a job that was given up as lost', () => {
  it('change nothing, keep the connection open, and job.finished is answered with job.ack', async () => {
    const { raw, token, assign, deployId } = await rawAgentWithJob('late-lost');
    const jobId = assign.jobId;
    const checkout = `git checkout --force --detach ${assign.repository.commit}`;
    raw.send({ type: 'job.accepted', jobId });
    raw.send({ type: 'step.started', jobId, step: 0, cmd: checkout });
    expect((await output(raw, jobId, 0, 0, 'checked out\n')).offset).toBe(12);
    raw.send({ type: 'step.finished', jobId, step: 0, exitCode: 0, signal: null, outputBytes: 12 });
    raw.send({ type: 'step.started', jobId, step: 1, cmd: 'echo one' });
    expect((await output(raw, jobId, 1, 0, 'one\n')).offset).toBe(4);

    // The agent goes silent past its lease: the job is lost, the deployment fails.
    raw.close();
    await waitFor(
      () => admin.detail(deployId),
      (d) => d.deployment.status === 'failed',
      LEASE_MS + 10_000,
    );
    const before = await snapshot(deployId);
    expect(before.deployment.reason).toBe('late-lost: agent lost');
    expect(before.jobs).toMatchObject([{ status: 'failed', reason: 'agent lost' }]);

    // It comes back, still holding the job, and its outbox delivers what the job did meanwhile.
    const back = await RawAgent.welcomed(coordinator.url, token, [{ jobId, step: 1, offset: 4 }]);
    raws.push(back);
    // The job no longer counts: the agent is told to stop it (it would otherwise run on).
    const stop = await back.next('job.cancel', (m) => m.jobId === jobId, 5_000, 0);
    expect(stop.as).toBe('cancelled');
    const acks = [
      await output(back, jobId, 1, 4, 'late line\n', 1), // output printed while cut off
      await output(back, jobId, 1, 0, 'one\n', 0), // a re-send of what was stored
      await output(back, jobId, 2, 0, 'two\n'), // a step that never started here (skipped)
    ];
    // Acknowledged (so the agent forgets it), never stored.
    expect(acks.map((a) => a.offset >= 4)).toEqual([true, true, true]);
    back.send({ type: 'step.finished', jobId, step: 1, exitCode: 0, signal: null, outputBytes: 14 });
    back.send({ type: 'step.started', jobId, step: 2, cmd: 'echo two' });
    back.send({ type: 'step.finished', jobId, step: 2, exitCode: 0, signal: null, outputBytes: 4 });
    const from = back.received.length;
    back.send({ type: 'job.finished', jobId, status: 'success' });
    await back.next('job.ack', (m) => m.jobId === jobId, 5_000, from);
    // Sent again (its ack was lost): answered again.
    const again = back.received.length;
    back.send({ type: 'job.finished', jobId, status: 'success' });
    await back.next('job.ack', (m) => m.jobId === jobId, 5_000, again);

    await expectStillOpen(back);
    const after = await snapshot(deployId);
    expect(after).toEqual(before);
    expect((await admin.detail(deployId)).deployment.status).toBe('failed');
    // Byte for byte: what was acknowledged before the loss, then the coordinator's note.
    const bytes = after.entries.map((e: { output: Buffer | null }) =>
      (e.output ?? Buffer.alloc(0)).toString('utf8'),
    );
    expect(bytes).toEqual(['checked out\n', 'one\n\n[deckhand] agent lost\n', '']);
    expect(after.entries.map((e: { status: string }) => e.status)).toEqual(['success', 'failed', 'skipped']);
  });
});

describe('messages about a job that was cancelled (and confirmed by its agent)', () => {
  it('change nothing, keep the connection open, and job.finished is answered with job.ack', async () => {
    const { raw, assign, deployId } = await rawAgentWithJob('late-cancel');
    const jobId = assign.jobId;
    raw.send({ type: 'job.accepted', jobId });
    raw.send({
      type: 'step.started',
      jobId,
      step: 0,
      cmd: `git checkout --force --detach ${assign.repository.commit}`,
    });
    expect((await output(raw, jobId, 0, 0, 'abc\n')).offset).toBe(4);
    const cancelled = await admin.client.post(`/deploy/${deployId}/cancel`);
    expect(cancelled.status, cancelled.text).toBe(200);
    const cancel = await raw.next('job.cancel', (m) => m.jobId === jobId, 5_000);
    expect(cancel.as).toBe('cancelled');
    raw.send({ type: 'step.finished', jobId, step: 0, exitCode: null, signal: 'SIGTERM', outputBytes: 4 });
    const from = raw.received.length;
    raw.send({ type: 'job.finished', jobId, status: 'cancelled', reason: cancel.reason });
    await raw.next('job.ack', (m) => m.jobId === jobId, 5_000, from);
    await waitFor(
      () => admin.detail(deployId),
      (d) => d.deployment.status === 'cancelled',
      5_000,
    );
    const before = await snapshot(deployId);
    expect(before.jobs).toMatchObject([{ status: 'cancelled' }]);

    // Then, late (or lying): more output, a step started, and a different end.
    const ack = await output(raw, jobId, 0, 4, 'after the cancel\n', 1);
    expect(ack.offset).toBeGreaterThanOrEqual(4);
    raw.send({ type: 'step.started', jobId, step: 1, cmd: 'echo one' });
    raw.send({ type: 'job.accepted', jobId });
    const late = raw.received.length;
    raw.send({ type: 'job.finished', jobId, status: 'success' });
    await raw.next('job.ack', (m) => m.jobId === jobId, 5_000, late);

    await expectStillOpen(raw);
    const after = await snapshot(deployId);
    expect(after).toEqual(before);
    const detail = await admin.detail(deployId);
    expect(detail.deployment.status).toBe('cancelled');
    const bytes = after.entries.map((e: { output: Buffer | null }) =>
      (e.output ?? Buffer.alloc(0)).toString('utf8'),
    );
    expect(bytes).toEqual(['abc\n', '', '']);
    expect(after.entries.map((e: { status: string }) => e.status)).toEqual([
      'cancelled',
      'skipped',
      'skipped',
    ]);
  });
});
