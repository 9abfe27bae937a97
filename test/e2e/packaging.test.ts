// Packaging, checked as far as this machine allows (no Docker daemon, no systemd as init):
// Debian's docker-compose validates docker-compose.yml with every profile; a Dockerfile linter
// (dockerlinter, from npm: hadolint's rules in JavaScript, with Debian's ShellCheck for RUN lines,
// since hadolint itself is neither in Debian nor on npm) passes every Dockerfile of the repository,
// and the project's own rules for them hold; systemd-analyze verifies the units
// the installer writes and the sample unit; and the start commands of the agent image, of the
// installer's unit and of the coordinator image are run for real, here, without Docker or
// systemd: the agent comes online, the coordinator answers /readyz and serves the agent file; and
// the compose file's agent-token command registers an agent whose token file the agent starts with.
import { execFile, execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, copyFile, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createRequire } from 'node:module';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { unitText } from '../../installer/src/installer.ts';
import { AgentBundle } from '../../coordinator/src/modules/agent-bundle/agent-bundle.ts';
import {
  AGENT_FILE,
  AGENT_USER,
  agentSetup,
  servedAgentVersion,
} from '../../coordinator/src/views/agent-setup.ts';
import { type Client, signUp, startCoordinator, type TestCoordinator } from '../helpers/coordinator.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import {
  cleanEnv,
  freePort,
  repoRoot,
  type Spawned,
  spawnNode,
  waitForOk,
  watched,
} from '../helpers/processes.ts';
import { cmdOf, composeList, composeService, stages, waitOnline, which } from '../helpers/packaging.ts';

const exec = promisify(execFile);

const COMPOSE = which('docker-compose');
const SYSTEMD_ANALYZE = which('systemd-analyze');
const SHELLCHECK = which('shellcheck');
// Run through node: the package's install script (which would download a ShellCheck binary) is
// denied in package.json's allowScripts, and with it the bin's executable bit.
const DOCKERLINTER = join(
  dirname(createRequire(import.meta.url).resolve('dockerlinter/package.json')),
  'bin',
  'dockerfilelinter.js',
);

let tmp: string;
let bundleFile: string;
let coordinator: TestCoordinator | undefined;
let admin: Client;
const spawned: Spawned[] = [];

async function register(name: string): Promise<string> {
  const res = await admin.post('/agents', { name });
  expect(res.status, res.text).toBe(201);
  return res.json.token as string;
}

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'deckhand-packaging-'));
  bundleFile = join(tmp, 'opt', 'deckhand', 'deckhand-agent.js');
  await new AgentBundle(bundleFile).get();
  // Where the Agents page's setup steps put it on a host, under tmp as /.
  await mkdir(dirname(join(tmp, AGENT_FILE)), { recursive: true });
  await copyFile(bundleFile, join(tmp, AGENT_FILE));
  coordinator = await startCoordinator({ AGENT_HEARTBEAT_MS: '1000' });
  ({ client: admin } = await signUp(coordinator.url));
}, 120_000);

afterAll(async () => {
  for (const p of spawned) {
    if (p.child.exitCode === null && p.child.signalCode === null) {
      p.child.kill('SIGTERM');
      await Promise.race([p.exited, new Promise((r) => setTimeout(r, 5_000))]);
      p.child.kill('SIGKILL');
    }
  }
  await coordinator?.close();
  await rm(tmp, { recursive: true, force: true });
}, 30_000);

