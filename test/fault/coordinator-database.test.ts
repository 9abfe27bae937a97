// Fault injection: PostgreSQL goes away for a few seconds under a running coordinator (its own
// process, on a PostgreSQL server of this file's own) while a real agent's command prints
// steadily. Meanwhile the coordinator answers 503 — `/readyz` and the API alike, as
// `{success: false, error}`, never a 500 — and stays alive; when the database is back the
// deployment ends `success` and the output printed during the outage is stored exactly once.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningAgent } from '../helpers/agents.ts';
import { Client, type HttpResponse } from '../helpers/coordinator.ts';
import {
  Admin,
  expectExactLog,
  launchAgent,
  launchCoordinator,
  logLines,
  numberedLines,
  sleep,
  stopAll,
  tails,
} from '../helpers/faults-coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { type OwnPostgres, startOwnPostgres } from '../helpers/own-postgres.ts';
import type { CoordinatorProcess } from '../helpers/processes.ts';
import { expectJsonError } from '../helpers/responses.ts';

const SECRET = randomBytes(32).toString('base64url');
let pg: OwnPostgres;
let coordinator: CoordinatorProcess;
let admin: Admin;
let repo: TestRepo;
const agents: RunningAgent[] = [];

async function startWithLease(leaseMs: number): Promise<void> {
  coordinator = await launchCoordinator({
    DATABASE_URL: pg.url,
    DECKHAND_SECRET: SECRET,
    AGENT_HEARTBEAT_MS: '300',
    AGENT_LEASE_MS: String(leaseMs),
    AGENT_ABANDON_GRACE_MS: '30000',
    SCHEDULER_INTERVAL_MS: '100',
  });
}

beforeAll(async () => {
  pg = await startOwnPostgres();
  repo = await createTestRepo();
  await repo.commit({ 'app.txt': 'v1\n' }, 'first');
  await startWithLease(10_000);
  admin = await Admin.signUp(coordinator.url);
}, 90_000);

afterAll(async () => {
  await stopAll(agents);
  // Let the coordinator record those disconnects before it stops (see coordinator-shutdown.test.ts).
  await sleep(500);
  await coordinator?.stop();
  await pg?.remove();
  await repo?.remove();
}, 60_000);

/**
 * Stops PostgreSQL for `outageMs` while `during` runs against the coordinator; starts it again.
 * When it stopped and when it answered again.
 */
async function outage(
  outageMs: number,
  during: () => Promise<void>,
): Promise<{ stoppedAt: number; backAt: number }> {
  const stoppedAt = Date.now();
  await pg.stop();
  try {
    await during();
    await sleep(Math.max(0, stoppedAt + outageMs - Date.now()));
  } finally {
    await pg.start();
  }
  return { stoppedAt, backAt: Date.now() };
}

async function runThroughOutage(name: string, outageMs: number): Promise<void> {
  const { token } = await admin.registerAgent(name, [name]);
  const agent = await launchAgent(coordinator.url, token);
  agents.push(agent);
  admin.diagnostics = () => tails(coordinator.proc, agent);
  await admin.waitForOnline([name]);
  const { cmd, expected } = numberedLines(160, 50); // ~8 s of steady output
  const projectId = await admin.createProject({
    name: `p-${name}`,
    forge_url: repo.url,
    commands: [cmd],
    target: { agents: { names: [name] } },
  });
  const deployId = await admin.deploy(projectId);
  await admin.waitForOutput(deployId, cmd);
  await sleep(1_000);
  const { stoppedAt, backAt } = await outage(outageMs, async () => {
    // Give the pools a moment to notice, then ask.
    await sleep(300);
    const ready = await admin.client.get('/readyz');
    expectJsonError(ready, 503);
    const list = await admin.client.get('/deployments');
    expectJsonError(list, 503);
    const detail = await admin.client.get(`/deploy/${deployId}`);
    expectJsonError(detail, 503);
    // Liveness as a probe asks it (no session cookie).
    const health = await admin.client.get('/healthz', { cookie: null });
    expect(health.status, health.text).toBe(200);
  });
  // The process lived through it.
  expect(coordinator.proc.child.exitCode, tails(coordinator.proc)).toBeNull();
  expect(coordinator.proc.child.signalCode).toBeNull();
  const detail = await admin.waitForEnd(deployId, 40_000);
  // When it fails: what the agent tried, and when the job was given up.
  const at = (t: number) => `+${t - stoppedAt} ms`;
  const timeline = [
    `+0 ms: database stopped`,
    ...logLines(agent, 'disconnected from the coordinator')
      .filter((l) => l.time >= stoppedAt - 1_000)
      .map((l) => `${at(l.time)}: agent: ${String(l.reason)}; retries in ${String(l.retryInMs)} ms`),
    `${at(backAt)}: database answering again`,
    ...logLines(coordinator.proc, 'jobs lost with their agents (lease expired)').map(
      (l) => `${at(l.time)}: coordinator: job given up as lost`,
    ),
    ...logLines(agent, 'connected')
      .filter((l) => l.time >= stoppedAt)
      .map((l) => `${at(l.time)}: agent welcomed again`),
    `deployment: ${detail.deployment.status} (${detail.deployment.reason})`,
  ];
  expect(detail.deployment.status, timeline.join('\n')).toBe('success');
  await expectExactLog(pg.url, detail, cmd, expected);
  expect((await admin.client.get('/readyz')).status).toBe(200);
  expect(agent.child.exitCode).toBeNull();
}

describe('the database goes away for 3 s while a command prints', () => {
  it('answers 503 meanwhile, stays alive, and stores every byte once when it is back (lease longer than the outage)', async () => {
    await runThroughOutage('db-1', 3_000);
  }, 70_000);

  it('also when the outage outlasts the lease: an agent the coordinator could not record is not "lost"', async () => {
    // Its agents leave first, so that the planned stop is quick (see coordinator-shutdown.test.ts).
    await stopAll(agents);
    await sleep(500);
    await coordinator.stop();
    await startWithLease(2_000);
    // Same database and secret: the session carries over to the new process (and port).
    const client = new Client(coordinator.url);
    client.cookie = admin.client.cookie;
    admin = new Admin(client, coordinator.url);
    admin.diagnostics = () => tails(coordinator.proc);
    await runThroughOutage('db-2', 3_000);
  }, 70_000);

  it('GET /healthz stays 200 during the outage also for a browser that holds a session cookie', async () => {
    // Liveness is "the process answers"; it must not depend on the database, whoever asks.
    expect((await admin.client.get('/healthz')).status).toBe(200);
    let withCookie: HttpResponse | undefined;
    let withoutCookie: HttpResponse | undefined;
    await outage(1_000, async () => {
      await sleep(300);
      withoutCookie = await admin.client.get('/healthz', { cookie: null });
      withCookie = await admin.client.get('/healthz');
    });
    expect(withoutCookie!.status, withoutCookie!.text).toBe(200);
    expect(withCookie!.status, withCookie!.text).toBe(200);
    expect(withCookie!.json).toEqual({ success: true, status: 'ok' });
  }, 30_000);
});
