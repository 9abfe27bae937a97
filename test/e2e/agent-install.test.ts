// `deckhand agents install` against a real OpenSSH server (this machine is the host): it refuses
// a host key nobody confirmed, says when Node is too old, and otherwise uploads the agent as one
// file (served by the coordinator, built on demand), registers it, starts it — no systemd here,
// so with nohup — and waits until it is online; the installed agent then runs a deployment.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentBundle } from '../../coordinator/src/modules/agent-bundle/agent-bundle.ts';
import { registeredAgents } from '../helpers/agents.ts';
import type { Client, TestCoordinator } from '../helpers/coordinator.ts';
import { createTestRepo, type TestRepo } from '../helpers/git.ts';
import { type InstallHost, runAgentsCommand, startInstallHost } from '../helpers/installer.ts';
import { repoRoot } from '../helpers/processes.ts';
import { rsaHostKey, type TestSshd } from '../helpers/sshd.ts';

const exec = promisify(execFile);

let host: InstallHost | undefined;
let coordinator: TestCoordinator | undefined;
let admin: Client;
let apiToken: string;
let sshd: TestSshd | undefined;
let repo: TestRepo | undefined;
let tmp: string;
let keyFile: string;
let fingerprint: string;
let rsaFingerprint: string;
/** Folders the installer put agents in (their pid files stop them after the tests). */
const installed: string[] = [];
/** The agent the install test put on the host, for the upgrade test. */
let installedAgent: { name: string; dir: string } | undefined;

const runInstall = (args: string[], sub: 'install' | 'upgrade' = 'install') =>
  runAgentsCommand(sub, args, coordinator!.url, apiToken);

const baseArgs = (name: string, dir: string) => [
  '--host',
  '127.0.0.1',
  '--port',
  String(sshd!.port),
  '--user',
  sshd!.user,
  '--key',
  keyFile,
  '--name',
  name,
  '--labels',
  `installed,${name}`,
  '--dir',
  dir,
  '--wait-seconds',
  '30',
];

const agents = () => registeredAgents(admin);

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'deckhand-install-'));
  // A second host key (RSA): the upgrade test pins that one.
  const rsa = await rsaHostKey(tmp);
  rsaFingerprint = rsa.fingerprint;
  host = await startInstallHost(tmp, {
    keyComment: 'deckhand-installer-test',
    extraConfig: [`HostKey ${rsa.file}`],
  });
  ({ coordinator, admin, apiToken, sshd, keyFile, fingerprint } = host);
  repo = await createTestRepo();
  await repo.commit({ 'app.txt': 'installed agent\n' }, 'first');
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
  await host?.close();
  await repo?.remove();
  await rm(tmp, { recursive: true, force: true });
}, 30_000);

