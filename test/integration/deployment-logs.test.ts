// GET /deploy/:id logs (API.md "Deployments"): the log entries of a deployment, in order, with
// their timestamps.
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { coordinatorWithAdmin } from '../helpers/coordinator.ts';
import { deploymentTools } from '../helpers/deployments.ts';
import { sql } from '../helpers/sql.ts';
import { TIMESTAMP } from '../helpers/responses.ts';

const api = coordinatorWithAdmin();
const { createProject, deploy } = deploymentTools(api);

describe('GET /deploy/:id logs', () => {
  let deployId: string;
  let deploymentStartedAt: string;
  const entry = {
    checkout: randomUUID(),
    build: randomUUID(),
    test: randomUUID(),
    broken: randomUUID(),
    running: randomUUID(),
  };

  beforeAll(async () => {
    const project = await createProject();
    deployId = await deploy(project.id);
    deploymentStartedAt = (await api.admin.get(`/deploy/${deployId}`)).json.deployment.started_at;
    const insert = (
      id: string,
      seq: number,
      cmd: string,
      status: string,
      success: boolean,
      exitCode: number | null,
      startedAt: string,
      finishedAt: string | null,
      output: Buffer | null,
    ) =>
      sql(
        api.coord,
        `insert into log_entries
           (id, created_at, deployment_id, seq, host, cmd, status, success, exit_code, started_at, finished_at, output)
         values (?, now(), ?, ?, 'web-1', ?, ?, ?, ?, ?, ?, ?)`,
        [id, deployId, seq, cmd, status, success, exitCode, startedAt, finishedAt, output],
      );
    const chunk = (logEntryId: string, offset: number, data: Buffer) =>
      sql(
        api.coord,
        `insert into log_chunks (log_entry_id, "offset", data, created_at) values (?, ?, ?, now())`,
        [logEntryId, offset, data],
      );
    // Inserted out of execution order on purpose: the answer must be ordered by started_at.
    await insert(
      entry.test,
      2,
      'npm test',
      'success',
      true,
      0,
      '2030-01-01T00:00:03.000Z',
      '2030-01-01T00:00:04.000Z',
      null,
    );
    await insert(
      entry.checkout,
      0,
      'git checkout 6113728f27ae82c7b1a177c8d03f9e96e0adf246',
      'success',
      true,
      0,
      '2030-01-01T00:00:00.123Z',
      '2030-01-01T00:00:01.000Z',
      Buffer.from('HEAD is now at 6113728\n'),
    );
    await insert(
      entry.running,
      4,
      'npm start',
      'running',
      false,
      null,
      '2030-01-01T00:00:06.000Z',
      null,
      null,
    );
    await insert(
      entry.build,
      1,
      'npm run build',
      'success',
      true,
      0,
      '2030-01-01T00:00:01.500Z',
      '2030-01-01T00:00:02.999Z',
      Buffer.concat([Buffer.from('bad byte: '), Buffer.from([0xff, 0xfe]), Buffer.from(' end\nline 2\n')]),
    );
    await insert(
      entry.broken,
      3,
      'npm run lint',
      'failed',
      false,
      1,
      '2030-01-01T00:00:05.000Z',
      '2030-01-01T00:00:05.500Z',
      null,
    );
    // Output still in chunks (no `output` yet): concatenated by offset, a multi-byte character
    // split across two chunks, chunks inserted out of order.
    const euro = Buffer.from('€'); // e2 82 ac
    const first = Buffer.concat([Buffer.from('ok 1\n'), euro.subarray(0, 1)]);
    const second = Buffer.concat([euro.subarray(1), Buffer.from(' 2\r\nok 3\n')]);
    await chunk(entry.test, first.length, second);
    await chunk(entry.test, 0, first);
    await chunk(entry.running, 0, Buffer.from('listening on :3000\n'));
  });

  it('come back in execution order (started_at increasing), each with the spec fields', async () => {
    const res = await api.admin.get(`/deploy/${deployId}`);
    expect(res.status).toBe(200);
    const logs = res.json.logs as Array<Record<string, unknown>>;
    expect(logs.map((l) => l.id)).toEqual([
      entry.checkout,
      entry.build,
      entry.test,
      entry.broken,
      entry.running,
    ]);
    const starts = logs.map((l) => Date.parse(l.started_at as string));
    expect([...starts].sort((a, b) => a - b)).toEqual(starts);
    for (const log of logs) {
      for (const key of [
        'id',
        'deploy_id',
        'cmd',
        'log',
        'success',
        'started_at',
        'finished_at',
        'status',
        'host',
      ]) {
        expect(log).toHaveProperty(key);
      }
      expect(log.deploy_id).toBe(deployId);
      expect(log.host).toBe('web-1');
      expect(log.started_at).toMatch(TIMESTAMP);
      expect(typeof log.success).toBe('boolean');
      expect(typeof log.log).toBe('string');
    }
    expect(res.json.deployment.started_at).toBe(deploymentStartedAt);
  });

  it('carry cmd, status, success and timestamps as stored', async () => {
    const logs = (await api.admin.get(`/deploy/${deployId}`)).json.logs;
    expect(logs[0]).toMatchObject({
      cmd: 'git checkout 6113728f27ae82c7b1a177c8d03f9e96e0adf246',
      status: 'success',
      success: true,
      started_at: '2030-01-01T00:00:00.123Z',
      finished_at: '2030-01-01T00:00:01.000Z',
    });
    expect(logs[1].finished_at).toBe('2030-01-01T00:00:02.999Z');
    expect(logs[3]).toMatchObject({ cmd: 'npm run lint', status: 'failed', success: false });
    expect(logs[4]).toMatchObject({ cmd: 'npm start', status: 'running', success: false, finished_at: null });
  });

  it('give the stored output as text, newlines kept', async () => {
    const logs = (await api.admin.get(`/deploy/${deployId}`)).json.logs;
    expect(logs[0].log).toBe('HEAD is now at 6113728\n');
  });

  it('replace invalid UTF-8 with U+FFFD', async () => {
    const logs = (await api.admin.get(`/deploy/${deployId}`)).json.logs;
    expect(logs[1].log).toBe('bad byte: \uFFFD\uFFFD end\nline 2\n');
  });

  it('concatenate the chunks in offset order (where output is stored)', async () => {
    const logs = (await api.admin.get(`/deploy/${deployId}`)).json.logs;
    expect(logs[2].log).toBe('ok 1\n€ 2\r\nok 3\n');
    expect(logs[4].log).toBe('listening on :3000\n');
  });

  it('give "" for an entry without output', async () => {
    const logs = (await api.admin.get(`/deploy/${deployId}`)).json.logs;
    expect(logs[3].log).toBe('');
  });

  it('prefer the single output value (entries compacted by earlier versions) over chunks when both exist', async () => {
    await sql(
      api.coord,
      `insert into log_chunks (log_entry_id, "offset", data, created_at) values (?, 0, ?, now())`,
      [entry.checkout, Buffer.from('stale chunk')],
    );
    const logs = (await api.admin.get(`/deploy/${deployId}`)).json.logs;
    expect(logs[0].log).toBe('HEAD is now at 6113728\n');
  });

  it("belong to their deployment only: another deployment's logs stay empty", async () => {
    const project = await createProject();
    const other = await deploy(project.id);
    expect((await api.admin.get(`/deploy/${other}`)).json.logs).toEqual([]);
  });
});
