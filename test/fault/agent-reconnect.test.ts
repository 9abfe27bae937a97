// Fault injection on the network between agent and coordinator (a TCP proxy the test cuts), for
// less than the lease: the job keeps running, the agent reconnects and re-sends what the
// coordinator has not acknowledged, and the deployment ends as if nothing happened — output
// complete, every byte once and in order; ends reported during the cut arrive after it; a cancel
// asked during the cut reaches the host after it.
import { describe, expect, it } from 'vitest';
import {
  entryFor,
  faultHarness,
  numberedLines as lines,
  sleep,
  steadyPrinter,
  waitFor,
} from '../helpers/fault-harness.ts';
import { groupMembers, readPids } from '../helpers/fault-processes.ts';
import { sql } from '../helpers/sql.ts';

describe('lease 6 s', () => {
  const h = faultHarness({ AGENT_LEASE_MS: '6000', AGENT_ABANDON_GRACE_MS: '1000' });

  it('a cut shorter than the lease while a command prints: the job keeps running, the agent reconnects, success with every byte once, in order', async () => {
    const a = await h.launchAgent({ viaProxy: true });
    const dir = await h.tempDir();
    const n = 400;
    const cmd = steadyPrinter(`${dir}/pid`, n);
    const { id: projectId } = await h.createProject(a, { commands: [cmd, 'echo after'] });
    const id = await h.deploy(projectId);
    await h.waitForDetail(id, 'output of the command stored', (d) =>
      d.logs.some((l: { cmd: string; log: string }) => l.cmd === cmd && l.log.split('\n').length > 60),
    );
    const [pgid] = await readPids(`${dir}/pid`);

    a.proxy!.cut();
    await sleep(1_000);
    // Cut off: the coordinator has not given up, and the command prints on.
    expect(await h.online(a.name)).toBe(false);
    expect((await h.detail(id)).deployment.status).toBe('running');
    expect(groupMembers(pgid!).length).toBeGreaterThan(0);
    a.proxy!.restore();

    await waitFor('the agent back online', () => h.online(a.name), { timeoutMs: 10_000 });
    const d = await h.waitForEnd(id, 30_000);
    expect(d.deployment.status).toBe('success');
    const entry = entryFor(d, cmd);
    expect(entry).toMatchObject({ status: 'success', exit_code: 0 });
    expect(entry.log).toBe(lines(n));
    expect(entryFor(d, 'echo after').log).toBe('after\n');
    const [job] = await sql(h.coord, 'select status, reason from deployment_jobs where deployment_id = ?', [
      id,
    ]);
    expect(job).toMatchObject({ status: 'success', reason: null });
    expect((a.agent.output().match(/"msg":"connected"/g) ?? []).length).toBe(2);
    expect(h.strays()).toEqual([]);
  });

  it('a job that ends during a short cut: its output and ends are re-sent after the reconnect, success, every byte once', async () => {
    const a = await h.launchAgent({ viaProxy: true });
    const n = 150;
    const cmd = `for i in $(seq 1 ${n}); do echo "line $i"; sleep 0.01; done`;
    const { id: projectId } = await h.createProject(a, { commands: ['echo first', cmd, 'echo last'] });
    const id = await h.deploy(projectId);
    await h.waitForDetail(id, 'the loop printing', (d) =>
      d.logs.some((l: { cmd: string; log: string }) => l.cmd === cmd && l.log.length > 0),
    );
    a.proxy!.cut();
    // The loop (~2 s) and the last command end while the agent is cut off.
    await waitFor('the job to end on the agent', () => /"msg":"job finished"/.test(a.agent.output()), {
      timeoutMs: 4_500,
    });
    expect((await h.detail(id)).deployment.status).toBe('running');
    a.proxy!.restore();
    const d = await h.waitForEnd(id, 15_000);
    expect(d.deployment.status).toBe('success');
    expect(entryFor(d, 'echo first').log).toBe('first\n');
    expect(entryFor(d, cmd)).toMatchObject({ status: 'success', log: lines(n) });
    expect(entryFor(d, 'echo last')).toMatchObject({ status: 'success', log: 'last\n' });
    expect(h.strays()).toEqual([]);
  });

  it('a cancel asked while the agent is cut off reaches it after the reconnect: the command stops, cancelled once confirmed', async () => {
    const a = await h.launchAgent({ viaProxy: true, args: ['--kill-grace-ms', '500'] });
    const dir = await h.tempDir();
    const cmd = `echo $$ > ${dir}/pid; echo started; sleep 600`;
    const { id: projectId } = await h.createProject(a, { commands: [cmd, 'echo never'] });
    const id = await h.deploy(projectId);
    await h.waitForDetail(id, '"started" stored', (d) =>
      d.logs.some((l: { cmd: string; log: string }) => l.cmd === cmd && l.log === 'started\n'),
    );
    const [pgid] = await readPids(`${dir}/pid`);
    a.proxy!.cut();
    await waitFor('the agent offline', async () => !(await h.online(a.name)));
    const res = await h.admin.post(`/deploy/${id}/cancel`);
    expect(res.status, res.text).toBe(200);
    await sleep(500);
    // Nobody told the host yet: still running there, and so on the coordinator.
    expect((await h.detail(id)).deployment.status).toBe('running');
    expect(groupMembers(pgid!).length).toBeGreaterThan(0);
    a.proxy!.restore();
    const d = await h.waitForEnd(id, 15_000);
    expect(groupMembers(pgid!)).toEqual([]);
    expect(d.deployment.status).toBe('cancelled');
    expect(entryFor(d, cmd).log).toBe(`started\n\n[deckhand] cancelled: ${d.deployment.reason}\n`);
    expect(entryFor(d, 'echo never').status).toBe('skipped');
    expect(h.strays()).toEqual([]);
  });
});
