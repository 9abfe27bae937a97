// Fault injection: agents the coordinator must not (or no longer) trust. A forged token never
// gets a socket (HTTP 401 at the upgrade). Revoking a connected agent (DELETE /agents/:id) closes
// its live connection within 2 s with UNAUTHORIZED (4401); the real agent process then exits
// with code 2 and says what to do, its running job does not hang the deployment, and its token
// opens nothing any more.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CloseCode } from '../../protocol/src/index.ts';
import type { RunningAgent } from '../helpers/agents.ts';
import { startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import {
  Admin,
  launchAgent,
  coordinatorCluster,
  numberedLines,
  RawAgent,
  sleep,
  stopAll,
  storedEntries,
  tails,
} from '../helpers/faults-coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import type { CoordinatorProcess } from '../helpers/processes.ts';
import { del } from '../helpers/projects.ts';
import { sql } from '../helpers/sql.ts';

let coordinator: TestCoordinator;
let admin: Admin;
let repo: TestRepo;
const agents: RunningAgent[] = [];
const raws: RawAgent[] = [];

beforeAll(async () => {
  coordinator = await startCoordinator({
    AGENT_HEARTBEAT_MS: '300',
    AGENT_LEASE_MS: '2000',
    AGENT_ABANDON_GRACE_MS: '30000',
    SCHEDULER_INTERVAL_MS: '100',
  });
  admin = await Admin.signUp(coordinator.url);
  admin.diagnostics = () => tails(...agents);
  repo = await createTestRepo();
  await repo.commit({ 'app.txt': 'v1\n' }, 'first');
}, 60_000);

afterAll(async () => {
  for (const raw of raws) raw.close();
  await stopAll(agents);
  // Let the coordinator record those disconnects before it stops (see coordinator-shutdown.test.ts).
  await sleep(500);
  await coordinator?.close();
  await repo?.remove();
}, 60_000);

/** Opens a raw connection with `token` and waits until it is refused or open. */
async function tryConnect(token: string): Promise<RawAgent> {
  const raw = new RawAgent(coordinator.url, token);
  raws.push(raw);
  await raw.opened.catch(() => undefined);
  return raw;
}

describe('a forged token', () => {
  it.each([
    ['a well-formed token nobody was given', `dha_${randomBytes(32).toString('base64url')}`],
    ['a token without the agent prefix', randomBytes(32).toString('hex')],
    ['an empty token', ''],
  ])('%s: the upgrade is refused with 401 and no socket', async (_name, token) => {
    const before = await sql(
      coordinator,
      'select count(*)::int as n from agents where connected_to is not null',
    );
    const raw = await tryConnect(token);
    expect(raw.refusedStatus).toBe(401);
    expect(raw.isOpen).toBe(false);
    const after = await sql(
      coordinator,
      'select count(*)::int as n from agents where connected_to is not null',
    );
    expect(after).toEqual(before);
  });

  it('a real agent with a forged token exits with code 2 and says what to do', async () => {
    const agent = await launchAgent(coordinator.url, `dha_${randomBytes(32).toString('base64url')}`);
    agents.push(agent);
    const exit = await Promise.race([
      agent.exited,
      new Promise<null>((resolve) => setTimeout(() => resolve(null), 10_000)),
    ]);
    expect(exit, agent.output()).toEqual({ code: 2, signal: null });
    expect(agent.output()).toContain('The coordinator refused the agent token (HTTP 401)');
  });
});

describe('revoking a connected agent (DELETE /agents/:id)', () => {
  it('closes a live connection within 2 s with UNAUTHORIZED (4401); the token then gets 401', async () => {
    const { id, token } = await admin.registerAgent('revoke-raw', ['revoke-raw']);
    const raw = await RawAgent.welcomed(coordinator.url, token);
    raws.push(raw);
    const started = Date.now();
    const res = await del(admin.client, `/agents/${id}`);
    expect(res.status).toBe(200);
    const closed = await Promise.race([
      raw.closed,
      new Promise<null>((resolve) => setTimeout(() => resolve(null), 2_000)),
    ]);
    expect(closed, 'the connection was still open 2 s after the revocation').not.toBeNull();
    expect(closed!.code).toBe(CloseCode.UNAUTHORIZED);
    expect(Date.now() - started).toBeLessThan(2_000);
    const again = await tryConnect(token);
    expect(again.refusedStatus).toBe(401);
  });

  it('a real agent running a command: its connection closes at once, it exits with code 2 and a message, its deployment ends', async () => {
    const { id, token } = await admin.registerAgent('revoke-1', ['revoke-1']);
    const agent = await launchAgent(coordinator.url, token);
    agents.push(agent);
    await admin.waitForOnline(['revoke-1']);
    const { cmd, expected } = numberedLines(400, 50); // ~20 s: still running when revoked
    const projectId = await admin.createProject({
      name: 'revoked',
      forge_url: repo.url,
      commands: [cmd],
      target: { agents: { names: ['revoke-1'] } },
    });
    const deployId = await admin.deploy(projectId);
    await admin.waitForOutput(deployId, cmd);
    const started = Date.now();
    expect((await del(admin.client, `/agents/${id}`)).status).toBe(200);
    const exit = await Promise.race([
      agent.exited,
      new Promise<null>((resolve) => setTimeout(() => resolve(null), 10_000)),
    ]);
    expect(exit, agent.output()).toEqual({ code: 2, signal: null });
    // The agent learns of it from the close code: 4401 is the only close it reads as "revoked",
    // and it says so (on stderr for a person, in its log with the time).
    expect(agent.output()).toContain('deckhand-agent: The coordinator revoked this agent token');
    const fatal = agent
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{') && l.includes('revoked this agent token'))
      .map((l) => JSON.parse(l) as { time: number; level: number });
    expect(fatal.length).toBeGreaterThan(0);
    const toldAt = Math.min(...fatal.map((l) => l.time));
    expect(toldAt - started, 'the connection closed late').toBeLessThan(2_000);
    // Its token opens nothing any more.
    const again = await tryConnect(token);
    expect(again.refusedStatus).toBe(401);
    // The job it held does not keep the deployment running forever (its agent is gone).
    const detail = await admin.waitForEnd(deployId, 15_000);
    expect(detail.deployment.status).toBe('failed');
    // What it stored before is exactly a prefix of what it printed: nothing lost in between,
    // nothing repeated, then the coordinator's note of how the step ended.
    const [entry] = await storedEntries(dbUrl(), deployId, cmd);
    const stored = (entry?.output ?? Buffer.alloc(0)).toString('utf8');
    const note = stored.indexOf('\n[deckhand] ');
    expect(note).toBeGreaterThan(0);
    const printed = stored.slice(0, note);
    expect(expected.startsWith(printed)).toBe(true);
    expect(printed.length).toBeGreaterThan(0);
    expect(entry!.status).toBe('failed');
  }, 60_000);
});

describe('revoking an agent connected to another replica', () => {
  // Two coordinator processes on one database, as README's replicas ("give every replica the same").
  const cluster = coordinatorCluster(2, { AGENT_HEARTBEAT_MS: '300', SCHEDULER_INTERVAL_MS: '100' });
  const replicas = cluster.processes;

  it('closes its connection there too within 2 s (4401), not only on the replica that served the DELETE', async () => {
    const [a, b] = replicas as [CoordinatorProcess, CoordinatorProcess];
    const adminA = await Admin.signUp(a.url);
    const { id, token } = await adminA.registerAgent('replica-1', ['replica-1']);
    const raw = await RawAgent.welcomed(b.url, token);
    cluster.raws.push(raw);
    await adminA.waitForOnline(['replica-1']);
    const started = Date.now();
    expect((await del(adminA.client, `/agents/${id}`)).status).toBe(200);
    const closed = await Promise.race([
      raw.closed,
      new Promise<null>((resolve) => setTimeout(() => resolve(null), 2_000)),
    ]);
    expect(
      closed,
      `the revoked agent's connection to the other replica was still open ${Date.now() - started} ms later`,
    ).not.toBeNull();
    expect(closed!.code).toBe(CloseCode.UNAUTHORIZED);
    expect((await tryConnectTo(b.url, token)).refusedStatus).toBe(401);
  });
});

async function tryConnectTo(url: string, token: string): Promise<RawAgent> {
  const raw = new RawAgent(url, token);
  raws.push(raw);
  await raw.opened.catch(() => undefined);
  return raw;
}

/** This file's database URL, as the coordinator's ORM has it. */
function dbUrl(): string {
  return coordinator.orm.config.get('clientUrl') as string;
}
