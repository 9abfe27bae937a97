// The audit log: who or what triggered, cancelled or changed anything — a user (session), an API
// token, a webhook delivery — when and from where; per project for its readers, globally for
// admins; never a secret value.
import { createHmac, randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { coordinatorWithAdmin, createProject, signUp } from '../helpers/coordinator.ts';
import { patch, SECRET_VALUE } from '../helpers/projects.ts';
import { expectJsonError } from '../helpers/responses.ts';
import { sql } from '../helpers/sql.ts';

const api = coordinatorWithAdmin({ REGISTRATION: 'open' });

interface AuditEvent {
  id: string;
  created_at: string;
  actor: { type: string; name: string };
  action: string;
  project_id: string | null;
  ip: string | null;
  target: { type: string; id: string } | null;
  details: Record<string, unknown> | null;
}

describe('GET /audit and GET /projects/:id/audit', () => {
  it('records who did what, from where, per project and globally, without secret values', async () => {
    const created = await createProject(api.admin);
    const projectId = created.json.project.id as string;
    const webhookSecret = created.json.webhook.secret as string;
    const other = await createProject(api.admin);
    expect(
      (await patch(api.admin, `/projects/${projectId}`, { secrets: { DB_PASSWORD: 'hunter2-x' } })).status,
    ).toBe(200);
    // An API token triggers; a verified push triggers; the admin cancels.
    const tokenRes = await api.admin.post('/tokens', { name: 'ci', scope: 'deploy' });
    const viaToken = await fetch(`${api.coord.url}/deploy`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tokenRes.json.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ projectId, commit: 'a'.repeat(40) }),
    });
    expect(viaToken.status).toBe(200);
    const deployId = ((await viaToken.json()) as { deployId: string }).deployId;
    const body = JSON.stringify({
      ref: 'refs/heads/main',
      after: 'b'.repeat(40),
      head_commit: { id: 'b'.repeat(40), message: 'ship it' },
      pusher: { name: 'octocat' },
    });
    const push = await fetch(`${api.coord.url}/webhook/${projectId}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-github-event': 'push',
        'x-github-delivery': 'audit-delivery-1',
        'x-hub-signature-256': `sha256=${createHmac('sha256', webhookSecret).update(body).digest('hex')}`,
      },
      body,
    });
    expect(push.status).toBe(200);
    expect((await api.admin.post(`/deploy/${deployId}/cancel`)).status).toBe(200);

    const perProject = await api.admin.get(`/projects/${projectId}/audit`);
    expect(perProject.status, perProject.text).toBe(200);
    const events = perProject.json.audit_events as AuditEvent[];
    const actions = events.map((e) => `${e.actor.type}:${e.action}`);
    expect(actions).toEqual(
      expect.arrayContaining([
        'user:project.create',
        'user:project.update',
        'token:deployment.trigger',
        'webhook:deployment.trigger',
        'user:deployment.cancel',
      ]),
    );
    expect(events.every((e) => e.project_id === projectId)).toBe(true);
    const cancel = events.find((e) => e.action === 'deployment.cancel')!;
    expect(cancel.ip).toBe('127.0.0.1');
    expect(cancel.target).toEqual({ type: 'deployment', id: deployId });
    expect(events.find((e) => e.actor.type === 'token')!.actor.name).toMatch(/\(token ci\)$/);
    expect(events.find((e) => e.action === 'project.update')!.details).toEqual({ fields: ['secrets'] });
    // Newest first.
    expect(events[0]!.action).toBe('deployment.cancel');

    // Globally: the other project's creation too, and the token's.
    const global = await api.admin.get('/audit?limit=500');
    expect(global.status).toBe(200);
    const all = global.json.audit_events as AuditEvent[];
    expect(all.some((e) => e.action === 'project.create' && e.project_id === other.json.project.id)).toBe(
      true,
    );
    expect(all.some((e) => e.action === 'token.create')).toBe(true);
    for (const secret of [SECRET_VALUE, 'hunter2-x', webhookSecret, tokenRes.json.token as string]) {
      expect(global.text).not.toContain(secret);
      expect(perProject.text).not.toContain(secret);
    }
    // Paging: older than the newest event.
    const older = await api.admin.get(`/audit?limit=2&before=${encodeURIComponent(all[0]!.created_at)}`);
    expect(older.json.audit_events).toHaveLength(2);
    expect(older.json.audit_events[0].id).not.toBe(all[0]!.id);
  });

  it('the global log is for admins; a project log for its readers; bad input is 400/404', async () => {
    const { client: viewer } = await signUp(api.coord.url);
    expectJsonError(await viewer.get('/audit'), 403);
    const created = await createProject(api.admin);
    expect((await viewer.get(`/projects/${created.json.project.id}/audit`)).status).toBe(200);
    expectJsonError(await api.admin.get('/audit?before=yesterday'), 400);
    expectJsonError(await api.admin.get('/projects/00000000-0000-4000-8000-000000000000/audit'), 404);
    expectJsonError(await viewer.get('/audit', { cookie: null }), 401);
  });

  describe('paging with before=<event id> is exact, even within one millisecond', () => {
    // Five events of one project recorded in the same millisecond (a busy instant, or a batch in
    // one transaction), between an older and a newer one.
    const seed = async () => {
      const projectId = (await createProject(api.admin)).json.project.id as string;
      const at = '2030-01-01T12:00:00.123Z';
      const insert = (created: string) =>
        sql(
          api.coord,
          `insert into audit_events (id, created_at, actor_type, actor_name, action, project_id)
           values (?, ?, 'system', 'paging test', 'project.update', ?)`,
          [randomUUID(), created, projectId],
        );
      await insert('2030-01-01T12:00:00.122Z');
      for (let i = 0; i < 5; i++) await insert(at);
      await insert('2030-01-01T12:00:00.124Z');
      const rows = await sql(
        api.coord,
        `select id from audit_events where project_id = ? and actor_name = 'paging test'`,
        [projectId],
      );
      return { projectId, at, ids: rows.map((r: { id: string }) => r.id) as string[] };
    };

    const walk = async (path: string) => {
      const seen: AuditEvent[] = [];
      let before: string | undefined;
      for (let page = 0; page < 50; page++) {
        const res = await api.admin.get(`${path}?limit=1${before ? `&before=${before}` : ''}`);
        expect(res.status, res.text).toBe(200);
        const events = res.json.audit_events as AuditEvent[];
        if (events.length === 0) return seen;
        expect(events).toHaveLength(1);
        seen.push(events[0]!);
        before = events[0]!.id;
      }
      throw new Error('paging did not end');
    };

    it('a project log paged one by one returns each event once, newest first', async () => {
      const { projectId, at, ids } = await seed();
      const seen = (await walk(`/projects/${projectId}/audit`)).filter((e) => e.actor.name === 'paging test');
      expect(seen.map((e) => e.id).sort()).toEqual([...ids].sort());
      expect(new Set(seen.map((e) => e.id)).size).toBe(seen.length);
      expect(seen.map((e) => e.created_at)).toEqual([
        '2030-01-01T12:00:00.124Z',
        at,
        at,
        at,
        at,
        at,
        '2030-01-01T12:00:00.122Z',
      ]);
    });

    it('the global log too', async () => {
      const { ids } = await seed();
      const seen = await walk('/audit');
      const ours = seen.filter((e) => ids.includes(e.id));
      expect(ours).toHaveLength(ids.length);
      expect(new Set(seen.map((e) => e.id)).size).toBe(seen.length);
      const all = (await api.admin.get('/audit?limit=500')).json.audit_events as AuditEvent[];
      expect(seen.map((e) => e.id)).toEqual(all.map((e) => e.id));
    });

    it("the page's Older link carries the last shown event's id", async () => {
      const { projectId, ids } = await seed();
      const seen: string[] = [];
      let href: string | null = `/projects/${projectId}/audit?limit=1`;
      while (href) {
        const res = await api.admin.get(href, { headers: { accept: 'text/html' } });
        expect(res.status, res.text).toBe(200);
        const shown = [...res.text.matchAll(/data-event="([0-9a-f-]{36})"/g)].map((m) => m[1]!);
        seen.push(...shown);
        const older = /<a href="([^"]+)">Older/.exec(res.text);
        href = older ? older[1]!.replaceAll('&amp;', '&') : null;
        if (older) expect(older[1]).toContain(`before=${shown.at(-1)}`);
      }
      expect(seen.filter((id) => ids.includes(id))).toHaveLength(ids.length);
      expect(new Set(seen).size).toBe(seen.length);
    });

    it('an ISO time still pages, as before (older than that instant)', async () => {
      const { projectId, at } = await seed();
      const res = await api.admin.get(`/projects/${projectId}/audit?before=${encodeURIComponent(at)}`);
      expect(res.status, res.text).toBe(200);
      const events = res.json.audit_events as AuditEvent[];
      expect(events.every((e) => e.created_at < at)).toBe(true);
      expect(events.some((e) => e.created_at === '2030-01-01T12:00:00.122Z')).toBe(true);
      expectJsonError(await api.admin.get(`/audit?before=${randomUUID()}`), 400);
    });
  });
});
