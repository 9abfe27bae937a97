// POST /deploy (API.md "Deployments"): a manual trigger, queued for the agents or SSH host the
// project targets, and audited; refused without a session or for an unknown project.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Client, coordinatorWithAdmin } from '../helpers/coordinator.ts';
import { deploymentTools } from '../helpers/deployments.ts';
import { RawAgent } from '../helpers/faults-coordinator.ts';
import { sql } from '../helpers/sql.ts';
import { UUID } from '../helpers/responses.ts';

const api = coordinatorWithAdmin();
const { createProject, deploy } = deploymentTools(api);

describe('POST /deploy triggers a deployment', () => {
  it('answers 200 {success: true, deployId} with a uuid and nothing else', async () => {
    const project = await createProject();
    const res = await api.admin.post('/deploy', { projectId: project.id });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(Object.keys(res.json).sort()).toEqual(['deployId', 'success']);
    expect(res.json.success).toBe(true);
    expect(res.json.deployId).toMatch(UUID);
  });

  it('stores it queued, waiting for an agent with the labels when none is registered', async () => {
    const project = await createProject({
      target: { agents: { labels: ['nobody-has-this', 'rare'] } },
    });
    const id = await deploy(project.id);
    const [row] = await sql(
      api.coord,
      'select status, reason, hosts, project_id from deployments where id = ?',
      [id],
    );
    expect(row.status).toBe('queued');
    expect(row.project_id).toBe(project.id);
    expect(row.reason).toContain('nobody-has-this');
    expect(row.reason).toContain('rare');
    expect(row.hosts).toEqual([]);
  });

  it('names the registered (offline) agent it waits for, and lists it in hosts', async () => {
    const label = `lbl-${randomUUID().slice(0, 8)}`;
    const agentName = `agent-${randomUUID().slice(0, 8)}`;
    const agent = await api.admin.post('/agents', { name: agentName, labels: [label, 'other'] });
    expect(agent.status, agent.text).toBe(201);
    const project = await createProject({ target: { agents: { labels: [label] } } });
    const id = await deploy(project.id);
    const res = await api.admin.get(`/deploy/${id}`);
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
    const entries = await sql(
      api.coord,
      'select count(*)::int as n from log_entries where deployment_id = ?',
      [id],
    );
    expect(entries[0].n).toBe(0);
  });
});

describe('POST /deploy without a session', () => {
  it('is 401 Authentication required', async () => {
    const project = await createProject();
    const res = await new Client(api.coord.url).post('/deploy', { projectId: project.id });
    expect(res.status).toBe(401);
    expect(res.json).toEqual({ success: false, error: 'Authentication required' });
  });

  it('is 401 whatever the body holds (credentials are checked first)', async () => {
    const anonymous = new Client(api.coord.url);
    for (const body of [{ projectId: 'abc' }, {}, { projectId: randomUUID() }]) {
      const res = await anonymous.post('/deploy', body);
      expect(res.status).toBe(401);
      expect(res.json).toEqual({ success: false, error: 'Authentication required' });
    }
  });

  it('creates no deployment', async () => {
    const project = await createProject();
    await new Client(api.coord.url).post('/deploy', { projectId: project.id });
    const rows = await sql(api.coord, 'select count(*)::int as n from deployments where project_id = ?', [
      project.id,
    ]);
    expect(rows[0].n).toBe(0);
  });
});

