// POST /agents/install against a real OpenSSH server (this machine is the host): the coordinator
// runs the installer itself — host key checked against the pinned fingerprint, Node checked,
// agent registered, uploaded, started (nohup here: no systemd), online — as a run whose steps
// GET /agents/installs/:id shows; a wrong host key or an old Node ends the run failed with what
// to do, registering nothing; the private key is never stored, answered or logged; admins only;
// every run is in the audit log. Runs are rows of agent_installs (any coordinator process shows
// them; test/fault/coordinator-cluster-install.test.ts runs two): one whose process stopped
// writing shows as failed, and old ones are pruned.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pino from 'pino';
import { ed25519KeyPair } from '../../coordinator/src/modules/ssh/ed25519-key.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loggerOptions } from '../../coordinator/src/plugins/logger.ts';
import {
  type Client,
  signUp,
  startCoordinator,
  type TestCoordinator,
  uniqueEmail,
} from '../helpers/coordinator.ts';
import { startSshd, type TestSshd } from '../helpers/sshd.ts';

const exec = promisify(execFile);

let coordinator: TestCoordinator | undefined;
let admin: Client;
let sshd: TestSshd | undefined;
let tmp: string;
let privateKey: string;
let fingerprint: string;
const logs: string[] = [];
const installed: string[] = [];

const body = (name: string, extra: Record<string, unknown> = {}) => ({
  host: '127.0.0.1',
  port: sshd!.port,
  username: sshd!.user,
  private_key: privateKey,
  host_key_fingerprint: fingerprint,
  name,
  labels: ['via-page', name],
  dir: join(tmp, name),
  node: process.execPath,
  wait_seconds: 30,
  ...extra,
});

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the run's JSON, read by assertions
async function finished(id: string): Promise<Record<string, any>> {
  const deadline = Date.now() + 45_000;
  for (;;) {
    const res = await admin.get(`/agents/installs/${id}`);
    expect(res.status, res.text).toBe(200);
    if (res.json.install.status !== 'running' || Date.now() > deadline) return res.json.install;
    await new Promise((r) => setTimeout(r, 200));
  }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a row of agent_installs
async function stored(id: string): Promise<Array<Record<string, any>>> {
  return coordinator!.orm.em.fork().execute('select * from agent_installs where id = ?', [id]);
}

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'deckhand-install-api-'));
  const pair = ed25519KeyPair('deckhand-install-api-test');
  privateKey = pair.private;
  sshd = await startSshd({ authorizedKeys: [pair.public] });
  const pub = join(tmp, 'host.pub');
  await writeFile(pub, `${sshd.hostKeyLine.split(' ').slice(1).join(' ')}\n`);
  fingerprint = (await exec('ssh-keygen', ['-l', '-E', 'sha256', '-f', pub])).stdout.split(' ')[1]!;
  const logger = pino(
    { ...loggerOptions('trace'), level: 'trace' },
    { write: (line: string) => logs.push(line) },
  );
  coordinator = await startCoordinator(
    { SCHEDULER_INTERVAL_MS: '200', AGENT_HEARTBEAT_MS: '1000', LOG_LEVEL: 'trace', REGISTRATION: 'open' },
    { logger },
  );
  ({ client: admin } = await signUp(coordinator.url));
});

afterAll(async () => {
  for (const dir of installed) {
    const pidFile = join(dir, 'agent.pid');
    if (existsSync(pidFile)) {
      try {
        process.kill(Number(readFileSync(pidFile, 'utf8').trim()), 'SIGTERM');
      } catch {
        // already gone
      }
    }
  }
  await new Promise((r) => setTimeout(r, 500));
  await coordinator?.close();
  await sshd?.stop();
  await rm(tmp, { recursive: true, force: true });
}, 30_000);