describe('the agent as one file', () => {
  it('is built on demand when missing', async () => {
    const file = join(tmp, 'built', 'deckhand-agent.js');
    const bundle = await new AgentBundle(file).get();
    expect(bundle.version).toBe(
      JSON.parse(readFileSync(join(repoRoot, 'agent', 'package.json'), 'utf8')).version,
    );
    expect(readFileSync(file).equals(bundle.code)).toBe(true);
  });

  it('is served by GET /agent/download with its version, and runs alone', async () => {
    const res = await fetch(`${coordinator!.url}/agent/download`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    const version = JSON.parse(readFileSync(join(repoRoot, 'agent', 'package.json'), 'utf8')).version;
    expect(res.headers.get('x-deckhand-agent-version')).toBe(version);
    const code = Buffer.from(await res.arrayBuffer());
    expect(code.subarray(0, 60).toString()).toMatch(/^#!\/usr\/bin\/env node\n\/\/ deckhand-agent /);
    const info = await (await fetch(`${coordinator!.url}/agent/version`)).json();
    expect(info).toMatchObject({ success: true, version, protocol_version: expect.any(Number) });
    // The file runs alone: no node_modules next to it.
    const alone = join(tmp, 'alone.js');
    await writeFile(alone, code);
    const run = await exec(process.execPath, [alone, '--url', 'http://127.0.0.1:1'], { cwd: tmp }).catch(
      (err: { code: number; stderr: string }) => err,
    );
    expect(run).toMatchObject({ code: 2, stderr: expect.stringContaining('Give the agent token') });
  });
});

describe('deckhand agents install', () => {
  it('refuses a host key nobody confirmed, and a wrong one, registering nothing', async () => {
    const dir = join(tmp, 'unconfirmed');
    const unconfirmed = await runInstall(baseArgs('unconfirmed', dir));
    expect(unconfirmed.code, unconfirmed.stdout + unconfirmed.stderr).toBe(64);
    expect(unconfirmed.stderr).toContain(
      `The host key of ${sshd!.user}@127.0.0.1:${sshd!.port} is ${fingerprint} (ssh-ed25519), and it was not confirmed.`,
    );
    expect(unconfirmed.stderr).toContain(`--host-key-fingerprint ${fingerprint}`);
    const wrong = `SHA256:${randomBytes(32).toString('base64').replace(/=+$/, '')}`;
    const mismatch = await runInstall([...baseArgs('mismatch', dir), '--host-key-fingerprint', wrong]);
    expect(mismatch.code).toBe(64);
    expect(mismatch.stderr).toContain(
      `it presented ${fingerprint} (ssh-ed25519), not ${wrong}. Nothing was sent.`,
    );
    expect(existsSync(dir)).toBe(false);
    expect((await agents()).map((a) => a.name)).not.toContain('unconfirmed');
  });

  it('says how to get Node 22+ when the host has an older one, registering nothing', async () => {
    const oldNode = join(tmp, 'old-node');
    await writeFile(oldNode, '#!/bin/sh\necho v20.11.1\n', { mode: 0o755 });
    const dir = join(tmp, 'old');
    const res = await runInstall([
      ...baseArgs('old-node', dir),
      '--host-key-fingerprint',
      fingerprint,
      '--node',
      oldNode,
    ]);
    expect(res.code, res.stdout + res.stderr).toBe(1);
    expect(res.stderr).toContain(
      `Node v20.11.1 at ${oldNode} on ${sshd!.user}@127.0.0.1:${sshd!.port} is too old: the agent needs Node 22+.`,
    );
    expect(res.stderr).toContain('https://deb.nodesource.com/setup_22.x');
    expect((await agents()).map((a) => a.name)).not.toContain('old-node');
    expect(existsSync(dir)).toBe(false);
  });

  it('installs a working agent that comes online and deploys', async () => {
    const name = `inst-${randomBytes(3).toString('hex')}`;
    const dir = join(tmp, name);
    installed.push(dir);
    installedAgent = { name, dir };
    const res = await runInstall([
      ...baseArgs(name, dir),
      '--host-key-fingerprint',
      fingerprint,
      '--node',
      process.execPath,
    ]);
    expect(
      res.code,
      `${res.stdout}\n${res.stderr}\n${existsSync(join(dir, 'agent.log')) ? readFileSync(join(dir, 'agent.log'), 'utf8') : ''}`,
    ).toBe(0);
    expect(res.stdout).toContain(`Host key ${fingerprint} (ssh-ed25519) matches the pinned fingerprint.`);
    expect(res.stdout).toContain(`Registered agent ${name} (labels: installed, ${name}).`);
    expect(res.stdout).toContain('with nohup');
    expect(res.stdout).toContain(`Start it again with ${dir}/start.sh`);
    expect(res.stdout).toMatch(new RegExp(`${name} is online \\(agent \\d+\\.\\d+\\.\\d+\\)\\.\\n$`));
    // The token is in a file only its owner reads, never in the installer's output.
    expect(statSync(join(dir, 'agent.env')).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(dir, 'agent.env'), 'utf8')).toMatch(/^DECKHAND_TOKEN=dha_/m);
    expect(res.stdout + res.stderr).not.toMatch(/dha_/);
    // One file, run by the given Node.
    expect(readFileSync(join(dir, 'deckhand-agent.js'), 'utf8').split('\n')[1]).toMatch(
      /^\/\/ deckhand-agent /,
    );
    const me = (await agents()).find((a) => a.name === name);
    expect(me).toMatchObject({ online: true, labels: ['installed', name] });

    // It really works: a deployment to its label runs on it.
    const project = await admin.post('/projects', {
      name: `via-${name}`,
      forge_url: repo!.url,
      commands: ['cat app.txt'],
      target: { agents: { labels: [name] } },
    });
    expect(project.status, project.text).toBe(201);
    const deploy = await admin.post('/deploy', { projectId: project.json.project.id });
    let detail = await admin.get(`/deploy/${deploy.json.deployId}`);
    const deadline = Date.now() + 30_000;
    while (
      !['success', 'failed', 'cancelled', 'timed_out'].includes(detail.json.deployment.status) &&
      Date.now() < deadline
    ) {
      await new Promise((r) => setTimeout(r, 200));
      detail = await admin.get(`/deploy/${deploy.json.deployId}`);
    }
    expect(detail.json.deployment.status, JSON.stringify(detail.json)).toBe('success');
    expect(detail.json.logs[1]).toMatchObject({ host: name, log: 'installed agent\n' });
    expect(existsSync(join(dir, 'work', `via-${name}`, 'app.txt'))).toBe(true);
  });

  it('upgrades: never to an older version, not to the same one, and replaces an older one, restarting it', async () => {
    const { name, dir } = installedAgent!;
    const file = join(dir, 'deckhand-agent.js');
    // Pinned by the host's RSA key, which is not the one a connection negotiates first.
    const args = [
      ...baseArgs(name, dir),
      '--host-key-fingerprint',
      rsaFingerprint,
      '--node',
      process.execPath,
    ];
    const version = JSON.parse(readFileSync(join(repoRoot, 'agent', 'package.json'), 'utf8')).version;
    const setInstalled = async (v: string) => {
      const text = readFileSync(file, 'utf8').replace(
        /^\/\/ deckhand-agent \S+:/m,
        `// deckhand-agent ${v}:`,
      );
      await writeFile(file, text);
    };

    const same = await runInstall(args, 'upgrade');
    expect(same.code, same.stdout + same.stderr).toBe(0);
    expect(same.stdout).toContain(`deckhand-agent ${version} is installed in ${dir} already: nothing to do.`);

    await setInstalled('9.9.9');
    const older = await runInstall(args, 'upgrade');
    expect(older.code).toBe(1);
    expect(older.stderr).toContain(
      `The coordinator serves deckhand-agent ${version}, older than the 9.9.9 installed in ${dir}: an upgrade never installs an older version.`,
    );
    expect(readFileSync(file, 'utf8')).toMatch(/^\/\/ deckhand-agent 9\.9\.9:/m);

    await setInstalled('0.0.1');
    const pidBefore = readFileSync(join(dir, 'agent.pid'), 'utf8').trim();
    const newer = await runInstall(args, 'upgrade');
    expect(newer.code, newer.stdout + newer.stderr).toBe(0);
    expect(newer.stdout).toContain(`Host key ${rsaFingerprint} (ssh-rsa) matches the pinned fingerprint.`);
    expect(newer.stdout).toContain(`Replaced deckhand-agent 0.0.1 with ${version} in ${dir}.`);
    expect(newer.stdout).toContain(`${name} is online (agent ${version}).`);
    expect(readFileSync(file, 'utf8')).toMatch(
      new RegExp(`^// deckhand-agent ${version.replaceAll('.', '\\.')}:`, 'm'),
    );
    const pidAfter = readFileSync(join(dir, 'agent.pid'), 'utf8').trim();
    expect(pidAfter).not.toBe(pidBefore);
    expect(() => process.kill(Number(pidBefore), 0)).toThrow();
    expect((await agents()).find((a) => a.name === name)).toMatchObject({ online: true, version });
  });
});
