// Fault injection: the coordinator process dies (SIGKILL) while a real agent runs a deployment,
// and comes back on the same port and database. The agent reconnects by itself, re-sends what was
// not acknowledged, and the deployment ends `success` with every printed byte stored once, in
// order — also when the coordinator stayed down longer than the lease (start-up reconciliation
// gives in-flight jobs a fresh lease instead of declaring them lost before their agents are back).
import { describe, expect, it } from 'vitest';
import type { RunningAgent } from '../helpers/agents.ts';
import {
  type DeploymentJson,
  expectExactLog,
  faultCoordinator,
  launchAgent,
  logLines,
  numberedLines,
  sleep,
} from '../helpers/faults-coordinator.ts';

const LEASE_MS = 3_000;

const fault = faultCoordinator({
  AGENT_HEARTBEAT_MS: '300',
  AGENT_LEASE_MS: String(LEASE_MS),
  AGENT_ABANDON_GRACE_MS: '30000',
  SCHEDULER_INTERVAL_MS: '100',
});
const { agents } = fault;

/** A fresh agent (its own name and label) and a project that runs `cmd` on it. */
async function agentAndProject(
  name: string,
  cmd: string,
): Promise<{ agent: RunningAgent; projectId: string }> {
  const { token } = await fault.admin.registerAgent(name, [name]);
  const agent = await launchAgent(fault.coordinator.url, token);
  agents.push(agent);
  await fault.admin.waitForOnline([name]);
  const projectId = await fault.admin.createProject({
    name: `p-${name}`,
    forge_url: fault.repo.url,
    commands: [cmd],
    target: { agents: { names: [name] } },
  });
  return { agent, projectId };
}

/** SIGKILLs the coordinator about `atMs` after the command printed its first line; resolves once it is dead. */
async function killCoordinatorDuring(deployId: string, cmd: string, atMs: number): Promise<number> {
  await fault.admin.waitForOutput(deployId, cmd);
  await sleep(atMs);
  const killedAt = Date.now();
  fault.coordinator.proc.child.kill('SIGKILL');
  const exit = await fault.coordinator.proc.exited;
  expect(exit.signal).toBe('SIGKILL');
  return killedAt;
}

/**
 * For failure messages: when the coordinator was ready again, the reconnect delays the agent's
 * backoff chose, when the agent was welcomed again, and when the job was given up.
 */
function timeline(agent: RunningAgent, killedAt: number, detail: DeploymentJson): string {
  const at = (t: number) => `+${t - killedAt} ms`;
  const ready = logLines(fault.coordinator.proc, 'Deckhand is ready').find((l) => l.time >= killedAt);
  const lost = logLines(fault.coordinator.proc, 'jobs lost with their agents (lease expired)').find(
    (l) => l.time >= killedAt,
  );
  const retries = logLines(agent, 'disconnected from the coordinator')
    .filter((l) => l.time >= killedAt)
    .map((l) => `${at(l.time)}: agent retries in ${String(l.retryInMs)} ms`);
  const back = logLines(agent, 'connected').find((l) => l.time >= killedAt);
  return [
    `${at(killedAt)}: coordinator SIGKILLed`,
    ...retries,
    `${ready ? at(ready.time) : '?'}: coordinator ready again (lease ${LEASE_MS} ms)`,
    `${lost ? at(lost.time) : 'never'}: job given up as lost`,
    `${back ? at(back.time) : 'never'}: agent welcomed again`,
    `deployment: ${detail.deployment.status} (${detail.deployment.reason})`,
  ].join('\n');
}

describe('the coordinator is killed while an agent runs a command', () => {
  it('comes back a second later: the agent reconnects, the deployment succeeds, every line stored once in order', async () => {
    const { cmd, expected } = numberedLines(80, 50); // ~4 s
    const { agent, projectId } = await agentAndProject('restart-1', cmd);
    const deployId = await fault.admin.deploy(projectId);
    const killedAt = await killCoordinatorDuring(deployId, cmd, 1_400);
    await sleep(Math.max(0, killedAt + 1_000 - Date.now()));
    await fault.coordinator.restart();
    const detail = await fault.admin.waitForEnd(deployId, 30_000);
    expect(detail.deployment.status, timeline(agent, killedAt, detail)).toBe('success');
    await expectExactLog(fault.db.url, detail, cmd, expected);
    // The same agent process did it all: it reconnected, it was not restarted.
    expect(agent.child.exitCode).toBeNull();
    expect(agent.output().match(/"msg":"connected"/g)?.length ?? 0).toBeGreaterThanOrEqual(2);
  }, 60_000);

  it('comes back after longer than the lease: the job is not declared lost before its agent reconnects', async () => {
    const { cmd, expected } = numberedLines(200, 50); // ~10 s: still running when the agent is back
    const { agent, projectId } = await agentAndProject('restart-2', cmd);
    const deployId = await fault.admin.deploy(projectId);
    const killedAt = await killCoordinatorDuring(deployId, cmd, 1_400);
    // Down for longer than the lease: every lease in the database has expired when it starts.
    await sleep(Math.max(0, killedAt + LEASE_MS + 1_000 - Date.now()));
    await fault.coordinator.restart();
    const detail = await fault.admin.waitForEnd(deployId, 40_000);
    expect(detail.deployment.status, timeline(agent, killedAt, detail)).toBe('success');
    await expectExactLog(fault.db.url, detail, cmd, expected);
    expect(agent.child.exitCode).toBeNull();
    expect(fault.coordinator.proc.output()).toContain('jobs in flight at start-up');
  }, 70_000);
});
