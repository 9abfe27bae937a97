// Releases on a real agent: every build in its own `releases/<deployment>` folder, `current`
// switched only after the build succeeded, switched back when the health check fails, and a
// rollback (a deployment of its own) that points `current` at an earlier release again. What the
// host serves (`current/version.txt`) is checked on disk after each step, and every release step's
// log is compared byte for byte.
import { readFile, readlink } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { entryFor, faultHarness, type LogEntry } from '../helpers/fault-harness.ts';

describe('releases', () => {
  const h = faultHarness({});

  it('success switches current; a failed build leaves it; a failing health check switches back; rollback points it at the first release again', async () => {
    const a = await h.launchAgent();
    const build = 'cat version.txt';
    const gate = 'test "$(cat version.txt)" != broken';
    const healthCheck = 'cat version.txt; test "$(cat version.txt)" != unhealthy';
    const { id: projectId, name } = await h.createProject(a, {
      commands: [build, gate],
      releases: { keep: 2, health_check: healthCheck },
    });
    const project = join(a.agent.workDir, name);
    const current = () => readlink(join(project, 'current'));
    const serving = () => readFile(join(project, 'current', 'version.txt'), 'utf8');
    const deployVersion = async (version: string) => {
      await h.repo.commit({ 'version.txt': `${version}\n` }, version);
      const id = await h.deploy(projectId);
      return { id, detail: await h.waitForEnd(id) };
    };
    const activate = (release: string) => `ln -sfn releases/${release} current`;
    const logsOf = (d: { logs: LogEntry[] }) => d.logs.map((l) => [l.cmd, l.status, l.log]);

    // 1. A successful deploy: current -> releases/<id>, serving v1.
    const first = await deployVersion('v1');
    const d1 = first.id;
    expect(first.detail.deployment.status).toBe('success');
    expect(logsOf(first.detail).slice(1)).toEqual([
      [build, 'success', 'v1\n'],
      [gate, 'success', ''],
      [activate(d1), 'success', `current -> releases/${d1}\nnothing to prune (1 release, keeping 2)\n`],
      [healthCheck, 'success', 'v1\n'],
    ]);
    expect(await current()).toBe(`releases/${d1}`);
    expect(await serving()).toBe('v1\n');

    // 2. A failed build: current untouched, still serving v1.
    const second = await deployVersion('broken');
    const d2 = second.id;
    expect(second.detail.deployment.status).toBe('failed');
    expect(logsOf(second.detail).slice(1)).toEqual([
      [build, 'success', 'broken\n'],
      [gate, 'failed', ''],
      [activate(d2), 'skipped', ''],
      [healthCheck, 'skipped', ''],
    ]);
    expect(await current()).toBe(`releases/${d1}`);
    expect(await serving()).toBe('v1\n');

    // 3. A failing health check: switched to the new release, then back.
    const third = await deployVersion('unhealthy');
    const d3 = third.id;
    expect(third.detail.deployment.status).toBe('failed');
    expect(third.detail.deployment.reason).toContain('the health check');
    expect(logsOf(third.detail).slice(1)).toEqual([
      [build, 'success', 'unhealthy\n'],
      [gate, 'success', ''],
      [
        activate(d3),
        'success',
        `current -> releases/${d3} (was releases/${d1})\nnothing to prune (3 releases, keeping 2)\n`,
      ],
      [healthCheck, 'failed', `unhealthy\nswitched current back to releases/${d1}\n`],
    ]);
    expect(await current()).toBe(`releases/${d1}`);
    expect(await serving()).toBe('v1\n');

    // 4. Another good release: live, and the oldest release that is not spared is pruned.
    const fourth = await deployVersion('v2');
    const d4 = fourth.id;
    expect(fourth.detail.deployment.status).toBe('success');
    expect(entryFor(fourth.detail, activate(d4)).log).toBe(
      `current -> releases/${d4} (was releases/${d1})\nremoved releases/${d2} (keeping the newest 2)\n`,
    );
    expect(await current()).toBe(`releases/${d4}`);
    expect(await serving()).toBe('v2\n');

    // 5. Rollback to the first release: a new deployment with its own log, current back there.
    expect((await h.admin.post(`/deploy/${d2}/rollback`)).status).toBe(409);
    const res = await h.admin.post(`/deploy/${d1}/rollback`);
    expect(res.status, res.text).toBe(200);
    const rollbackId = res.json.deployId as string;
    expect(rollbackId).not.toBe(d1);
    const rolled = await h.waitForEnd(rollbackId);
    expect(rolled.deployment).toMatchObject({ status: 'success', trigger: 'rollback' });
    expect(logsOf(rolled)).toEqual([
      [
        activate(d1),
        'success',
        `current -> releases/${d1} (was releases/${d4})\nnothing to prune (3 releases, keeping 2)\n`,
      ],
      [healthCheck, 'success', 'v1\n'],
    ]);
    expect(await current()).toBe(`releases/${d1}`);
    expect(await serving()).toBe('v1\n');
    // The first deployment's own log is what it was.
    expect(logsOf(await h.detail(d1))).toEqual(logsOf(first.detail));
    expect(h.strays()).toEqual([]);
  });
});