describe('POST /deploy for an unknown project', () => {
  it('is 404 Project not found', async () => {
    const res = await api.admin.post('/deploy', { projectId: randomUUID() });
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
      const res = await api.admin.post('/deploy', body);
      expect(res.status).toBe(400);
      expect(res.json).toEqual({ success: false, error: 'projectId must be a UUID' });
    });
  }

  it('is 400 projectId must be a UUID for an empty body', async () => {
    const res = await api.admin.request('POST', '/deploy', {
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
    const res = await api.admin.get(`/deploy/${id}`);
    expect(res.json.deployment.commit).toBe(commit.toLowerCase());
    expect(res.json.deployment.branch).toBe('release/1.2');
    const [row] = await sql(api.coord, 'select commit, branch from deployments where id = ?', [id]);
    expect(row).toEqual({ commit: commit.toLowerCase(), branch: 'release/1.2' });
  });

  it("defaults to the project's branch and no commit", async () => {
    const project = await createProject({ branch_name: 'production' });
    const id = await deploy(project.id);
    const res = await api.admin.get(`/deploy/${id}`);
    expect(res.json.deployment.commit).toBeNull();
    expect(res.json.deployment.branch).toBe('production');
  });

  for (const commit of ['not-a-sha', 'abc', 'g'.repeat(40), '--upload-pack=evil', '']) {
    it(`refuses the commit ${JSON.stringify(commit)} with 400 and creates nothing`, async () => {
      const project = await createProject();
      const res = await api.admin.post('/deploy', { projectId: project.id, commit });
      expect(res.status).toBe(400);
      expect(res.json.success).toBe(false);
      expect(res.json.error).toEqual(expect.any(String));
      const rows = await sql(api.coord, 'select count(*)::int as n from deployments where project_id = ?', [
        project.id,
      ]);
      expect(rows[0].n).toBe(0);
    });
  }

  it('refuses a branch that is not a valid git ref with 400', async () => {
    const project = await createProject();
    const res = await api.admin.post('/deploy', { projectId: project.id, branch: 'a..b' });
    expect(res.status).toBe(400);
    expect(res.json.success).toBe(false);
  });
});

describe('Audit of manual triggers', () => {
  it("records deployment.trigger with the actor's email", async () => {
    const project = await createProject();
    const id = await deploy(project.id);
    const rows = await sql(
      api.coord,
      `select actor_type, actor_name, target_id from audit_events where action = 'deployment.trigger' and target_id = ?`,
      [id],
    );
    expect(rows).toEqual([{ actor_type: 'user', actor_name: api.adminEmail, target_id: id }]);
  });
});

describe('many triggers at once', () => {
  // One connection: a trigger that needed a second one inside its transaction would wait forever.
  const tight = coordinatorWithAdmin({ DATABASE_POOL_MAX: '1' });

  it('more simultaneous POST /deploy than the database pool has connections all answer (no pool deadlock)', async () => {
    const created = await tight.admin.post('/projects', {
      name: 'burst',
      forge_url: 'https://github.com/acme/web.git',
      branch_name: 'main',
      commands: ['true'],
      target: { agents: { names: ['burst-1', 'burst-2'] } },
    });
    expect(created.status, created.text).toBe(201);
    const projectId = created.json.project.id as string;
    const started = Date.now();
    const answers = await Promise.all(
      Array.from({ length: 8 }, () => tight.admin.post('/deploy', { projectId })),
    );
    expect(answers.map((r) => r.status)).toEqual(answers.map(() => 200));
    expect(Date.now() - started, 'triggers waited on each other').toBeLessThan(10_000);
    const [count] = await sql(
      tight.coord,
      'select count(*)::int as n from deployments where project_id = ?',
      [projectId],
    );
    expect(count.n).toBe(8);
  }, 30_000);

  it('with one connection, a connected agent still gets its job (its assignment is built on the claiming connection)', async () => {
    const registered = await tight.admin.post('/agents', { name: 'tight-agent', labels: ['tight'] });
    expect(registered.status, registered.text).toBe(201);
    const raw = await RawAgent.welcomed(tight.coord.url, registered.json.token as string);
    try {
      const created = await tight.admin.post('/projects', {
        name: 'tight',
        forge_url: 'git@example.com:acme/tight.git',
        branch_name: 'main',
        commands: ['true'],
        target: { agents: { names: ['tight-agent'] } },
      });
      expect(created.status, created.text).toBe(201);
      const res = await tight.admin.post('/deploy', {
        projectId: created.json.project.id,
        commit: 'a'.repeat(40),
      });
      const assign = await raw.next('job.assign', (m) => m.deploymentId === res.json.deployId, 10_000);
      // An ssh remote: the deploy key (created on first use) travels with the job.
      expect(assign.repository.sshKey).toMatch(/PRIVATE KEY/);
    } finally {
      raw.close();
    }
  }, 30_000);
});