describe('POST /agents/install', () => {
  it('installs an agent that comes online, showing each step, and never shows the key', async () => {
    const name = `page-${randomBytes(3).toString('hex')}`;
    installed.push(join(tmp, name));
    const res = await admin.post('/agents/install', body(name));
    expect(res.status, res.text).toBe(202);
    expect(res.headers.get('location')).toBe(`/agents/installs/${res.json.install.id}`);
    expect(res.json.install).toMatchObject({ status: 'running', name, host: '127.0.0.1' });
    expect(res.text).not.toContain('PRIVATE KEY');

    const run = await finished(res.json.install.id);
    expect(run.status, JSON.stringify(run, null, 1)).toBe('succeeded');
    expect(run.steps.map((s: { status: string }) => s.status)).toEqual(Array(7).fill('done'));
    expect(run.lines).toContain(`Host key ${fingerprint} (ssh-ed25519) matches the pinned fingerprint.`);
    expect(run.lines.at(-1)).toMatch(new RegExp(`^${name} is online \\(agent \\d+\\.\\d+\\.\\d+\\)\\.$`));
    expect(run.agent_id).toEqual(expect.any(String));

    const agents = (await admin.get('/agents')).json.agents;
    expect(agents.find((a: { name: string }) => a.name === name)).toMatchObject({
      online: true,
      labels: ['via-page', name],
    });
    // The token went to the host only.
    expect(readFileSync(join(tmp, name, 'agent.env'), 'utf8')).toMatch(/^DECKHAND_TOKEN=dha_/m);
    const page = await admin.get(`/agents/installs/${run.id}`, { headers: { accept: 'text/html' } });
    expect(page.status).toBe(200);
    expect(page.text).toContain(`Done: ${name} is online`);

    const audit = await admin.get('/audit?limit=50');
    const actions = audit.json.audit_events.map((e: { action: string }) => e.action);
    expect(actions).toEqual(
      expect.arrayContaining(['agent.install.start', 'agent.create', 'agent.install.succeeded']),
    );
    // The key is in no answer, audit entry or log line.
    const keyBody = privateKey.split('\n')[1]!;
    expect(JSON.stringify(run)).not.toContain(keyBody);
    expect(audit.text).not.toContain(keyBody);
    expect(logs.join('')).not.toContain(keyBody);
    expect(logs.join('')).toContain('agent installed and online');
    // What the page shows is the stored row, which holds no key either.
    const [row] = await stored(run.id);
    expect(row).toMatchObject({ status: 'succeeded', agent_id: run.agent_id, name });
    expect(row!.lines).toEqual(run.lines);
    expect(row!.finished_at).not.toBeNull();
    expect(JSON.stringify(row)).not.toContain(keyBody);
  });

  it('fails a wrong host key before anything is sent, and says so, registering nothing', async () => {
    const wrong = `SHA256:${randomBytes(32).toString('base64').replace(/=+$/, '')}`;
    const res = await admin.post('/agents/install', body('wrong-key', { host_key_fingerprint: wrong }));
    expect(res.status, res.text).toBe(202);
    const run = await finished(res.json.install.id);
    expect(run.status).toBe('failed');
    expect(run.error).toContain(`it presented ${fingerprint} (ssh-ed25519), not ${wrong}. Nothing was sent.`);
    expect(run.steps.find((s: { step: string }) => s.step === 'connect').status).toBe('failed');
    expect(run.steps.find((s: { step: string }) => s.step === 'register').status).toBe('pending');
    expect(existsSync(join(tmp, 'wrong-key'))).toBe(false);
    expect((await admin.get('/agents')).json.agents.map((a: { name: string }) => a.name)).not.toContain(
      'wrong-key',
    );
    const audit = await admin.get('/audit?limit=50');
    expect(audit.json.audit_events.map((e: { action: string }) => e.action)).toContain(
      'agent.install.failed',
    );
  });

  it('says how to get Node 22+ when the host has an older one, and removes nothing it did not add', async () => {
    const oldNode = join(tmp, 'old-node');
    await writeFile(oldNode, '#!/bin/sh\necho v20.11.1\n', { mode: 0o755 });
    const res = await admin.post('/agents/install', body('old-node', { node: oldNode }));
    const run = await finished(res.json.install.id);
    expect(run.status).toBe('failed');
    expect(run.error).toContain('is too old: the agent needs Node 22+.');
    expect(run.error).toContain('https://deb.nodesource.com/setup_22.x');
    expect(run.steps.find((s: { step: string }) => s.step === 'check').status).toBe('failed');
  });

  it('refuses bad input at once: a key ssh cannot use, a taken name, no fingerprint', async () => {
    const notKey = await admin.post('/agents/install', body('bad-key', { private_key: 'not a key' }));
    expect(notKey.status).toBe(400);
    expect(notKey.json.error).toMatch(/^The private key is not a private key ssh can use/);
    const noFingerprint = body('no-fp') as Record<string, unknown>;
    delete noFingerprint.host_key_fingerprint;
    const missing = await admin.post('/agents/install', noFingerprint);
    expect(missing.status).toBe(400);
    await admin.post('/agents', { name: 'taken' });
    const taken = await admin.post('/agents/install', body('taken'));
    expect(taken.status).toBe(409);
    const insecure = await admin.post(
      '/agents/install',
      body('insecure', { agent_url: 'http://deploy.example.com' }),
    );
    expect(insecure.status).toBe(400);
    expect(insecure.json.error).toContain('unencrypted');
    // Refused requests carried a real key: it is not in the answers or the log either.
    const keyBody = privateKey.split('\n')[1]!;
    for (const res of [missing, taken, insecure]) expect(JSON.stringify(res)).not.toContain(keyBody);
    expect(logs.join('')).not.toContain(keyBody);
  });

  it('shows a run whose coordinator stopped writing as failed, with what to do, and prunes old runs', async () => {
    const wrong = `SHA256:${randomBytes(32).toString('base64').replace(/=+$/, '')}`;
    const res = await admin.post('/agents/install', body('stale-run', { host_key_fingerprint: wrong }));
    const run = await finished(res.json.install.id);
    expect(run.status).toBe('failed');
    // As if its process had died while connecting: still "running", last written a minute ago
    // (three heartbeats are 3 s here).
    const em = coordinator!.orm.em.fork();
    await em.execute(
      `update agent_installs set status = 'running', error = null, finished_at = null,
              steps = jsonb_set(steps, '{1,status}', '"running"'), updated_at = now() - interval '1 minute'
        where id = ?`,
      [run.id],
    );
    const shown = (await admin.get(`/agents/installs/${run.id}`)).json.install;
    expect(shown.status).toBe('failed');
    expect(shown.error).toBe(
      'The coordinator running this installation stopped before it ended; run it again.',
    );
    expect(shown.steps.find((s: { step: string }) => s.step === 'connect').status).toBe('failed');
    const page = await admin.get(`/agents/installs/${run.id}`, { headers: { accept: 'text/html' } });
    expect(page.text).toContain('The installation failed.');
    expect(page.text).toContain('stopped before it ended; run it again.');
    // Written a moment ago, it is still running.
    await em.execute(`update agent_installs set updated_at = now() where id = ?`, [run.id]);
    expect((await admin.get(`/agents/installs/${run.id}`)).json.install.status).toBe('running');

    // Runs older than 30 days go when the next one starts; a live one never does.
    await em.execute(
      `update agent_installs set created_at = now() - interval '31 days', status = 'failed' where id = ?`,
      [run.id],
    );
    const next = await admin.post('/agents/install', body('after-prune', { host_key_fingerprint: wrong }));
    expect(next.status).toBe(202);
    expect(await stored(run.id)).toEqual([]);
    expect((await admin.get(`/agents/installs/${run.id}`)).status).toBe(404);
    expect(await stored(next.json.install.id)).toHaveLength(1);
    await finished(next.json.install.id);
  });

  it('is for admins only', async () => {
    const { client: viewer, user } = await signUp(coordinator!.url, uniqueEmail('viewer'));
    expect(user.role).toBe('viewer');
    const res = await viewer.post('/agents/install', body('by-viewer'));
    expect(res.status).toBe(403);
    expect((await viewer.get('/agents/installs/00000000-0000-0000-0000-000000000000')).status).toBe(403);
    expect((await admin.get('/agents/installs/00000000-0000-0000-0000-000000000000')).status).toBe(404);
    expect((await admin.get('/agents/installs/not-a-uuid')).status).toBe(404);
  });
});
