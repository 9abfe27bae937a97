// Several coordinator processes on one database, signalling each other over LISTEN/NOTIFY. The
// replicas poll slowly here (scheduler pass every 60 s, agent heartbeat every 30 s), so anything
// that happens within a second or two was carried by a signal, not by polling:
// - a deployment triggered through A reaches the agent connected to B;
// - a viewer on A sees, live, the output the agent sends to B;
// - a cancel asked through A reaches the agent on B;
// - the next queued deployment starts at once when the one before it ends on the other process;
// - an agent revoked through A is disconnected from B;
// - the login rate limit counts the attempts made on both (PostgreSQL-backed store).
import { beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../helpers/coordinator.ts';
import { connectPg } from '../helpers/database.ts';
import { captureEvents } from '../helpers/fault-harness.ts';
import { Admin, coordinatorCluster, RawAgent, sleep, waitFor } from '../helpers/faults-coordinator.ts';
import type { CoordinatorProcess } from '../helpers/processes.ts';
import { CloseCode } from '../../protocol/src/index.ts';

/** Well under the polling periods below: only a signal can explain it. */
const SIGNAL_MS = 3_000;

const cluster = coordinatorCluster(2, {
  AGENT_HEARTBEAT_MS: '30000',
  AGENT_LEASE_MS: '120000',
  SCHEDULER_INTERVAL_MS: '60000',
  LOGIN_RATE_LIMIT: '6',
});
let a: CoordinatorProcess;
let b: CoordinatorProcess;
let adminA: Admin;
let adminB: Admin;

beforeAll(async () => {
  [a, b] = cluster.processes as [CoordinatorProcess, CoordinatorProcess];
  adminA = await Admin.signUp(a.url);
  // The same session works on both: one root secret, sessions in the database.
  const viaB = new Client(b.url);
  viaB.cookie = adminA.client.cookie;
  adminB = new Admin(viaB, b.url);
}, 30_000);

async function agentOn(replica: CoordinatorProcess, name: string) {
  const { id, token } = await adminA.registerAgent(name, [name]);
  const raw = await RawAgent.welcomed(replica.url, token);
  cluster.raws.push(raw);
  return { id, raw };
}

async function project(name: string): Promise<string> {
  return adminA.createProject({
    name,
    forge_url: 'https://example.com/cluster.git',
    commands: ['print'],
    target: { agents: { names: [name] } },
  });
}

async function trigger(admin: Admin, projectId: string): Promise<string> {
  const res = await admin.client.post('/deploy', { projectId, commit: 'c'.repeat(40) });
  expect(res.status, res.text).toBe(200);
  return res.json.deployId as string;
}

describe('two coordinator processes signalling over LISTEN/NOTIFY', () => {
  it('a deployment triggered through A reaches the agent on B, and a viewer on A sees its output live', async () => {
    const { raw } = await agentOn(b, 'cl-live');
    const projectId = await project('cl-live');
    const started = Date.now();
    const deployId = await trigger(adminA, projectId);
    const assign = await raw.next('job.assign', (m) => m.deploymentId === deployId, SIGNAL_MS);
    expect(Date.now() - started).toBeLessThan(SIGNAL_MS);

    const viewer = captureEvents(a.url, adminA.client.cookie!, deployId);
    const jobId = assign.jobId;
    raw.send({ type: 'job.accepted', jobId });
    raw.send({
      type: 'step.started',
      jobId,
      step: 0,
      cmd: `git checkout --force --detach ${'c'.repeat(40)}`,
    });
    raw.send({ type: 'step.finished', jobId, step: 0, exitCode: 0, signal: null, outputBytes: 0 });
    raw.send({ type: 'step.started', jobId, step: 1, cmd: 'print' });
    await sleep(300);
    const sentAt = Date.now();
    raw.send({ type: 'step.output', jobId, step: 1, seq: 0, offset: 0, data: Buffer.from('hello from B\n') });
    // The viewer on A gets it without waiting for any poll.
    const seen = await waitFor(
      async () => {
        const res = await fetch(`${a.url}/deploy/${deployId}`, {
          headers: { cookie: adminA.client.cookie! },
        });
        return (await res.json()) as { logs: Array<{ log: string }> };
      },
      (d) => d.logs.some((l) => l.log === 'hello from B\n'),
      SIGNAL_MS,
    );
    expect(seen).toBeTruthy();
    raw.send({ type: 'step.finished', jobId, step: 1, exitCode: 0, signal: null, outputBytes: 13 });
    raw.send({ type: 'job.finished', jobId, status: 'success' });
    const { events } = await viewer.done;
    const output = events.find(
      (e) => e.event === 'output' && (e.data as { text: string }).text === 'hello from B\n',
    );
    expect(output, JSON.stringify(events)).toBeDefined();
    expect(events.at(-1)?.event).toBe('end');
    expect(Date.now() - sentAt).toBeLessThan(SIGNAL_MS + 1_000);
  }, 30_000);

  it('a cancel asked through A reaches the agent on B; the queued next deployment then starts at once', async () => {
    const { raw } = await agentOn(b, 'cl-cancel');
    const projectId = await project('cl-cancel');
    const first = await trigger(adminA, projectId);
    const assign = await raw.next('job.assign', (m) => m.deploymentId === first, SIGNAL_MS);
    raw.send({ type: 'job.accepted', jobId: assign.jobId });
    // Queued behind it (one at a time per project), triggered through B this time.
    const second = await trigger(adminB, projectId);

    const cancelled = await adminA.client.post(`/deploy/${first}/cancel`);
    expect(cancelled.status, cancelled.text).toBe(200);
    const cancel = await raw.next('job.cancel', (m) => m.jobId === assign.jobId, SIGNAL_MS);
    expect(cancel.as).toBe('cancelled');
    const from = raw.received.length;
    raw.send({ type: 'job.finished', jobId: assign.jobId, status: 'cancelled', reason: cancel.reason });
    await raw.next('job.ack', (m) => m.jobId === assign.jobId, SIGNAL_MS, from);
    // Its end frees the project: the next one is sent without waiting for a scheduler pass.
    await raw.next('job.assign', (m) => m.deploymentId === second, SIGNAL_MS);
    expect((await adminA.detail(first)).deployment.status).toBe('cancelled');
  }, 30_000);

  it('an agent revoked through A is disconnected from B at once (4401)', async () => {
    const { id, raw } = await agentOn(b, 'cl-revoke');
    const started = Date.now();
    const res = await adminA.client.request('DELETE', `/agents/${id}`);
    expect(res.status, res.text).toBe(200);
    const closed = await Promise.race([raw.closed, sleep(SIGNAL_MS).then(() => null)]);
    expect(closed, `still open ${Date.now() - started} ms after the revoke`).not.toBeNull();
    expect(closed!.code).toBe(CloseCode.UNAUTHORIZED);
  }, 30_000);

  it('counts login attempts on both processes against one limit', async () => {
    const attempt = (replica: CoordinatorProcess) =>
      new Client(replica.url).post('/login', { email: 'nobody@example.com', password: 'wrong password' });
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await attempt(i % 2 === 0 ? a : b)).status);
    expect(statuses).toEqual([401, 401, 401, 401, 401, 401]);
    // The 7th, whichever process it reaches, is over the limit of 6 per window.
    const seventh = await attempt(b);
    expect(seventh.status, seventh.text).toBe(429);
    expect((await attempt(a)).status).toBe(429);
  }, 30_000);

  it('listens again after its listening connection is cut, and signals flow as before', async () => {
    const client = await connectPg(cluster.db.url);
    try {
      const { rows } = await client.query(
        `select pg_terminate_backend(pid) as cut from pg_stat_activity
          where datname = current_database() and query ilike 'LISTEN %'`,
      );
      expect(rows.length, 'both processes hold a listening connection').toBe(2);
    } finally {
      await client.end();
    }
    // Reconnecting backs off from 250 ms.
    await sleep(1_500);
    const { raw } = await agentOn(b, 'cl-relisten');
    const projectId = await project('cl-relisten');
    const deployId = await trigger(adminA, projectId);
    await raw.next('job.assign', (m) => m.deploymentId === deployId, SIGNAL_MS);
  }, 30_000);
});
