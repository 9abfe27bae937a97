// Agents (API.md "Agents"): registration with a one-time token stored hashed, the list, and
// removal, against a real coordinator over HTTP on a fresh database.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Client, coordinatorWithAdmin, signUp } from '../helpers/coordinator.ts';
import { del } from '../helpers/projects.ts';
import { sql } from '../helpers/sql.ts';
import { UUID } from '../helpers/responses.ts';

const api = coordinatorWithAdmin({ REGISTRATION: 'open' });

describe('POST /agents', () => {
  it('answers 201 {success, agent: {id, name, labels}, token}', async () => {
    const name = `agent-${randomUUID().slice(0, 8)}`;
    const res = await api.admin.post('/agents', { name, labels: ['web', 'eu'] });
    expect(res.status).toBe(201);
    expect(Object.keys(res.json).sort()).toEqual(['agent', 'success', 'token']);
    expect(res.json.success).toBe(true);
    expect(Object.keys(res.json.agent).sort()).toEqual(['id', 'labels', 'name']);
    expect(res.json.agent.id).toMatch(UUID);
    expect(res.json.agent.name).toBe(name);
    expect(res.json.agent.labels).toEqual(['web', 'eu']);
    expect(res.json.token).toEqual(expect.any(String));
    expect(res.json.token.length).toBeGreaterThanOrEqual(20);
  });

  it('stores the token hashed', async () => {
    const res = await api.admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    expect(res.status).toBe(201);
    const token = res.json.token as string;
    const [row] = await sql(api.coord, 'select token_hash from agents where id = ?', [res.json.agent.id]);
    expect(row.token_hash).toEqual(expect.any(String));
    expect(row.token_hash).not.toBe(token);
    expect(row.token_hash).not.toContain(token);
    expect(token).not.toContain(row.token_hash);
    const whole = await sql(api.coord, 'select row_to_json(a)::text as t from agents a where id = ?', [
      res.json.agent.id,
    ]);
    expect(whole[0].t).not.toContain(token);
  });

  it('gives each agent a different token', async () => {
    const a = await api.admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    const b = await api.admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    expect(a.json.token).not.toBe(b.json.token);
  });

  it('defaults labels to []', async () => {
    const res = await api.admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    expect(res.json.agent.labels).toEqual([]);
  });

  it('refuses a duplicate name with 409', async () => {
    const name = `agent-${randomUUID().slice(0, 8)}`;
    expect((await api.admin.post('/agents', { name })).status).toBe(201);
    const res = await api.admin.post('/agents', { name });
    expect(res.status).toBe(409);
    expect(res.json.success).toBe(false);
    expect(res.json.error).toEqual(expect.any(String));
  });

  it('refuses invalid names and labels with 400', async () => {
    for (const body of [{}, { name: '' }, { name: 'bad name' }, { name: 'ok', labels: ['bad label'] }]) {
      const res = await api.admin.post('/agents', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json.success).toBe(false);
    }
  });

  it('is 401 without a session and 403 for a non-admin', async () => {
    const anonymous = await new Client(api.coord.url).post('/agents', { name: 'nope' });
    expect(anonymous.status).toBe(401);
    expect(anonymous.json).toEqual({ success: false, error: 'Authentication required' });
    const { client } = await signUp(api.coord.url);
    const res = await client.post('/agents', { name: 'nope2' });
    expect(res.status).toBe(403);
  });

  it('records agent.create in the audit log with the actor email', async () => {
    const res = await api.admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    const rows = await sql(
      api.coord,
      `select actor_type, actor_name from audit_events where action = 'agent.create' and target_id = ?`,
      [res.json.agent.id],
    );
    expect(rows).toEqual([{ actor_type: 'user', actor_name: api.adminEmail }]);
  });
});

describe('GET /agents', () => {
  it('lists agents offline, without their tokens', async () => {
    const name = `agent-${randomUUID().slice(0, 8)}`;
    const created = await api.admin.post('/agents', { name, labels: ['db'] });
    const res = await api.admin.get('/agents');
    expect(res.status).toBe(200);
    expect(res.json.success).toBe(true);
    const agent = res.json.agents.find((a: { id: string }) => a.id === created.json.agent.id);
    expect(agent).toEqual({
      id: created.json.agent.id,
      name,
      labels: ['db'],
      online: false,
      version: null,
      last_seen_at: null,
    });
    expect(res.text).not.toContain(created.json.token);
    expect(res.text).not.toContain('token');
  });

  it('is 401 without a session', async () => {
    const res = await new Client(api.coord.url).get('/agents');
    expect(res.status).toBe(401);
  });
});

describe('DELETE /agents/:id', () => {
  it('answers 200, then the agent is gone', async () => {
    const created = await api.admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    const id = created.json.agent.id;
    const res = await del(api.admin, `/agents/${id}`);
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ success: true });
    const list = await api.admin.get('/agents');
    expect(list.json.agents.map((a: { id: string }) => a.id)).not.toContain(id);
    expect(await sql(api.coord, 'select id from agents where id = ?', [id])).toEqual([]);
    const again = await del(api.admin, `/agents/${id}`);
    expect(again.status).toBe(404);
    expect(again.json.success).toBe(false);
  });

  it('is 404 for a malformed id and 403 for a non-admin', async () => {
    expect((await del(api.admin, '/agents/abc')).status).toBe(404);
    const created = await api.admin.post('/agents', { name: `agent-${randomUUID().slice(0, 8)}` });
    const { client } = await signUp(api.coord.url);
    expect((await del(client, `/agents/${created.json.agent.id}`)).status).toBe(403);
  });
});
