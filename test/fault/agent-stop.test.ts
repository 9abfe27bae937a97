// Stopping real processes: a cancel of a command whose background grandchildren ignore SIGTERM,
// a command past its own time limit, and a deployment past its deadline. Each ends in the right
// state only once the agent confirmed, with every process of the step gone and the output printed
// before the stop stored exactly, followed by the note saying why it stopped.
import { describe, expect, it } from 'vitest';
import { entriesOf, entryFor, faultHarness, sleep } from '../helpers/fault-harness.ts';
import { groupMembers, processAlive, readPids } from '../helpers/fault-processes.ts';
import { sql } from '../helpers/sql.ts';

describe('stopping a step', () => {
  const h = faultHarness({ AGENT_LEASE_MS: '5000', AGENT_ABANDON_GRACE_MS: '1000' });

  it('cancel of a command whose background grandchildren ignore SIGTERM: cancelled once the agent confirmed, every pid gone, output kept, the rest skipped', async () => {
    const a = await h.launchAgent({ args: ['--kill-grace-ms', '500'] });
    const dir = await h.tempDir();
    // Each grandchild records its pid and becomes `sleep` (exec keeps the pid and the ignored TERM).
    const stubborn = `bash -c 'trap "" TERM; echo $$ >> ${dir}/kids; exec sleep 600'`;
    const cmd = `echo $$ > ${dir}/pid; ${stubborn} & ${stubborn} & echo started; wait`;
    const { id: projectId } = await h.createProject(a, { commands: [cmd, 'echo never'] });
    const id = await h.deploy(projectId);
    await h.waitForDetail(id, '"started" stored', (d) =>
      d.logs.some((l: { cmd: string; log: string }) => l.cmd === cmd && l.log === 'started\n'),
    );
    let kids: number[] = [];
    for (let i = 0; i < 50 && kids.length < 2; i++) {
      kids = await readPids(`${dir}/kids`);
      if (kids.length < 2) await sleep(50);
    }
    const [shell] = await readPids(`${dir}/pid`);
    const pids = [shell!, ...kids];
    expect(kids).toHaveLength(2);
    expect(pids.every(processAlive)).toBe(true);

    const res = await h.admin.post(`/deploy/${id}/cancel`);
    expect(res.status, res.text).toBe(200);
    const cancelledAt = Date.now();
    // Asked, not done: the agent has not confirmed yet.
    expect(res.json.deployment.status).toBe('running');
    await sleep(200);
    expect((await h.detail(id)).deployment.status).toBe('running');

    // The first answer that says cancelled: by then every process of the step is gone.
    const d = await h.waitForDetail(
      id,
      'the deployment cancelled',
      (x) => x.deployment.status !== 'running',
      15_000,
    );
    const pidsAlive = pids.filter(processAlive);
    const groupAlive = groupMembers(shell!);
    expect(d.deployment.status).toBe('cancelled');
    expect(pidsAlive).toEqual([]);
    expect(groupAlive).toEqual([]);
    // The grandchildren ignored TERM, so only the KILL after the grace could end them.
    expect(Date.now() - cancelledAt).toBeGreaterThanOrEqual(500);

    const reason: string = d.deployment.reason;
    expect(reason).toMatch(/^Cancelled by /);
    const entry = entryFor(d, cmd);
    expect(entry.status).toBe('cancelled');
    expect(entry.log).toBe(`started\n\n[deckhand] cancelled: ${reason}\n`);
    expect(entryFor(d, 'echo never')).toMatchObject({ status: 'skipped', log: '' });
    const [job] = await sql(h.coord, 'select status from deployment_jobs where deployment_id = ?', [id]);
    expect(job.status).toBe('cancelled');
    expect(h.strays()).toEqual([]);
  });

  it('cancel of a command that cleans up on SIGTERM: what it prints while stopping is stored, before the cancel note', async () => {
    const a = await h.launchAgent({ args: ['--kill-grace-ms', '3000'] });
    const dir = await h.tempDir();
    const cmd = `echo $$ > ${dir}/pid; trap 'echo "cleaning up"; sleep 0.3; echo "cleaned"; exit 143' TERM; echo started; sleep 600 & wait`;
    const { id: projectId } = await h.createProject(a, { commands: [cmd, 'echo never'] });
    const id = await h.deploy(projectId);
    await h.waitForDetail(id, '"started" stored', (d) =>
      d.logs.some((l: { cmd: string; log: string }) => l.cmd === cmd && l.log === 'started\n'),
    );
    const [pgid] = await readPids(`${dir}/pid`);
    const res = await h.admin.post(`/deploy/${id}/cancel`);
    expect(res.status, res.text).toBe(200);
    const d = await h.waitForEnd(id, 15_000);
    expect(groupMembers(pgid!)).toEqual([]);
    expect(d.deployment.status).toBe('cancelled');
    expect(entryFor(d, cmd).log).toBe(
      `started\ncleaning up\ncleaned\n\n[deckhand] cancelled: ${d.deployment.reason}\n`,
    );
    expect(entryFor(d, 'echo never').status).toBe('skipped');
    expect(h.strays()).toEqual([]);
  });

  it('a command past command_seconds: timed_out, the entry ends with the timed-out note, the process is gone', async () => {
    const a = await h.launchAgent({ args: ['--kill-grace-ms', '500'] });
    const dir = await h.tempDir();
    const cmd = `echo $$ > ${dir}/pid; echo before; sleep 30`;
    const { id: projectId } = await h.createProject(a, {
      commands: [cmd, 'echo never'],
      timeouts: { command_seconds: 1 },
    });
    const id = await h.deploy(projectId);
    const d = await h.waitForEnd(id, 15_000);
    const [pgid] = await readPids(`${dir}/pid`);
    expect(groupMembers(pgid!)).toEqual([]);

    expect(d.deployment.status).toBe('timed_out');
    expect(d.deployment.reason).toBe(`${a.name}: command 1 (${cmd}) timed out after 1 s`);
    const entry = entryFor(d, cmd);
    expect(entry.status).toBe('timed_out');
    expect(entry.log).toBe('before\n\n[deckhand] timed out after 1 s\n');
    expect(entryFor(d, 'echo never')).toMatchObject({ status: 'skipped', log: '' });
    const [job] = await sql(h.coord, 'select status from deployment_jobs where deployment_id = ?', [id]);
    expect(job.status).toBe('timed_out');
    expect(h.strays()).toEqual([]);
  });

  it('a deployment past deployment_seconds: timed_out, the running step stopped, what ran before kept, the rest skipped', async () => {
    const a = await h.launchAgent({ args: ['--kill-grace-ms', '500'] });
    const dir = await h.tempDir();
    const commands = ['one', 'two', 'three', 'four'].map(
      (word, i) => `echo $$ > ${dir}/pid${i + 1}; sleep 1.5; echo ${word}`,
    );
    const { id: projectId } = await h.createProject(a, {
      commands,
      timeouts: { deployment_seconds: 2 },
    });
    const id = await h.deploy(projectId);
    const d = await h.waitForEnd(id, 15_000);
    expect(d.deployment.status).toBe('timed_out');
    expect(d.deployment.reason).toBe('The deployment ran longer than its limit of 2 s');

    const entries = entriesOf(d).filter((e) => commands.includes(e.cmd));
    expect(entries.map((e) => e.cmd)).toEqual(commands);
    const stopped = entries.findIndex((e) => e.status === 'timed_out');
    // The deadline (2 s) falls in the second command (1.5 s each, after the checkout).
    expect(stopped).toBeGreaterThanOrEqual(0);
    expect(stopped).toBeLessThanOrEqual(1);
    entries.slice(0, stopped).forEach((e, i) => {
      expect(e).toMatchObject({ status: 'success', log: `${['one', 'two'][i]}\n` });
    });
    expect(entries[stopped].log).toBe(`\n[deckhand] timed out: ${d.deployment.reason}\n`);
    for (const e of entries.slice(stopped + 1)) expect(e).toMatchObject({ status: 'skipped', log: '' });
    for (const pgid of await readPids(`${dir}/pid${stopped + 1}`)) expect(groupMembers(pgid)).toEqual([]);
    const [job] = await sql(h.coord, 'select status from deployment_jobs where deployment_id = ?', [id]);
    expect(job.status).toBe('timed_out');
    expect(h.strays()).toEqual([]);
  });
});
