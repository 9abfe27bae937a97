// The spec's POST /deploy and GET /deploy/:id, and GET /deployments (API.md "Deployments"),
// against a real coordinator over HTTP on a fresh database.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Client,
  sampleProject,
  signUp,
  startCoordinator,
  type TestCoordinator,
} from '../helpers/coordinator.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

let coord: TestCoordinator;
let admin: Client;
let adminEmail: string;

beforeAll(async () => {
  coord = await startCoordinator();
  const account = await signUp(coord.url);
  admin = account.client;
  adminEmail = account.email;
});

afterAll(async () => {
  await coord?.close();
});

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- rows of ad-hoc SQL
async function sql(query: string, params: unknown[] = []): Promise<any[]> {
  return coord.orm.em.fork().execute(query, params);
}

async function createProject(overrides: Record<string, unknown> = {}) {
  const res = await admin.post('/projects', sampleProject(overrides));
  expect(res.status, res.text).toBe(201);
  return res.json.project as { id: string; name: string; forge_url: string; branch_name: string };
}

async function deploy(projectId: string, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await admin.post('/deploy', { projectId, ...extra });
  expect(res.status, res.text).toBe(200);
  return res.json.deployId as string;
}

describe('POST /deploy triggers a deployment', () => {
  it('answers 200 {success: true, deployId} with a uuid and nothing else', async () => {
    const project = await createProject();
    const res = await admin.post('/deploy', { projectId: project.id });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(Object.keys(res.json).sort()).toEqual(['deployId', 'success']);
    expect(res.json.success).toBe(true);
    expect(res.json.deployId).toMatch(UUID);
  });

  it('stores it queued, waiting for an agent with the labels when none is registered', async () => {
    const project = await createProject({ target: { agents: { labels: ['nobody-has-this', 'rare'] } } });
    const id = await deploy(project.id);
    const [row] = await sql('select status, reason, hosts, project_id from deployments where id = ?', [id]);
    expect(row.status).toBe('queued');
    expect(row.project_id).toBe(project.id);
    expect(row.reason).toContain('nobody-has-this');
    expect(row.reason).toContain('rare');
    expect(row.hosts).toEqual([]);
  });

  it('names the registered (offline) agent it waits for, and lists it in hosts', async () => {
    const label = `lbl-${randomUUID().slice(0, 8)}`;
    const agentName = `agent-${randomUUID().slice(0, 8)}`;
    const agent = await admin.post('/agents', { name: agentName, labels: [label, 'other'] });
    expect(agent.status, agent.text).toBe(201);
    const project = await createProject({ target: { agents: { labels: [label] } } });
    const id = await deploy(project.id);
    const res = await admin.get(`/deploy/${id}`);
    expect(res.status).toBe(200);
    expect(res.json.deployment.status).toBe('queued');
    expect(res.json.deployment.reason).toContain(agentName);
    expect(res.json.deployment.hosts).toEqual([agentName]);
  });

  it('returns at once: nothing runs inside the request, so no log entry exists right after', async () => {
    const project = await createProject();
    const started = Date.now();
    const id = await deploy(project.id);
    expect(Date.now() - started).toBeLessThan(5_000);
    const entries = await sql('select count(*)::int as n from log_entries where deployment_id = ?', [id]);
    expect(entries[0].n).toBe(0);
  });
});

describe('POST /deploy without a session', () => {
  it('is 401 Authentication required', async () => {
    const project = await createProject();
    const res = await new Client(coord.url).post('/deploy', { projectId: project.id });
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });

  it('is 401 whatever the body holds (credentials are checked first)', async () => {
    const anonymous = new Client(coord.url);
    for (const body of [{ projectId: 'abc' }, {}, { projectId: randomUUID() }]) {
      const res = await anonymous.post('/deploy', body);
      expect(res.status).toBe(401);
      expect(res.json).toEqual({ success: false, error: 'Authentication required' });
    }
  });

  it('creates no deployment', async () => {
    const project = await createProject();
    await new Client(coord.url).post('/deploy', { projectId: project.id });
    const rows = await sql('select count(*)::int as n from deployments where project_id = ?', [project.id]);
    expect(rows[0].n).toBe(0);
  });
});

describe('POST /deploy for an unknown project', () => {
  it('is 404 Project not found', async () => {
    const res = await admin.post('/deploy', { projectId: randomUUID() });
    expect(res.status).toBe(404);
    expect(res.json).toEqual({ success: false, error: 'Project not found' });
  });
});

