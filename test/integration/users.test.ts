// The users API: admins list accounts, invite an address with a role (a link shown once that
// opens registration for that address only), change roles and remove accounts — never the last
// admin. Registration stays closed to everyone else.
import { describe, expect, it } from 'vitest';
import { Client, coordinatorWithAdmin } from '../helpers/coordinator.ts';
import { del, patch } from '../helpers/projects.ts';
import { expectJsonError } from '../helpers/responses.ts';

const api = coordinatorWithAdmin();
const PASSWORD = 'correct horse battery';

async function invite(email: string, role: string) {
  const res = await api.admin.post('/users/invitations', { email, role });
  expect(res.status, res.text).toBe(201);
  const token = new URL(res.json.url as string).searchParams.get('invitation')!;
  return { res, token };
}

async function register(email: string, invitation?: string) {
  const client = new Client(api.coord.url);
  const res = await client.post('/register', {
    email,
    password: PASSWORD,
    ...(invitation ? { invitation } : {}),
  });
  return { client, res };
}

describe('invitations', () => {
  it('let the invited address register with the invited role while registration is closed', async () => {
    expectJsonError((await register('stranger@example.com')).res, 403);
    const { res, token } = await invite('Dev@Example.com', 'deployer');
    expect(res.json.invitation).toMatchObject({
      email: 'dev@example.com',
      role: 'deployer',
      accepted_at: null,
    });
    expect(res.json.url).toMatch(/\/register\?invitation=dhi_/);
    // Only for that address, and only once.
    expectJsonError((await register('other@example.com', token)).res, 403);
    const { client, res: registered } = await register('dev@example.com', token);
    expect(registered.status, registered.text).toBe(201);
    expect(registered.json.user).toMatchObject({ email: 'dev@example.com', role: 'deployer' });
    expect((await client.get('/me')).json.user.role).toBe('deployer');
    expectJsonError((await register('dev2@example.com', token)).res, 403);
    // The token is stored hashed and is in no listing.
    const listed = await api.admin.get('/users/invitations');
    expect(listed.text).not.toContain(token);
  });

  it('are listed while open, can be revoked, and need an admin', async () => {
    const { res, token } = await invite('late@example.com', 'viewer');
    const open = await api.admin.get('/users/invitations');
    expect(open.json.invitations.map((i: { email: string }) => i.email)).toContain('late@example.com');
    expect((await del(api.admin, `/users/invitations/${res.json.invitation.id}`)).status).toBe(200);
    expectJsonError((await register('late@example.com', token)).res, 403);
    expectJsonError(
      await api.admin.post('/users/invitations', { email: 'dev@example.com', role: 'viewer' }),
      409,
    );
    expectJsonError(
      await api.admin.post('/users/invitations', { email: 'x@example.com', role: 'owner' }),
      400,
    );
    const { token: viewerToken } = await invite('viewer@example.com', 'viewer');
    const { client: viewer } = await register('viewer@example.com', viewerToken);
    expectJsonError(await viewer.post('/users/invitations', { email: 'y@example.com', role: 'admin' }), 403);
    expectJsonError(await viewer.get('/users'), 403);
  });
});

describe('users', () => {
  it('lists accounts, changes roles, removes accounts (their sessions end), and always keeps an admin', async () => {
    const { token } = await invite('ops@example.com', 'viewer');
    const { client: ops, res } = await register('ops@example.com', token);
    const opsId = res.json.user.id as string;
    const users = (await api.admin.get('/users')).json.users as Array<{
      id: string;
      email: string;
      role: string;
    }>;
    const me = users.find((u) => u.email === api.adminEmail)!;
    expect(users.find((u) => u.id === opsId)).toMatchObject({ email: 'ops@example.com', role: 'viewer' });

    const promoted = await patch(api.admin, `/users/${opsId}`, { role: 'admin' });
    expect(promoted.status, promoted.text).toBe(200);
    expect(promoted.json.user.role).toBe('admin');
    expect((await ops.get('/me')).json.user.role).toBe('admin');
    // Two admins: one may step down; then the other is the last and may not.
    expect((await patch(ops, `/users/${me.id}`, { role: 'viewer' })).status).toBe(200);
    expectJsonError(await patch(ops, `/users/${opsId}`, { role: 'deployer' }), 409);
    expectJsonError(await del(ops, `/users/${opsId}`), 409);
    expect((await patch(ops, `/users/${me.id}`, { role: 'admin' })).status).toBe(200);

    expect((await del(api.admin, `/users/${opsId}`)).status).toBe(200);
    expectJsonError(await ops.get('/me'), 401);
    expectJsonError(await del(api.admin, `/users/${opsId}`), 404);
    expectJsonError(await patch(api.admin, '/users/nope', { role: 'viewer' }), 404);
  });
});
