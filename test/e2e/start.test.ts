// `npm start` as a newcomer runs it: no database server, no configuration. The coordinator starts
// an embedded PostgreSQL under its data folder, keeps data and the root secret across restarts,
// recovers from being killed (stale server cleanup), shuts down gracefully, and the password
// reset command works beside it.
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, sampleProject } from '../helpers/coordinator.ts';
import { cleanEnv, freePort, type Spawned, spawnNode, waitForOk } from '../helpers/processes.ts';

const SERVER = 'coordinator/src/server.ts';
let dataDir: string;
let env: Record<string, string | undefined>;
let base: string;
let running: Spawned | null = null;

async function start(): Promise<Spawned> {
  const proc = spawnNode(SERVER, [], env);
  running = proc;
  await waitForOk(`${base}/readyz`, proc, 90_000);
  return proc;
}

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'deckhand-start-'));
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  env = cleanEnv({
    PORT: String(port),
    HOST: '127.0.0.1',
    DECKHAND_DATA_DIR: dataDir,
    EMBEDDED_POSTGRES_PORT: String(await freePort()),
    LOG_LEVEL: 'info',
  });
});

afterAll(async () => {
  if (running && running.child.exitCode === null) {
    running.child.kill('SIGTERM');
    await running.exited;
  }
  await rm(dataDir, { recursive: true, force: true });
}, 60_000);

describe('npm start on a machine without a database server', () => {
  let cookie: string | null = null;
  let deployId = '';

  it('serves Deckhand on the embedded PostgreSQL and generates the root secret once', async () => {
    const proc = await start();
    const client = new Client(base);
    const reg = await client.post('/register', { email: 'admin@example.com', password: 'first password' });
    expect(reg.status).toBe(201);
    const created = await client.post('/projects', sampleProject({ name: 'site' }));
    expect(created.status).toBe(201);
    const deployed = await client.post('/deploy', { projectId: created.json.project.id });
    expect(deployed.status).toBe(200);
    deployId = deployed.json.deployId;
    const secret = await stat(join(dataDir, 'secret'));
    expect(secret.mode & 0o777).toBe(0o600);
    expect(proc.output()).toContain('no DATABASE_URL: starting the embedded PostgreSQL');
    expect(proc.output()).toContain('Deckhand is ready');
  });

  it('resets a password from the shell while the coordinator runs, ending that account’s sessions', async () => {
    const reset = spawnNode('coordinator/src/cli/reset-password.ts', ['Admin@Example.com'], {
      ...env,
      DECKHAND_NEW_PASSWORD: 'second password',
    });
    const { code } = await reset.exited;
    expect(reset.output()).toContain('Password changed for admin@example.com');
    expect(code).toBe(0);
    const old = new Client(base);
    expect(
      (await old.post('/login', { email: 'admin@example.com', password: 'first password' })).status,
    ).toBe(401);
    const client = new Client(base);
    const login = await client.post('/login', { email: 'admin@example.com', password: 'second password' });
    expect(login.status).toBe(200);
    cookie = client.cookie;
  });

  it('recovers after being killed: cleans up the stale database server and keeps the data and sessions', async () => {
    const secretBefore = await readFile(join(dataDir, 'secret'), 'utf8');
    running!.child.kill('SIGKILL');
    await running!.exited;
    const proc = await start();
    expect(proc.output()).toContain('cleaned up a stale embedded PostgreSQL server');
    expect(await readFile(join(dataDir, 'secret'), 'utf8')).toBe(secretBefore);
    const client = new Client(base);
    client.cookie = cookie;
    const me = await client.get('/me');
    expect(me.status).toBe(200);
    const detail = await client.get(`/deploy/${deployId}`);
    expect(detail.status).toBe(200);
    expect(detail.json.deployment.status).toBe('queued');
  });

  it('shuts down gracefully on SIGTERM, stopping its database', async () => {
    running!.child.kill('SIGTERM');
    const { code } = await running!.exited;
    expect(code).toBe(0);
    expect(running!.output()).toContain('"msg":"stopped"');
    await expect(stat(join(dataDir, 'postgres', 'postmaster.pid'))).rejects.toThrow();
  });

  it('refuses a bad configuration with a message naming the variable', async () => {
    const proc = spawnNode(SERVER, [], { ...env, PORT: 'eighty', DECKHAND_SECRET: 'short' });
    const { code } = await proc.exited;
    expect(code).toBe(78);
    expect(proc.output()).toContain('PORT');
    expect(proc.output()).toContain('DECKHAND_SECRET');
    expect(proc.output()).not.toContain('short');
  });
});