describe('POST /deploy with a missing or malformed projectId', () => {
  const cases: Array<[string, unknown]> = [
    ['missing', {}],
    ['malformed', { projectId: 'abc' }],
    ['numeric', { projectId: 12345 }],
    ['null', { projectId: null }],
    ['almost a uuid', { projectId: `${randomUUID()}0` }],
    ['an array', { projectId: [randomUUID()] }],
  ];
  for (const [name, body] of cases) {
    it(`is 400 projectId must be a UUID (${name})`, async () => {
      const res = await admin.post('/deploy', body);
      expect(res.status).toBe(400);
      expect(res.json).toEqual({ success: false, error: 'projectId must be a UUID' });
    });
  }

  it('is 400 projectId must be a UUID for an empty body', async () => {
    const res = await admin.request('POST', '/deploy', {
      body: '',
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(400);
    expect(res.json).toEqual({ success: false, error: 'projectId must be a UUID' });
  });
});

describe('POST /deploy with {commit, branch}', () => {
  it('stores them, the commit lower-cased', async () => {
    const project = await createProject();
    const commit = 'ABCDEF0123456789ABCDEF0123456789ABCDEF01';
    const id = await deploy(project.id, { commit, branch: 'release/1.2' });
    const res = await admin.get(`/deploy/${id}`);
    expect(res.json.deployment.commit).toBe(commit.toLowerCase());
    expect(res.json.deployment.branch).toBe('release/1.2');
    const [row] = await sql('select commit, branch from deployments where id = ?', [id]);
    expect(row).toEqual({ commit: commit.toLowerCase(), branch: 'release/1.2' });
  });

  it("defaults to the project's branch and no commit", async () => {
    const project = await createProject({ branch_name: 'production' });
    const id = await deploy(project.id);
    const res = await admin.get(`/deploy/${id}`);
    expect(res.json.deployment.commit).toBeNull();
    expect(res.json.deployment.branch).toBe('production');
  });

  for (const commit of ['not-a-sha', 'abc', 'g'.repeat(40), '--upload-pack=evil', '']) {
    it(`refuses the commit ${JSON.stringify(commit)} with 400 and creates nothing`, async () => {
      const project = await createProject();
      const res = await admin.post('/deploy', { projectId: project.id, commit });
      expect(res.status).toBe(400);
      expect(res.json.success).toBe(false);
      expect(res.json.error).toEqual(expect.any(String));
      const rows = await sql('select count(*)::int as n from deployments where project_id = ?', [project.id]);
      expect(rows[0].n).toBe(0);
    });
  }

  it('refuses a branch that is not a valid git ref with 400', async () => {
    const project = await createProject();
    const res = await admin.post('/deploy', { projectId: project.id, branch: 'a..b' });
    expect(res.status).toBe(400);
    expect(res.json.success).toBe(false);
  });
});

describe('GET /deploy/:id of a queued deployment', () => {
  it('answers 200 {success, deployment, logs, project} with every deployment field', async () => {
    const project = await createProject({ branch_name: 'main' });
    const id = await deploy(project.id);
    const res = await admin.get(`/deploy/${id}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(Object.keys(res.json).sort()).toEqual(['deployment', 'logs', 'project', 'success']);
    expect(res.json.success).toBe(true);
    const d = res.json.deployment;
    expect(d).toMatchObject({
      id,
      proj_id: project.id,
      finished_at: null,
      status: 'queued',
      commit: null,
      branch: 'main',
      trigger: 'manual',
      triggered_by: adminEmail,
    });
    expect(d.started_at).toMatch(TIMESTAMP);
    expect(Math.abs(Date.parse(d.started_at) - Date.now())).toBeLessThan(60_000);
    expect(d.reason).toEqual(expect.any(String));
    expect(d.reason.length).toBeGreaterThan(0);
    expect(Array.isArray(d.hosts)).toBe(true);
    for (const key of [
      'id',
      'proj_id',
      'started_at',
      'finished_at',
      'status',
      'commit',
      'branch',
      'trigger',
      'triggered_by',
      'reason',
      'hosts',
    ]) {
      expect(d).toHaveProperty(key);
    }
    expect(res.json.logs).toEqual([]);
  });

  it('embeds the project with exactly id, name, forge_url, branch_name', async () => {
    const project = await createProject({ forge_url: 'git@github.com:acme/api.git', branch_name: 'trunk' });
    const id = await deploy(project.id);
    const res = await admin.get(`/deploy/${id}`);
    expect(res.json.project).toEqual({
      id: project.id,
      name: project.name,
      forge_url: 'git@github.com:acme/api.git',
      branch_name: 'trunk',
    });
    expect(res.text).not.toContain('sk-live-very-secret');
  });
});

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
    deploymentStartedAt = (await admin.get(`/deploy/${deployId}`)).json.deployment.started_at;
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
        `insert into log_entries
           (id, created_at, deployment_id, seq, host, cmd, status, success, exit_code, started_at, finished_at, output)
         values (?, now(), ?, ?, 'web-1', ?, ?, ?, ?, ?, ?, ?)`,
        [id, deployId, seq, cmd, status, success, exitCode, startedAt, finishedAt, output],
      );
    const chunk = (logEntryId: string, offset: number, data: Buffer) =>
      sql(`insert into log_chunks (log_entry_id, "offset", data, created_at) values (?, ?, ?, now())`, [
        logEntryId,
        offset,
        data,
      ]);
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
    const res = await admin.get(`/deploy/${deployId}`);
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
    const logs = (await admin.get(`/deploy/${deployId}`)).json.logs;
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
    const logs = (await admin.get(`/deploy/${deployId}`)).json.logs;
    expect(logs[0].log).toBe('HEAD is now at 6113728\n');
  });

  it('replace invalid UTF-8 with U+FFFD', async () => {
    const logs = (await admin.get(`/deploy/${deployId}`)).json.logs;
    expect(logs[1].log).toBe('bad byte: \uFFFD\uFFFD end\nline 2\n');
  });

  it('concatenate the chunks in offset order when the output is not compacted yet', async () => {
    const logs = (await admin.get(`/deploy/${deployId}`)).json.logs;
    expect(logs[2].log).toBe('ok 1\n€ 2\r\nok 3\n');
    expect(logs[4].log).toBe('listening on :3000\n');
  });

  it('give "" for an entry without output', async () => {
    const logs = (await admin.get(`/deploy/${deployId}`)).json.logs;
    expect(logs[3].log).toBe('');
  });

  it('prefer the compacted output over chunks when both exist', async () => {
    await sql(`insert into log_chunks (log_entry_id, "offset", data, created_at) values (?, 0, ?, now())`, [
      entry.checkout,
      Buffer.from('stale chunk'),
    ]);
    const logs = (await admin.get(`/deploy/${deployId}`)).json.logs;
    expect(logs[0].log).toBe('HEAD is now at 6113728\n');
  });

  it("belong to their deployment only: another deployment's logs stay empty", async () => {
    const project = await createProject();
    const other = await deploy(project.id);
    expect((await admin.get(`/deploy/${other}`)).json.logs).toEqual([]);
  });
});

describe('GET /deploy/:id for a deployment that does not exist', () => {
  for (const [name, id] of [
    ['unknown uuid', randomUUID()],
    ['malformed id', 'abc'],
    ['numeric id', '123'],
    ['uuid with junk', `${randomUUID()}x`],
  ] as const) {
    it(`is 404 Deployment not found (${name})`, async () => {
      const res = await admin.get(`/deploy/${id}`);
      expect(res.status).toBe(404);
      expect(res.json).toEqual({ success: false, error: 'Deployment not found' });
    });
  }
});

describe('GET /deploy/:id without a session', () => {
  it('is 401 Authentication required', async () => {
    const project = await createProject();
    const id = await deploy(project.id);
    const res = await new Client(coord.url).get(`/deploy/${id}`);
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });

  it('is 401 even for an unknown id (nothing about existence leaks)', async () => {
    const res = await new Client(coord.url).get(`/deploy/${randomUUID()}`);
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });

  it('is 401 with a forged session cookie', async () => {
    const project = await createProject();
    const id = await deploy(project.id);
    const res = await new Client(coord.url).get(`/deploy/${id}`, { cookie: 'connect.sid=forged-value' });
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });
});

describe('GET /deployments', () => {
  let projectA: string;
  let projectB: string;
  const idsA: string[] = [];
  let idB: string;

  beforeAll(async () => {
    projectA = (await createProject()).id;
    projectB = (await createProject()).id;
    for (let i = 0; i < 5; i++) idsA.push(await deploy(projectA));
    idB = await deploy(projectB);
  });

  it('lists deployments newest first, with the deployment fields', async () => {
    const res = await admin.get('/deployments');
    expect(res.status).toBe(200);
    expect(res.json.success).toBe(true);
    const list = res.json.deployments as Array<{ id: string; started_at: string }>;
    expect(list.length).toBeGreaterThanOrEqual(6);
    const times = list.map((d) => Date.parse(d.started_at));
    expect([...times].sort((a, b) => b - a)).toEqual(times);
    expect(list[0]!.id).toBe(idB);
    expect(list[0]).toMatchObject({ proj_id: projectB, status: 'queued', trigger: 'manual' });
  });

  it('filters by project_id', async () => {
    const res = await admin.get(`/deployments?project_id=${projectA}`);
    expect(res.status).toBe(200);
    const ids = (res.json.deployments as Array<{ id: string; proj_id: string }>).map((d) => d.id);
    expect(ids).toEqual([...idsA].reverse());
  });

  it('filters by status', async () => {
    await sql(`update deployments set status = 'failed', finished_at = now() where id = ?`, [idsA[0]]);
    const failed = await admin.get(`/deployments?status=failed&project_id=${projectA}`);
    expect(failed.status).toBe(200);
    expect(failed.json.deployments.map((d: { id: string }) => d.id)).toEqual([idsA[0]]);
    expect(failed.json.deployments[0].status).toBe('failed');
    const queued = await admin.get(`/deployments?status=queued&project_id=${projectA}`);
    expect(queued.json.deployments.map((d: { id: string }) => d.id)).toEqual(idsA.slice(1).reverse());
  });

  it('honours limit', async () => {
    const res = await admin.get(`/deployments?project_id=${projectA}&limit=2`);
    expect(res.status).toBe(200);
    expect(res.json.deployments).toHaveLength(2);
  });

  it('pages with before=<deployment id> without overlap or gaps', async () => {
    const seen: string[] = [];
    let before: string | null = null;
    for (let page = 0; page < 10; page++) {
      const query: string = `/deployments?project_id=${projectA}&limit=2${before ? `&before=${before}` : ''}`;
      const res = await admin.get(query);
      expect(res.status).toBe(200);
      const ids = (res.json.deployments as Array<{ id: string }>).map((d) => d.id);
      if (ids.length === 0) break;
      seen.push(...ids);
      before = ids.at(-1)!;
    }
    expect(seen).toEqual([...idsA].reverse());
    expect(new Set(seen).size).toBe(seen.length);
  });

  it('pages correctly when several deployments share the same started_at', async () => {
    const project = (await createProject()).id;
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(await deploy(project));
    await sql(`update deployments set started_at = '2031-06-01T00:00:00.000Z' where project_id = ?`, [
      project,
    ]);
    const all = (await admin.get(`/deployments?project_id=${project}`)).json.deployments.map(
      (d: { id: string }) => d.id,
    );
    expect([...all].sort()).toEqual([...ids].sort());
    const seen: string[] = [];
    let before: string | null = null;
    for (let page = 0; page < 10; page++) {
      const query: string = `/deployments?project_id=${project}&limit=1${before ? `&before=${before}` : ''}`;
      const ids2 = (await admin.get(query)).json.deployments.map((d: { id: string }) => d.id) as string[];
      if (ids2.length === 0) break;
      seen.push(...ids2);
      before = ids2.at(-1)!;
    }
    expect(seen).toEqual(all);
  });

  for (const status of ['bogus', 'SUCCESS', '']) {
    it(`refuses status=${JSON.stringify(status)} with 400`, async () => {
      const res = await admin.get(`/deployments?status=${encodeURIComponent(status)}`);
      expect(res.status).toBe(400);
      expect(res.json.success).toBe(false);
      expect(res.json.error).toEqual(expect.any(String));
    });
  }

  for (const query of ['limit=0', 'limit=abc', 'limit=100000', 'project_id=abc']) {
    it(`refuses ${query} with 400`, async () => {
      const res = await admin.get(`/deployments?${query}`);
      expect(res.status).toBe(400);
      expect(res.json.success).toBe(false);
    });
  }

  it('is 401 without a session', async () => {
    const res = await new Client(coord.url).get('/deployments');
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });
});

describe('Audit of manual triggers', () => {
  it("records deployment.trigger with the actor's email", async () => {
    const project = await createProject();
    const id = await deploy(project.id);
    const rows = await sql(
      `select actor_type, actor_name, target_id from audit_events where action = 'deployment.trigger' and target_id = ?`,
      [id],
    );
    expect(rows).toEqual([{ actor_type: 'user', actor_name: adminEmail, target_id: id }]);
  });
});
