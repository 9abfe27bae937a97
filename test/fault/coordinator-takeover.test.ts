// Fault injection: of two coordinator processes behind one address (a TCP proxy standing in for
// the load balancer), the one holding a real agent is killed (SIGKILL) in the middle of a command.
// The balancer sends the agent's reconnect to the other process, which takes the agent over: the
// deployment is not lost, it ends `success`, and every byte the command printed is stored once.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningAgent } from '../helpers/agents.ts';
import { Client } from '../helpers/coordinator.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import {
  Admin,
  expectExactLog,
  launchAgent,
  launchCoordinator,
  numberedLines,
  sleep,
  stopAll,
  tails,
} from '../helpers/faults-coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import type { CoordinatorProcess } from '../helpers/processes.ts';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts';

let db: TestDatabase;
let a: CoordinatorProcess;
let b: CoordinatorProcess;
let balancer: TcpProxy;
let repo: TestRepo;
const agents: RunningAgent[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  const env = {
    DATABASE_URL: db.url,
    DECKHAND_SECRET: randomBytes(32).toString('base64url'),
    AGENT_HEARTBEAT_MS: '300',
    AGENT_LEASE_MS: '3000',
    SCHEDULER_INTERVAL_MS: '200',
  };
  a = await launchCoordinator(env);
  b = await launchCoordinator(env);
  balancer = await startTcpProxy(a.port);
  repo = await createTestRepo();
  await repo.commit({ 'app.txt': 'v1\n' }, 'first');
}, 90_000);

afterAll(async () => {
  await stopAll(agents);
  await sleep(300);
  await Promise.allSettled([a?.stop(), b?.stop()]);
  await balancer?.close();
  await db?.drop();
  await repo?.remove();
}, 60_000);

describe('the coordinator process holding an agent dies mid-command', () => {
  it('the other process takes the agent over when it reconnects; the deployment succeeds with its exact log', async () => {
    const admin = await Admin.signUp(balancer.url);
    const { token } = await admin.registerAgent('takeover', ['takeover']);
    const agent = await launchAgent(balancer.url, token);
    agents.push(agent);
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
    await expectExactLog(db.url, detail, cmd, expected);
    expect(agent.child.exitCode).toBeNull();
  }, 90_000);
});
