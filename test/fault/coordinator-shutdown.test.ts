// Fault injection around a planned stop: the coordinator (its own process) receives SIGTERM while
// agents are connected — a real one and a few raw ones. The graceful shutdown closes their
// connections with GOING_AWAY and exits 0 promptly (README: "Ctrl-C stops Deckhand ... cleanly"),
// well before its own 15 s emergency exit; the real agent reconnects when a coordinator is back on
// that port and the database, and a deployment then runs to `success` with its exact output.
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../protocol/src/index.ts';
import {
  expectExactLog,
  faultCoordinator,
  launchAgent,
  numberedLines,
  RawAgent,
  sleep,
} from '../helpers/faults-coordinator.ts';
import { captureEvents } from '../helpers/fault-harness.ts';

const fault = faultCoordinator({
  AGENT_HEARTBEAT_MS: '300',
  AGENT_LEASE_MS: '20000',
  SCHEDULER_INTERVAL_MS: '100',
});
const { agents, raws } = fault;

describe('SIGTERM while agents are connected', () => {
  it('closes their connections with GOING_AWAY and exits 0 within 5 s, every time; agents then carry on', async () => {
    const { token } = await fault.admin.registerAgent('calm', ['calm']);
    const agent = await launchAgent(fault.coordinator.url, token);
    agents.push(agent);
    const raw = await Promise.all(
      ['calm-raw-1', 'calm-raw-2', 'calm-raw-3', 'calm-raw-4'].map(async (name) => {
        const { token: t } = await fault.admin.registerAgent(name, ['calm-raw']);
        return t;
      }),
    );
    // A viewer follows a deployment that waits (its agent never comes): its stream stays open
    // until the coordinator ends it.
    const waiting = await fault.admin.deploy(
      await fault.admin.createProject({
        name: 'waits',
        forge_url: fault.repo.url,
        commands: ['true'],
        target: { agents: { names: ['nobody'] } },
      }),
    );
    for (let round = 1; round <= 3; round++) {
      await fault.admin.waitForOnline(['calm']);
      const connections = await Promise.all(raw.map((t) => RawAgent.welcomed(fault.coordinator.url, t)));
      raws.push(...connections);
      const viewer = captureEvents(fault.coordinator.url, fault.admin.client.cookie!, waiting);
      await sleep(300);
      const started = Date.now();
      fault.coordinator.proc.child.kill('SIGTERM');
      // Agents knocking while it stops (as reconnecting agents do) must not hold the stop up.
      const knocking = setInterval(() => {
        const knock = new RawAgent(fault.coordinator.url, raw[0]!);
        knock.opened.catch(() => undefined);
        raws.push(knock);
      }, 10);
      const exit = await fault.coordinator.proc.exited;
      clearInterval(knocking);
      const tookMs = Date.now() - started;
      const output = fault.coordinator.proc.output();
      expect(
        { round, exit, forced: output.includes('shutdown took longer than 15 s') },
        `round ${round}: SIGTERM took ${tookMs} ms\n${output.slice(-3_000)}`,
      ).toEqual({ round, exit: { code: 0, signal: null }, forced: false });
      expect(tookMs, `round ${round}\n${output.slice(-4_000)}`).toBeLessThan(5_000);
      // Soft: carry on to the next rounds, where the stop may hang (the other failure to show).
      const codes = await Promise.all(connections.map(async (c) => (await c.closed).code));
      expect
        .soft(codes, `round ${round}: close codes the agents saw`)
        .toEqual(connections.map(() => CloseCode.GOING_AWAY));
      // The stream was ended, not cut: the browser reconnects with Last-Event-ID.
      const { events } = await viewer.done;
      expect(
        events.some((e) => e.event === 'deployment'),
        `round ${round}`,
      ).toBe(true);
      await fault.coordinator.restart();
    }
    // The real agent was never told to give up, and works with the coordinator that is back.
    expect(agent.child.exitCode).toBeNull();
    const { cmd, expected } = numberedLines(20, 20);
    const projectId = await fault.admin.createProject({
      name: 'calm',
      forge_url: fault.repo.url,
      commands: [cmd],
      target: { agents: { names: ['calm'] } },
    });
    const deployId = await fault.admin.deploy(projectId);
    const detail = await fault.admin.waitForEnd(deployId, 30_000);
    expect(detail.deployment.status, JSON.stringify(detail.deployment)).toBe('success');
    await expectExactLog(fault.db.url, detail, cmd, expected);
  }, 90_000);
});
