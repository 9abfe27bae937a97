// docker-compose.yml's agent, run for real without Docker: the one-shot agent-token service's
// command (`npm run agent:create`) registers an agent through the coordinator's own service and
// leaves its token in the shared volume; the agent image's command starts with that token file and
// comes online. Run again, it leaves a working token alone and replaces a revoked agent's; bad
// arguments and an unwritable folder are refused before the database is opened.
import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentBundle } from '../../coordinator/src/modules/agent-bundle/agent-bundle.ts';
import { type Client, signUp } from '../helpers/coordinator.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';
import { cmdOf, composeList, composeService, waitOnline } from '../helpers/packaging.ts';
import {
  cleanEnv,
  type CoordinatorProcess,
  repoRoot,
  type Spawned,
  startCoordinatorProcess,
  watched,
} from '../helpers/processes.ts';

const exec = promisify(execFile);

let tmp: string;
const spawned: Spawned[] = [];

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'deckhand-compose-agent-'));
  // The agent image's file, where its CMD names it (under tmp as /).
  const [, file] = cmdOf('agent/Dockerfile');
  await mkdir(dirname(join(tmp, file!)), { recursive: true });
  await new AgentBundle(join(tmp, file!)).get();
}, 120_000);

afterAll(async () => {
  for (const p of spawned) {
    if (p.child.exitCode === null && p.child.signalCode === null) {
      p.child.kill('SIGTERM');
      await Promise.race([p.exited, new Promise((r) => setTimeout(r, 5_000))]);
      p.child.kill('SIGKILL');
    }
  }
  await rm(tmp, { recursive: true, force: true });
}, 30_000);

type Run = { code: number; stdout: string; stderr: string };

