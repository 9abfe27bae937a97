// Fault injection on the agent, with real processes: the agent SIGKILLed in the middle of a
// command (with and without a restart), and the network between agent and coordinator cut (a TCP
// proxy) for longer than lease + grace. Deployments never stay running, the output stored is
// exactly what the command printed up to the fault, and a job cut off for too long is stopped on
// the host by the agent itself.
import { describe, expect, it } from 'vitest';
import {
  entryFor,
  faultHarness,
  numberedLines as lines,
  sleep,
  steadyPrinter,
  waitFor,
} from '../helpers/fault-harness.ts';
import { groupMembers, processAlive, readPids } from '../helpers/fault-processes.ts';
import { sql } from '../helpers/sql.ts';

const AGENT_LOST = '\n[deckhand] agent lost\n';

describe('lease 1.5 s, abandon grace 1 s', () => {
  const h = faultHarness({ AGENT_LEASE_MS: '1500', AGENT_ABANDON_GRACE_MS: '1000' });

  it('kill -9 of the agent mid-command: failed after the lease, "agent lost" at the end of the entry, output up to the kill kept', async () => {
    const a = await h.launchAgent();
    const dir = await h.tempDir();
    const n = 5000;
    const cmd = steadyPrinter(`${dir}/pid`, n);
    const { id: projectId } = await h.createProject(a, { commands: [cmd, 'echo never'] });
    const id = await h.deploy(projectId);

    const running = await h.waitForDetail(id, 'output of the command stored', (d) =>
      d.logs.some((l: { cmd: string; log: string }) => l.cmd === cmd && l.log.split('\n').length > 40),
    );
    const seen: string = entryFor(running, cmd).log;
    const [pgid] = await readPids(`${dir}/pid`);
    expect(pgid).toBeGreaterThan(0);

    a.agent.child.kill('SIGKILL');
    const killedAt = Date.now();
    await a.agent.exited;

    // Not before the lease ran out (it was renewed at most one heartbeat before the kill) …
    await sleep(900);
    expect((await h.detail(id)).deployment.status).toBe('running');
    // … and then it ends, without anyone reporting anything.
    const d = await h.waitForEnd(id, 10_000);
    const endedAfter = Date.now() - killedAt;
    expect(d.deployment.status).toBe('failed');
    expect(d.deployment.reason).toContain('agent lost');
    expect(d.deployment.reason).toContain(a.name);
    expect(endedAfter).toBeLessThan(1500 + 300 + 2000);

    const entry = entryFor(d, cmd);
    expect(entry.status).toBe('failed');
    expect(entry.log.endsWith(AGENT_LOST)).toBe(true);
    const stored = entry.log.slice(0, -AGENT_LOST.length);
    // What was there before the kill is still there, and all of it is the command's own output, in order.
    expect(stored.startsWith(seen)).toBe(true);
    expect(lines(n).startsWith(stored)).toBe(true);
    expect(stored.length).toBeLessThan(lines(n).length);
    expect(entryFor(d, 'echo never')).toMatchObject({ status: 'skipped', log: '' });
    const [job] = await sql(h.coord, 'select status, reason from deployment_jobs where deployment_id = ?', [
      id,
    ]);
    expect(job).toMatchObject({ status: 'failed', reason: 'agent lost' });

    // The loop's next `echo` hits a pipe nobody reads any more (SIGPIPE): nothing is left behind.
    await waitFor('the orphaned command to die', () => groupMembers(pgid!).length === 0, {
      timeoutMs: 5_000,
    });
    expect(h.strays()).toEqual([]);
  });

  it('kill -9 of the agent while a quiet command runs, then the agent restarts: the job is lost, and its orphaned processes do not keep running', async () => {
    const a = await h.launchAgent();
    const dir = await h.tempDir();
    // Prints once, then stays quiet: no SIGPIPE will ever end it.
    const cmd = `echo $$ > ${dir}/pid; echo migrating; sleep 600`;
    const { id: projectId } = await h.createProject(a, { commands: [cmd] });
    const id = await h.deploy(projectId);
    await h.waitForDetail(id, 'the command started', (d) =>
      d.logs.some((l: { cmd: string; log: string }) => l.cmd === cmd && l.log === 'migrating\n'),
    );
    const [pgid] = await readPids(`${dir}/pid`);
    expect(groupMembers(pgid!).length).toBeGreaterThan(0);

    a.agent.child.kill('SIGKILL');
    await a.agent.exited;
    await waitFor('the agent offline', async () => !(await h.online(a.name)));
    const again = await h.relaunchAgent(a);

    // The job is lost (the lease ran out, or the restarted agent's hello did not list it).
    const d = await h.waitForEnd(id, 10_000);
    expect(d.deployment.status).toBe('failed');
    expect(d.deployment.reason).toMatch(/agent lost|the agent restarted while running it/);
    expect(entryFor(d, cmd).log.startsWith('migrating\n')).toBe(true);
    // What the lost job started must not go on running beside the next deployment of this folder.
    await waitFor(
      `the orphaned process group ${pgid} to be stopped`,
      () => groupMembers(pgid!).length === 0,
      {
        timeoutMs: 5_000,
        explain: () =>
          `still alive in group ${pgid}: ${groupMembers(pgid!).join(', ')}\n` +
          again.agent.output().slice(-2000),
      },
    );
  });

  it('a cut longer than lease + grace: failed (agent lost) on the coordinator, the agent kills the group itself, and reports abandoned late without harm', async () => {
    const a = await h.launchAgent({ viaProxy: true, args: ['--kill-grace-ms', '500'] });
    const dir = await h.tempDir();
    const n = 5000;
    const cmd = steadyPrinter(`${dir}/pid`, n, 'tick');
    const { id: projectId } = await h.createProject(a, { commands: [cmd, 'echo never'] });
    const id = await h.deploy(projectId);
    await h.waitForDetail(id, 'output of the command stored', (d) =>
      d.logs.some((l: { cmd: string; log: string }) => l.cmd === cmd && l.log.split('\n').length > 20),
    );
    const [pgid] = await readPids(`${dir}/pid`);
    expect(groupMembers(pgid!).length).toBeGreaterThan(0);

    a.proxy!.cut();
    const cutAt = Date.now();

    // The coordinator gives the job up after the lease …
    const d = await h.waitForEnd(id, 10_000);
    expect(d.deployment.status).toBe('failed');
    expect(d.deployment.reason).toContain('agent lost');
    const entry = entryFor(d, cmd);
    expect(entry.status).toBe('failed');
    expect(entry.log.endsWith(AGENT_LOST)).toBe(true);
    expect(lines(n, 'tick').startsWith(entry.log.slice(0, -AGENT_LOST.length))).toBe(true);
    expect(entryFor(d, 'echo never').status).toBe('skipped');
    // … while on the host the command still runs: the agent is only reconnecting (for now).
    expect(groupMembers(pgid!).length).toBeGreaterThan(0);

    // Past lease + grace without a welcome, the agent stops the group itself (TERM, 500 ms, KILL).
    await waitFor('the agent to kill the command', () => groupMembers(pgid!).length === 0, {
      timeoutMs: 8_000,
      explain: () => h.agentOutput().slice(-4000),
    });
    const goneAfter = Date.now() - cutAt;
    expect(goneAfter).toBeGreaterThanOrEqual(2_500 - 100);
    expect(processAlive(a.pid)).toBe(true);
    await waitFor('the agent to end the job abandoned', () =>
      /"status":"abandoned"[^\n]*"msg":"job finished"/.test(a.agent.output()),
    );

    // Back on the network: it reconnects and reports the end it had; the deployment stays failed.
    a.proxy!.restore();
    await waitFor('the agent back online', () => h.online(a.name), { timeoutMs: 40_000 });
    await sleep(1_500); // several heartbeats: the connection stays up, nothing crashes
    expect(await h.online(a.name)).toBe(true);
    expect(a.agent.child.exitCode).toBeNull();
    const after = await h.detail(id);
    expect(after.deployment).toMatchObject({ status: 'failed', reason: d.deployment.reason });
    expect(entryFor(after, cmd).log).toBe(entry.log);
    const [job] = await sql(h.coord, 'select status, reason from deployment_jobs where deployment_id = ?', [
      id,
    ]);
    expect(job.status).toBe('failed');
    // One reconnect after the cut, no protocol complaint from either side.
    expect(a.agent.output()).not.toMatch(/bad frame|broke the protocol|4400|BAD_FRAME/i);
    expect((a.agent.output().match(/"msg":"connected"/g) ?? []).length).toBe(2);
    // And it still runs jobs.
    const next = await h.createProject(a, { commands: ['echo still here'] });
    const nextDetail = await h.waitForEnd(await h.deploy(next.id));
    expect(nextDetail.deployment.status).toBe('success');
    expect(entryFor(nextDetail, 'echo still here').log).toBe('still here\n');
    expect(h.strays()).toEqual([]);
  });
});
