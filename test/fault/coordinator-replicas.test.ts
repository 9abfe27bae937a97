// Fault injection: two coordinator replicas on one database (README: "give every replica the
// same" secret; the scheduler claims with SKIP LOCKED so replicas can share the work), and an
// agent whose reconnects land on one, then the other, then the first again in the middle of one
// command — as behind a load balancer after network blips. Every byte it printed must be stored
// once, in order, and the deployment must end `success`.
import { describe, expect, it } from 'vitest';
import { Client } from '../helpers/coordinator.ts';
import {
  Admin,
  coordinatorCluster,
  RawAgent,
  storedEntries,
  waitFor,
} from '../helpers/faults-coordinator.ts';
import type { CoordinatorProcess } from '../helpers/processes.ts';

const cluster = coordinatorCluster(2, {
  AGENT_HEARTBEAT_MS: '300',
  AGENT_LEASE_MS: '10000',
  SCHEDULER_INTERVAL_MS: '100',
});
const replicas = cluster.processes;
const raws = cluster.raws;

describe('an agent reconnecting to replica A, then B, then A again within one command', () => {
  it('has every byte of that command stored once, in order, and the deployment succeeds', async () => {
    const [a, b] = replicas as [CoordinatorProcess, CoordinatorProcess];
    const admin = await Admin.signUp(a.url);
    const { token } = await admin.registerAgent('hop', ['hop']);
    const projectId = await admin.createProject({
      name: 'hop',
      forge_url: 'https://example.com/hop.git',
      commands: ['print three lines'],
      target: { agents: { names: ['hop'] } },
    });
    const connect = async (
      replica: CoordinatorProcess,
      held: Array<{ jobId: string; step: number; offset: number }>,
    ) => {
      const raw = await RawAgent.welcomed(replica.url, token, held);
      raws.push(raw);
      return raw;
    };
    const output = async (raw: RawAgent, jobId: string, step: number, offset: number, text: string) => {
      const from = raw.received.length;
      raw.send({ type: 'step.output', jobId, step, seq: offset, offset, data: Buffer.from(text) });
      return (await raw.next('output.ack', (m) => m.jobId === jobId && m.step === step, 5_000, from)).offset;
    };

    let raw = await connect(a, []);
    const res = await admin.client.post('/deploy', { projectId, commit: 'e'.repeat(40) });
    expect(res.status, res.text).toBe(200);
    const deployId = res.json.deployId as string;
    const assign = await raw.next('job.assign', (m) => m.deploymentId === deployId, 15_000);
    const jobId = assign.jobId;
    raw.send({ type: 'job.accepted', jobId });
    raw.send({
      type: 'step.started',
      jobId,
      step: 0,
      cmd: `git checkout --force --detach ${'e'.repeat(40)}`,
    });
    raw.send({ type: 'step.finished', jobId, step: 0, exitCode: 0, signal: null, outputBytes: 0 });
    raw.send({ type: 'step.started', jobId, step: 1, cmd: 'print three lines' });
    const acks: number[] = [];
    // On A: the first line.
    acks.push(await output(raw, jobId, 1, 0, 'first\n'));
    raw.close();
    // The network blips; the reconnect lands on B: the second line.
    raw = await connect(b, [{ jobId, step: 1, offset: 6 }]);
    acks.push(await output(raw, jobId, 1, 6, 'second\n'));
    raw.close();
    // And back on A: the third line.
    raw = await connect(a, [{ jobId, step: 1, offset: 13 }]);
    acks.push(await output(raw, jobId, 1, 13, 'third\n'));
    // Every line was stored and acknowledged where it was sent (soft: go on to show the effect).
    expect.soft(acks, 'acknowledged offsets on A, B, A').toEqual([6, 13, 19]);
    raw.send({ type: 'step.finished', jobId, step: 1, exitCode: 0, signal: null, outputBytes: 19 });
    const from = raw.received.length;
    raw.send({ type: 'job.finished', jobId, status: 'success' });
    await raw.next('job.ack', (m) => m.jobId === jobId, 5_000, from);

    const viaB = new Client(b.url);
    viaB.cookie = admin.client.cookie;
    const detail = await waitFor(
      () => new Admin(viaB, b.url).detail(deployId),
      (d) => d.deployment.status !== 'running',
      10_000,
    );
    expect(detail.deployment.status).toBe('success');
    const [entry] = await storedEntries(cluster.db.url, deployId, 'print three lines');
    // The agent was told everything up to 13 was stored (by B), so it never re-sends before it.
    expect((entry?.output ?? Buffer.alloc(0)).toString('utf8')).toBe('first\nsecond\nthird\n');
  }, 60_000);
});
