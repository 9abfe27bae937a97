// An agent installation from the Agents page, with two coordinator processes behind one address
// (README "Running more than one coordinator"): the run started through A is read through B —
// while it goes and when it ends, as JSON and as the page — because A records it in PostgreSQL.
// A run whose process is SIGKILLed mid-install shows on B as failed, with what to do, within a
// few heartbeats (1 s here), and so on A once it is back. A real OpenSSH server is the host.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ed25519KeyPair } from '../../coordinator/src/modules/ssh/ed25519-key.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '../helpers/coordinator.ts';
import { Admin, coordinatorCluster, tails, waitFor } from '../helpers/faults-coordinator.ts';
import type { CoordinatorProcess } from '../helpers/processes.ts';
import { startSshd, type TestSshd } from '../helpers/sshd.ts';

const exec = promisify(execFile);

const cluster = coordinatorCluster(2, { AGENT_HEARTBEAT_MS: '1000', SCHEDULER_INTERVAL_MS: '1000' });
let a: CoordinatorProcess;
let b: CoordinatorProcess;
let adminA: Admin;
let adminB: Admin;
let sshd: TestSshd | undefined;
let tmp: string;
let privateKey: string;
let fingerprint: string;
const installed: string[] = [];

interface StepJson {
  step: string;
  status: string;
}
interface RunJson {
  id: string;
  status: string;
  steps: StepJson[];
  lines: string[];
  error: string | null;
  agent_id: string | null;
}

const stepStatus = (run: RunJson, step: string) => run.steps.find((s) => s.step === step)?.status;

/** A `node` for the host that waits `seconds` before each use, so a step lasts that long. */
async function slowNode(seconds: number): Promise<string> {
  const path = join(tmp, `slow-node-${seconds}`);
  await writeFile(path, `#!/bin/sh\nsleep ${seconds}\nexec '${process.execPath}' "$@"\n`, { mode: 0o755 });
  return path;
}

async function start(name: string, node: string): Promise<string> {
  installed.push(join(tmp, name));
  const res = await adminA.client.post('/agents/install', {
    host: '127.0.0.1',
    port: sshd!.port,
    username: sshd!.user,
    private_key: privateKey,
    host_key_fingerprint: fingerprint,
    name,
    labels: [name],
    agent_url: a.url,
    dir: join(tmp, name),
    node,
    wait_seconds: 30,
  });
  expect(res.status, res.text).toBe(202);
  return res.json.install.id as string;
}

async function read(admin: Admin, id: string): Promise<RunJson> {
  const res = await admin.client.get(`/agents/installs/${id}`);
  if (res.status !== 200)
    throw new Error(`GET /agents/installs/${id} on ${admin.url}: ${res.status} ${res.text}`);
  return res.json.install as RunJson;
}

beforeAll(async () => {
  [a, b] = cluster.processes as [CoordinatorProcess, CoordinatorProcess];
  adminA = await Admin.signUp(a.url);
  const viaB = new Client(b.url);
  viaB.cookie = adminA.client.cookie;
  adminB = new Admin(viaB, b.url);
  adminA.diagnostics = adminB.diagnostics = () => tails(a.proc, b.proc);

  tmp = await mkdtemp(join(tmpdir(), 'deckhand-cluster-install-'));
  const pair = ed25519KeyPair('deckhand-cluster-install-test');
  privateKey = pair.private;
  sshd = await startSshd({ authorizedKeys: [pair.public] });
  const pub = join(tmp, 'host.pub');
  await writeFile(pub, `${sshd.hostKeyLine.split(' ').slice(1).join(' ')}\n`);
  fingerprint = (await exec('ssh-keygen', ['-l', '-E', 'sha256', '-f', pub])).stdout.split(' ')[1]!;
}, 30_000);

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
  await sshd?.stop();
  if (tmp) await rm(tmp, { recursive: true, force: true });
}, 30_000);

describe('agent installation with two coordinator processes', () => {
  it('started through A, is followed through B while it goes and until the agent is online', async () => {
    // Checking Node takes 2 s here, so B sees the run half-way.
    const id = await start('cl-install', await slowNode(2));
    const midway = await waitFor(
      () => read(adminB, id),
      (run) => stepStatus(run, 'check') === 'running',
      10_000,
      (run) => `${JSON.stringify(run)}\n${adminA.diagnostics()}`,
    );
    expect(midway.status).toBe('running');
    expect(stepStatus(midway, 'connect')).toBe('done');
    expect(stepStatus(midway, 'register')).toBe('pending');
    expect(midway.lines).toContain(`Host key ${fingerprint} (ssh-ed25519) matches the pinned fingerprint.`);

    const done = await waitFor(
      () => read(adminB, id),
      (run) => run.status !== 'running',
      45_000,
      (run) => `${JSON.stringify(run)}\n${adminA.diagnostics()}`,
      100,
    );
    expect(done.status, JSON.stringify(done, null, 1)).toBe('succeeded');
    expect(done.steps.map((s) => s.status)).toEqual(Array(7).fill('done'));
    expect(done.lines.at(-1)).toMatch(/^cl-install is online \(agent \d+\.\d+\.\d+\)\.$/);
    // Both processes answer the same.
    expect(await read(adminA, id)).toEqual(done);
    const page = await adminB.client.get(`/agents/installs/${id}`, { headers: { accept: 'text/html' } });
    expect(page.status).toBe(200);
    expect(page.text).toContain('Done: cl-install is online');
    const agents = (await adminB.client.get('/agents')).json.agents as Array<{
      name: string;
      online: boolean;
    }>;
    expect(agents.find((x) => x.name === 'cl-install')?.online).toBe(true);
    expect(JSON.stringify(done)).not.toContain(privateKey.split('\n')[1]!);
  });

  it('whose process is SIGKILLed mid-install shows as failed on B, with what to do, and on A once it is back', async () => {
    const id = await start('cl-killed', await slowNode(20));
    await waitFor(
      () => read(adminB, id),
      (run) => stepStatus(run, 'check') === 'running',
      10_000,
      (run) => `${JSON.stringify(run)}\n${adminA.diagnostics()}`,
    );
    a.proc.child.kill('SIGKILL');
    await a.proc.exited;
    const killedAt = Date.now();

    // Still "running" on B until three heartbeats (3 s) pass without a write.
    const failed = await waitFor(
      () => read(adminB, id),
      (run) => run.status !== 'running',
      15_000,
      (run) => `${JSON.stringify(run)}\n${adminB.diagnostics()}`,
      100,
    );
    const shownAfterMs = Date.now() - killedAt;
    expect(failed.status).toBe('failed');
    expect(failed.error).toBe(
      'The coordinator running this installation stopped before it ended; run it again.',
    );
    expect(stepStatus(failed, 'connect')).toBe('done');
    expect(stepStatus(failed, 'check')).toBe('failed');
    expect(stepStatus(failed, 'register')).toBe('pending');
    expect(failed.agent_id).toBeNull();
    expect(shownAfterMs).toBeLessThan(6_000);
    const page = await adminB.client.get(`/agents/installs/${id}`, { headers: { accept: 'text/html' } });
    expect(page.text).toContain('The installation failed.');
    expect(page.text).toContain('stopped before it ended; run it again.');

    // A restarted process (a new instance) knows the run from the database.
    await a.restart();
    expect(await read(adminA, id)).toEqual(failed);
  }, 60_000);
});