/** `node coordinator/src/cli/agent-create.ts …` from the repository, as the image's /app runs it. */
function agentCreate(args: string[], env: Record<string, string>): Promise<Run> {
  return exec(process.execPath, ['coordinator/src/cli/agent-create.ts', ...args], {
    cwd: repoRoot,
    env: cleanEnv(env) as NodeJS.ProcessEnv,
  }).then(
    (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (err: Run) => err,
  );
}

/** A database nobody listens on: a command that opened it would fail another way. */
const NO_DATABASE = { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' };

describe("docker-compose.yml's agent-token command and agent, run for real without Docker", () => {
  let db: TestDatabase | undefined;
  let server: CoordinatorProcess | undefined;
  let owner: Client;
  let volume: string;
  const secret = 'z'.repeat(40);
  const database = () => ({ DATABASE_URL: db!.url, DECKHAND_SECRET: secret, LOG_LEVEL: 'warn' });

  beforeAll(async () => {
    db = await createTestDatabase();
    server = await startCoordinatorProcess({
      DATABASE_URL: db.url,
      DECKHAND_SECRET: secret,
      LOG_LEVEL: 'warn',
    });
    ({ client: owner } = await signUp(server.url));
    volume = await mkdtemp(join(tmp, 'agent-token-volume-'));
  }, 90_000);

  afterAll(async () => {
    await server?.stop();
    await db?.drop();
  }, 30_000);

  /**
   * The service's command as the file has it, in the image's working directory (/app: the
   * repository here), with its volume (mounted at the token file's folder) under tmp.
   */
  async function runAgentToken(): Promise<{ code: number; stdout: string; stderr: string; file: string }> {
    const service = composeService('agent-token');
    const [program, ...args] = composeList(service, 'command');
    expect(program).toBe('node');
    expect(args.slice(0, 1)).toEqual(['coordinator/src/cli/agent-create.ts']);
    const at = args.indexOf('--token-file');
    const target = dirname(args[at + 1]!);
    expect(composeList(service, 'volumes')).toContain(`agent-token:${target}`);
    const file = join(volume, args[at + 1]!.slice(target.length + 1));
    args[at + 1] = file;
    const res = await agentCreate(args.slice(1), database());
    return { ...res, file };
  }

  /** The agent image's CMD with the service's environment, its token volume read from tmp. */
  function startComposeAgent(): Spawned {
    const service = composeService('agent');
    const mount = composeList(service, 'volumes').find((v) => v.startsWith('agent-token:'))!;
    expect(mount).toMatch(/:ro$/);
    const target = mount.split(':')[1]!;
    const tokenFile = /^ {6}DECKHAND_TOKEN_FILE: \$\{DECKHAND_AGENT_TOKEN_FILE-(.*)\}$/m.exec(
      service.join('\n'),
    )![1]!;
    expect(tokenFile.startsWith(`${target}/`)).toBe(true);
    const [, file] = cmdOf('agent/Dockerfile');
    const child = spawn(process.execPath, [join(tmp, file!)], {
      cwd: tmp,
      env: cleanEnv({
        DECKHAND_URL: server!.url,
        DECKHAND_TOKEN: '', // `${DECKHAND_AGENT_TOKEN:-}`, unset
        DECKHAND_TOKEN_FILE: join(volume, tokenFile.slice(target.length + 1)),
        DECKHAND_WORK_DIR: join(tmp, 'compose-agent-work'),
      }) as NodeJS.ProcessEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const proc = watched(child);
    spawned.push(proc);
    return proc;
  }

  async function stopAgent(proc: Spawned): Promise<void> {
    if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill('SIGTERM');
    await proc.exited;
  }

  it('registers the agent once, writes its token with mode 600, and the agent comes online with it', async () => {
    const first = await runAgentToken();
    expect(first, JSON.stringify(first)).toMatchObject({ code: 0, stderr: '' });
    const token = await readFile(first.file, 'utf8');
    expect(token).toMatch(/^dha_\S+\n$/);
    expect(first.stdout).toContain(first.file);
    expect(first.stdout).not.toContain(token.trim());
    const before = await stat(first.file);
    expect(before.mode & 0o777).toBe(0o600);

    const second = await runAgentToken();
    expect(second, JSON.stringify(second)).toMatchObject({ code: 0, stderr: '' });
    expect(second.stdout).toMatch(/still works: nothing to do/);
    const after = await stat(first.file);
    expect(await readFile(first.file, 'utf8')).toBe(token);
    expect([after.ino, after.mtimeMs, after.mode & 0o777]).toEqual([before.ino, before.mtimeMs, 0o600]);
    const listed = (await owner.get('/agents')).json.agents as Array<{ name: string }>;
    expect(listed.map((a) => a.name)).toEqual(['compose']);

    const proc = startComposeAgent();
    await waitOnline('compose', proc, owner);
    await stopAgent(proc);
  });

  it('replaces the token file of a revoked agent on the next run, and the agent comes online again', async () => {
    const agents = (await owner.get('/agents')).json.agents as Array<{ id: string; name: string }>;
    const old = agents.find((a) => a.name === 'compose')!;
    const file = join(volume, 'agent-token');
    const oldToken = await readFile(file, 'utf8');
    expect((await owner.request('DELETE', `/agents/${old.id}`)).status).toBe(200);

    const res = await runAgentToken();
    expect(res, JSON.stringify(res)).toMatchObject({ code: 0, stderr: '' });
    expect(res.stdout).toMatch(/no longer authenticates an agent/);
    const newToken = await readFile(file, 'utf8');
    expect(newToken).toMatch(/^dha_\S+\n$/);
    expect(newToken).not.toBe(oldToken);
    expect(res.stdout).not.toContain(newToken.trim());
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    // Only the token file is left in the volume: the temporary one was renamed over it.
    expect((await readdir(volume)).sort()).toEqual(['agent-token']);

    const proc = startComposeAgent();
    const agent = await waitOnline('compose', proc, owner);
    expect(agent.id).not.toBe(old.id);
    await stopAgent(proc);
    // Both registrations are on record as the command's, not a user's.
    const audit = await owner.get('/audit');
    expect(audit.status, audit.text).toBe(200);
    const created = (
      audit.json.audit_events as Array<{ action: string; actor: { type: string; name: string } }>
    ).filter((e) => e.action === 'agent.create');
    expect(created.map((e) => e.actor)).toEqual([
      { type: 'system', id: null, name: 'agent-create command' },
      { type: 'system', id: null, name: 'agent-create command' },
    ]);
  });

  it('refuses bad arguments with exit code 64 and the usage, before touching the database', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['--token-file', join(volume, 'x')], /--name <name>/],
      [['--name', 'compose'], /--token-file <path>/],
      [['--name', 'bad name!', '--token-file', join(volume, 'x')], /Not an agent name: bad name!/],
      [['--name', 'ok', '--labels', 'web,b@d', '--token-file', join(volume, 'x')], /Not a label: b@d/],
      [['--name', 'ok', '--token-file', join(volume, 'x'), '--tokn'], /Unknown option '--tokn'/],
    ];
    for (const [args, message] of cases) {
      const res = await agentCreate(args, NO_DATABASE);
      expect(res).toMatchObject({ code: 64, stderr: expect.stringMatching(message) });
      expect(res.stderr).toContain('Usage: npm run agent:create --');
    }
  });

  it('says when an agent of that name exists without its token in the file, and registers nothing', async () => {
    const res = await agentCreate(['--name', 'compose', '--token-file', join(volume, 'other')], database());
    expect(res).toMatchObject({
      code: 1,
      stderr: expect.stringContaining('An agent named compose already exists'),
    });
    expect((await readdir(volume)).sort()).toEqual(['agent-token']);
  });

  it('says when the token cannot be written, before opening the database', async () => {
    const file = join(volume, 'missing-folder', 'agent-token');
    const res = await agentCreate(['--name', 'elsewhere', '--token-file', file], NO_DATABASE);
    expect(res).toMatchObject({
      code: 1,
      stderr: expect.stringContaining(`Cannot write the token next to ${file}: ENOENT`),
    });
  });
});
