// Fault injection: of two coordinator processes behind one address (a TCP proxy standing in for
// the load balancer), the one holding a real agent is killed (SIGKILL) in the middle of a command.
// The balancer sends the agent's reconnect to the other process, which takes the agent over: the
// deployment is not lost, it ends `success`, and every byte the command printed is stored once.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../helpers/coordinator.ts';
import {
  Admin,
  expectExactLog,
  coordinatorCluster,
  launchAgent,
  numberedLines,
  sleep,
  tails,
} from '../helpers/faults-coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import type { CoordinatorProcess } from '../helpers/processes.ts';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts';

const cluster = coordinatorCluster(2, {
  AGENT_HEARTBEAT_MS: '300',
  AGENT_LEASE_MS: '3000',
  SCHEDULER_INTERVAL_MS: '200',
});
let a: CoordinatorProcess;
let b: CoordinatorProcess;
let balancer: TcpProxy;
let repo: TestRepo;

beforeAll(async () => {
  [a, b] = cluster.processes as [CoordinatorProcess, CoordinatorProcess];
  balancer = await startTcpProxy(a.port);
  repo = await createTestRepo();
  await repo.commit({ 'app.txt': 'v1\n' }, 'first');
}, 30_000);

afterAll(async () => {
  await balancer?.close();
  await repo?.remove();
});

describe('the coordinator process holding an agent dies mid-command', () => {
  it('the other process takes the agent over when it reconnects; the deployment succeeds with its exact log', async () => {
    const admin = await Admin.signUp(balancer.url);
    const { token } = await admin.registerAgent('takeover', ['takeover']);
    const agent = await launchAgent(balancer.url, token);
    cluster.agents.push(agent);
    admin.diagnostics = () => tails(a.proc, b.proc, agent);
    await admin.waitForOnline(['takeover']);
    const { cmd, expected } = numberedLines(120, 40); // ~5 s of output
    const projectId = await admin.createProject({
      name: 'takeover',
      forge_url: repo.url,
      commands: [cmd],
      target: { agents: { names: ['takeover'] } },
    });
    const deployId = await admin.deploy(projectId);
    await admin.waitForOutput(deployId, cmd);
    await sleep(1_000);

    // A dies without a word; the balancer now sends everyone to B.
    a.proc.child.kill('SIGKILL');
    await a.proc.exited;
    balancer.retarget(b.port);

    const viaB = new Client(b.url);
    viaB.cookie = admin.client.cookie;
    const detail = await new Admin(viaB, b.url).waitForEnd(deployId, 40_000);
    expect(detail.deployment.status, `${detail.deployment.reason}\n${tails(b.proc, agent)}`).toBe('success');
    await expectExactLog(cluster.db.url, detail, cmd, expected);
    expect(agent.child.exitCode).toBeNull();
  }, 90_000);
});