describe.skipIf(COMPOSE === null)('docker-compose.yml', () => {
  it('is valid for docker-compose (Debian), with every profile', async () => {
    for (const profiles of [[], ['mail']]) {
      const args = ['-f', 'docker-compose.yml', ...profiles.flatMap((p) => ['--profile', p]), 'config', '-q'];
      const res = await exec(COMPOSE!, args, {
        cwd: repoRoot,
        env: { ...process.env, DECKHAND_SECRET: 'x'.repeat(40) },
      }).catch((err: { code: number; stderr: string }) => err);
      expect(res, JSON.stringify(res)).toMatchObject({ stderr: '' });
    }
    const env = { ...process.env, DECKHAND_SECRET: 'x'.repeat(40) };
    const config = async (...args: string[]) =>
      (await exec(COMPOSE!, ['-f', 'docker-compose.yml', ...args], { cwd: repoRoot, env })).stdout;
    expect((await config('--profile', 'mail', 'config', '--services')).trim().split('\n').sort()).toEqual([
      'agent',
      'agent-token',
      'coordinator',
      'mailpit',
      'postgres',
    ]);
    expect((await config('config', '--profiles')).trim()).toBe('mail');
  });

  it('starts the agent and its one-shot agent-token service by default, the agent after it', async () => {
    const { stdout } = await exec(COMPOSE!, ['-f', 'docker-compose.yml', 'config'], {
      cwd: repoRoot,
      env: { ...process.env, DECKHAND_SECRET: 'x'.repeat(40) },
    });
    // Compose v1 lists every service under `config --services`; what a profile hides is its key.
    const service = (name: string) => stdout.split(/\n {2}(?=\S)/).find((b) => b.startsWith(`${name}:\n`))!;
    for (const name of ['agent', 'agent-token']) expect(service(name)).not.toMatch(/\n {4}profiles:/);
    expect(service('mailpit')).toMatch(/\n {4}profiles:\n {4}- mail\n/);
    expect(service('agent-token')).toMatch(/\n {4}restart: ["']no["']\n/);
    // What the run-for-real test below reads from the file is what Compose reads.
    const command = composeList(composeService('agent-token'), 'command');
    expect(service('agent-token')).toContain(
      `\n    command:\n${command.map((c) => `    - ${c}\n`).join('')}`,
    );
    expect(service('agent-token')).toMatch(
      /\n {4}depends_on:\n {6}coordinator:\n {8}condition: service_healthy\n/,
    );
    expect(service('agent')).toMatch(/\n {6}agent-token:\n {8}condition: service_completed_successfully\n/);
    expect(service('agent')).toMatch(/\n {6}DECKHAND_TOKEN: ''\n/);
    expect(service('agent')).toMatch(/\n {6}DECKHAND_TOKEN_FILE: \/run\/deckhand\/agent-token\n/);
    expect(service('agent')).toMatch(/\n {4}- agent-token:\/run\/deckhand:ro(\n|$)/);
    // A hand-registered token instead: the file is turned off, so the agent gets exactly one.
    const manual = await exec(COMPOSE!, ['-f', 'docker-compose.yml', 'config'], {
      cwd: repoRoot,
      env: {
        ...process.env,
        DECKHAND_SECRET: 'x'.repeat(40),
        DECKHAND_AGENT_TOKEN: 'dha_manual',
        DECKHAND_AGENT_TOKEN_FILE: '',
      },
    });
    expect(manual.stdout).toMatch(/\n {6}DECKHAND_TOKEN: dha_manual\n {6}DECKHAND_TOKEN_FILE: ''\n/);
  });

  it('refuses to start without DECKHAND_SECRET', async () => {
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.DECKHAND_SECRET;
    const res = await exec(COMPOSE!, ['-f', 'docker-compose.yml', 'config', '-q'], {
      cwd: repoRoot,
      env,
    }).catch((err: { code: number; stderr: string }) => err);
    expect(res).toMatchObject({
      code: expect.any(Number),
      stderr: expect.stringContaining('DECKHAND_SECRET'),
    });
  });
});

interface LintFinding {
  lineNumber: number;
  code: string;
  level: string;
  message: string;
}

/**
 * The linter's findings for one Dockerfile, with the repository's rule configuration. Its
 * ShellCheck pass writes scratch files into the working directory, hence a fresh one per run.
 */
async function lintDockerfile(file: string, shellcheck: boolean): Promise<LintFinding[]> {
  const cwd = await mkdtemp(join(tmp, 'lint-'));
  const args = [DOCKERLINTER, '-f', file, '-y', join(repoRoot, 'dockerfilelinter.yaml'), '-j', '-e'];
  args.push('-s', shellcheck ? 'sh' : 'none');
  const res = await exec(process.execPath, args, { cwd }).then(
    (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (err: { code: number; stdout: string; stderr: string }) => err,
  );
  // -e: exit 1 exactly when something was found; anything else (ShellCheck failing) is an error.
  if (res.stderr !== '' || (res.code === 0) !== (res.stdout.trim() === '')) {
    throw new Error(`dockerlinter failed on ${file} (exit ${res.code}): ${res.stderr}${res.stdout}`);
  }
  return res.stdout.trim() === '' ? [] : (JSON.parse(res.stdout) as LintFinding[]);
}

const dockerfiles = execFileSync('git', ['ls-files'], { cwd: repoRoot, encoding: 'utf8' })
  .split('\n')
  // Dockerfile, Dockerfile.<variant>, <name>.Dockerfile; not files that only mention it (the config).
  .filter((f) => /(^|\/)(dockerfile(\.[\w-]+)?|[\w.-]+\.dockerfile)$/i.test(f));

describe('the Dockerfile linter', () => {
  it('finds the Dockerfiles', () => {
    expect(dockerfiles).toEqual(expect.arrayContaining(['agent/Dockerfile', 'coordinator/Dockerfile']));
  });

  for (const file of dockerfiles) {
    it(`passes ${file}`, async () => {
      expect(await lintDockerfile(join(repoRoot, file), false)).toEqual([]);
    });

    it.skipIf(SHELLCHECK === null)(`passes ${file} with ShellCheck on its RUN lines`, async () => {
      expect(await lintDockerfile(join(repoRoot, file), true)).toEqual([]);
    });
  }

  it('reports a bad Dockerfile: untagged base, ADD, apt without -y or cleanup, shell-form CMD', async () => {
    const dir = await mkdtemp(join(tmp, 'bad-dockerfile-'));
    const file = join(dir, 'Dockerfile');
    await writeFile(
      file,
      [
        'FROM node',
        'RUN apt-get update && apt-get install git',
        'ADD . /app',
        'RUN cd $HOME/app && ls *.js',
        'CMD node app.js',
        '',
      ].join('\n'),
    );
    const codes = (await lintDockerfile(file, false)).map((f) => `${f.lineNumber}:${f.code}`);
    expect(codes).toEqual(
      expect.arrayContaining([
        '1:EF0004',
        '2:ER0002',
        '2:ER0009',
        '2:ER0010',
        '3:EA0002',
        '4:ER0003',
        '5:EJ0002',
      ]),
    );
    // The project's configuration turns off only what it says it does.
    expect(codes).not.toContain('2:ER0012');
    if (SHELLCHECK !== null) {
      const withShellcheck = (await lintDockerfile(file, true)).map((f) => `${f.lineNumber}:${f.code}`);
      expect(withShellcheck).toContain('4:SC2086');
    }
  });
});

describe('the Dockerfiles', () => {
  for (const file of ['coordinator/Dockerfile', 'agent/Dockerfile']) {
    it(`${file}: multi-stage, parameterised base, non-root, no ADD, apt lists cleaned, exec-form CMD`, () => {
      const all = stages(file);
      expect(all.length).toBeGreaterThanOrEqual(2);
      for (const s of all) expect(s.from).toMatch(/^FROM \$\{NODE_IMAGE\}/);
      const final = all.at(-1)!;
      const users = final.lines.filter((l) => /^USER\s/i.test(l));
      expect(users.at(-1)).toMatch(/^USER (?!root\b|0\b)\w+$/);
      for (const s of all) {
        for (const l of s.lines) {
          expect(l).not.toMatch(/^ADD\s/i);
          if (/apt-get install/.test(l)) {
            expect(l).toMatch(/--no-install-recommends/);
            expect(l).toMatch(/rm -rf \/var\/lib\/apt\/lists\/\*/);
          }
          expect(l).not.toMatch(/^RUN .*\bsudo\b/);
        }
      }
      expect(Array.isArray(cmdOf(file))).toBe(true);
    });
  }

  it('keeps the agent image to one file: no node_modules in its final stage', () => {
    const final = stages('agent/Dockerfile').at(-1)!;
    expect(final.lines.filter((l) => /^COPY/.test(l))).toEqual([
      'COPY --from=bundle /src/dist/deckhand-agent.js /opt/deckhand/deckhand-agent.js',
    ]);
  });
});

describe.skipIf(SYSTEMD_ANALYZE === null)('systemd units', () => {
  async function verify(unitFile: string, user: boolean): Promise<{ code: number; output: string }> {
    const runtime = join(tmp, 'runtime');
    await mkdir(runtime, { recursive: true });
    await chmod(runtime, 0o700);
    const args = ['verify', '--man=no', ...(user ? ['--user'] : []), unitFile];
    return exec(SYSTEMD_ANALYZE!, args, { env: { ...process.env, XDG_RUNTIME_DIR: runtime } }).then(
      (r) => ({ code: 0, output: r.stdout + r.stderr }),
      (err: { code: number; stdout: string; stderr: string }) => ({
        code: err.code,
        output: err.stdout + err.stderr,
      }),
    );
  }

  it('the installer writes units systemd-analyze verifies without a warning (system and user)', async () => {
    const dir = join(tmp, 'opt', 'deckhand');
    for (const mode of ['system', 'user'] as const) {
      const unit = join(tmp, `deckhand-agent-${mode}.service`);
      await writeFile(unit, unitText({ mode, dir, envFile: join(tmp, 'agent.env') }, process.execPath, mode));
      expect(await verify(unit, mode === 'user')).toEqual({ code: 0, output: '' });
    }
  });

  it('the verification can fail: a unit whose program is missing is refused', async () => {
    const unit = join(tmp, 'deckhand-agent-broken.service');
    await writeFile(
      unit,
      unitText(
        { mode: 'system', dir: join(tmp, 'nowhere'), envFile: join(tmp, 'agent.env') },
        '/nonexistent/node',
        'x',
      ),
    );
    const res = await verify(unit, false);
    expect(res.code).not.toBe(0);
    expect(res.output).toContain('/nonexistent/node');
  });

  it('the sample unit agent/systemd/deckhand-agent.service verifies', async () => {
    const res = await verify(join(repoRoot, 'agent', 'systemd', 'deckhand-agent.service'), false);
    expect(res.code, res.output).toBe(0);
  });

  it("the sample unit runs the file the Agents page's setup steps download, in a folder its user owns", () => {
    const setup = agentSetup('https://deploy.example.com', 'dha_x');
    const header = readFileSync(join(repoRoot, 'agent', 'systemd', 'deckhand-agent.service'), 'utf8');
    const download = `sudo -u ${AGENT_USER} curl -fsSL -o ${AGENT_FILE} https://deploy.example.com/agent/download`;
    expect(setup.install).toContain(download);
    expect(header).toContain(download);
    expect(setup.unit).toContain(`\nExecStart=/usr/bin/env node ${AGENT_FILE} `);
    expect(setup.unit).toContain(`\nUser=${AGENT_USER}\n`);
    // The agent replaces its own file when it updates itself: the folder is its user's home.
    const useradd = `sudo useradd --system --create-home --home-dir ${dirname(AGENT_FILE)} --shell /usr/sbin/nologin ${AGENT_USER}`;
    expect(setup.install!.split('\n')[0]).toBe(useradd);
    expect(header).toContain(useradd);
    expect(setup.install).not.toMatch(/sudo (curl|install|cp) .*deckhand-agent\.js/);
  });
});

describe('start commands, run for real without Docker or systemd', () => {
  it("the agent image's CMD: the one file comes online with DECKHAND_URL and DECKHAND_TOKEN", async () => {
    const [program, file, ...rest] = cmdOf('agent/Dockerfile');
    expect([program, file, ...rest]).toEqual(['node', '/opt/deckhand/deckhand-agent.js']);
    const token = await register('image-agent');
    const work = join(tmp, 'image-work');
    // The image's file system, here: /opt/deckhand is under tmp; no node_modules anywhere near.
    const child = spawn(process.execPath, [join(tmp, file!)], {
      cwd: tmp,
      env: cleanEnv({
        DECKHAND_URL: coordinator!.url,
        DECKHAND_TOKEN: token,
        DECKHAND_WORK_DIR: work,
      }) as NodeJS.ProcessEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const proc = watched(child);
    spawned.push(proc);
    const agent = await waitOnline('image-agent', proc, admin);
    expect(agent.version).toMatch(/^\d+\.\d+\.\d+/);
  });

  it("the sample unit's ExecStart, with the downloaded file where the setup steps put it, comes online", async () => {
    const token = await register('sample-unit-agent');
    const unit = readFileSync(join(repoRoot, 'agent', 'systemd', 'deckhand-agent.service'), 'utf8');
    const execStart = /^ExecStart=(.*)$/m.exec(unit)![1]!.split(' ');
    expect(execStart.slice(0, 3)).toEqual(['/usr/bin/env', 'node', AGENT_FILE]);
    // The host's file system, here: / is tmp (the bundle is at tmp + AGENT_FILE).
    const args = execStart.slice(2).map((a) => (a.startsWith('/') ? join(tmp, a) : a));
    const child = spawn(process.execPath, args, {
      cwd: join(tmp, /^WorkingDirectory=(.*)$/m.exec(unit)![1]!),
      env: cleanEnv({ DECKHAND_URL: coordinator!.url, DECKHAND_TOKEN: token }) as NodeJS.ProcessEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const proc = watched(child);
    spawned.push(proc);
    await waitOnline('sample-unit-agent', proc, admin);
  });

  it("the installer's unit: ExecStart with its EnvironmentFile comes online", async () => {
    const token = await register('unit-agent');
    const dir = join(tmp, 'opt', 'deckhand');
    const envFile = join(tmp, 'unit-agent.env');
    await writeFile(
      envFile,
      `DECKHAND_URL=${coordinator!.url}\nDECKHAND_TOKEN=${token}\nDECKHAND_WORK_DIR=${join(tmp, 'unit-work')}\n`,
      {
        mode: 0o600,
      },
    );
    const unit = unitText({ mode: 'system', dir, envFile }, process.execPath, 'unit-agent');
    const field = (key: string) =>
      /^(\w+)=(.*)$/m.exec(unit.split('\n').filter((l) => l.startsWith(`${key}=`))[0] ?? '')?.[2];
    const [program, ...args] = field('ExecStart')!.split(' ');
    const env = Object.fromEntries(
      readFileSync(field('EnvironmentFile')!, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
    );
    const child = spawn(program!, args, {
      cwd: field('WorkingDirectory')!,
      env: cleanEnv(env) as NodeJS.ProcessEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const proc = watched(child);
    spawned.push(proc);
    await waitOnline('unit-agent', proc, admin);
  });

  it('a coordinator whose agent file is not built yet names the version it will serve', async () => {
    const agentPackage = join(repoRoot, 'agent', 'package.json');
    const { version } = JSON.parse(readFileSync(agentPackage, 'utf8')) as { version: string };
    const missing = new AgentBundle(join(tmp, 'not-built', 'deckhand-agent.js'));
    expect(await servedAgentVersion(missing, agentPackage)).toBe(version);
    expect(existsSync(missing.file)).toBe(false);
    // Once built, the file's own banner is what counts.
    expect(await servedAgentVersion(new AgentBundle(bundleFile), join(tmp, 'no-package.json'))).toBe(version);
    expect(await servedAgentVersion(missing, join(tmp, 'no-package.json'))).toBeNull();
  });

  it("the coordinator image's CMD: it answers /readyz and serves the agent file", async () => {
    const cmd = cmdOf('coordinator/Dockerfile');
    expect(cmd).toEqual(['node', 'coordinator/src/server.ts']);
    let db: TestDatabase | undefined;
    try {
      db = await createTestDatabase();
      const port = await freePort();
      const proc = spawnNode(
        cmd[1]!,
        [],
        cleanEnv({
          NODE_ENV: 'production',
          HOST: '127.0.0.1',
          PORT: String(port),
          DATABASE_URL: db.url,
          DECKHAND_SECRET: 'y'.repeat(40),
          LOG_LEVEL: 'warn',
        }),
      );
      spawned.push(proc);
      await waitForOk(`http://127.0.0.1:${port}/readyz`, proc, 60_000);
      const res = await fetch(`http://127.0.0.1:${port}/agent/download`);
      expect(res.status).toBe(200);
      expect(res.headers.get('x-deckhand-agent-version')).toMatch(/^\d+\.\d+\.\d+/);
      proc.child.kill('SIGTERM');
      expect((await proc.exited).code).toBe(0);
    } finally {
      await db?.drop();
    }
  });
});
