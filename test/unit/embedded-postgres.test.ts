// The embedded PostgreSQL: data survives a stop/start, a server left behind by a SIGKILLed run is
// cleaned up on the next start, and a live owner makes a second start fail with a clear error.
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../../coordinator/src/db/embedded-postgres.ts';
import { connectPg } from '../helpers/database.ts';

const modulePath = fileURLToPath(new URL('../../coordinator/src/db/embedded-postgres.ts', import.meta.url));

const tempDirs: string[] = [];
const started = new Set<EmbeddedPostgres>();
const children: ChildProcess[] = [];

interface LogEntry {
  level: string;
  obj: object;
  msg?: string;
}
function collectingLog() {
  const entries: LogEntry[] = [];
  return {
    entries,
    log: {
      info: (obj: object, msg?: string) => entries.push({ level: 'info', obj, msg }),
      warn: (obj: object, msg?: string) => entries.push({ level: 'warn', obj, msg }),
      debug: () => {},
    },
  };
}

async function start(dataDir: string, port: number, log = collectingLog().log): Promise<EmbeddedPostgres> {
  const server = await startEmbeddedPostgres({ dataDir, port, log });
  started.add(server);
  return server;
}

async function stop(server: EmbeddedPostgres): Promise<void> {
  started.delete(server);
  await server.stop();
}

async function tempDataDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'deckhand-embedded-pg-'));
  tempDirs.push(dir);
  return dir;
}

function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

async function freePort(): Promise<number> {
  for (;;) {
    const port = 54400 + Math.floor(Math.random() * 600);
    if (await portIsFree(port)) return port;
  }
}

function postmasterPid(dataDir: string): number | undefined {
  try {
    const pid = Number.parseInt(readFileSync(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8'), 10);
    return Number.isInteger(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return true;
  }
}

async function query(url: string, sql: string, params?: unknown[]): Promise<Record<string, unknown>[]> {
  const client = await connectPg(url);
  try {
    return (await client.query(sql, params)).rows;
  } finally {
    await client.end();
  }
}

/** A separate Node process that starts the embedded server on dataDir and prints "ready <url>". */
async function startInChild(dataDir: string, port: number): Promise<{ child: ChildProcess; url: string }> {
  const script = path.join(dataDir, '..', `${path.basename(dataDir)}-child.mjs`);
  await writeFile(
    script,
    `import { startEmbeddedPostgres } from ${JSON.stringify(pathToFileURL(modulePath).href)};
const noop = () => {};
const server = await startEmbeddedPostgres({
  dataDir: ${JSON.stringify(dataDir)},
  port: ${port},
  log: { info: noop, warn: noop, debug: noop },
});
console.log('ready ' + server.url);
setInterval(noop, 60_000);
`,
  );
  const child = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`child did not get ready: ${out}${err}`)), 30_000);
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /^ready (\S+)$/m.exec(out);
      if (match?.[1]) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`child exited early (${code ?? signal}): ${out}${err}`));
    });
  });
  return { child, url };
}

afterAll(async () => {
  for (const server of started) await server.stop().catch(() => undefined);
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  // A server orphaned by a killed child that a failing test did not clean up.
  for (const dir of tempDirs) {
    const pid = postmasterPid(dir);
    if (pid !== undefined && isAlive(pid)) process.kill(pid, 'SIGKILL');
  }
  for (const dir of tempDirs) {
    await rm(dir, { recursive: true, force: true });
    await rm(`${dir}-child.mjs`, { force: true });
  }
}, 60_000);

describe('startEmbeddedPostgres', () => {
  it('keeps data across a stop and a start', async () => {
    const dataDir = await tempDataDir();
    const port = await freePort();

    const first = await start(dataDir, port);
    expect(first.url).toMatch(new RegExp(`^postgres://postgres:[^@]+@127\\.0\\.0\\.1:${port}/deckhand$`));
    expect(statSync(path.join(dataDir, 'postgres-password')).mode & 0o777).toBe(0o600);
    expect(readFileSync(path.join(dataDir, 'embedded-postgres.owner'), 'utf8').trim()).toBe(
      String(process.pid),
    );
    await query(first.url, 'CREATE TABLE notes (body text NOT NULL)');
    await query(first.url, 'INSERT INTO notes (body) VALUES ($1)', ['survives restarts']);
    await stop(first);
    await expect(stat(path.join(dataDir, 'embedded-postgres.owner'))).rejects.toThrow(/ENOENT/);

    const second = await start(dataDir, port);
    expect(second.url).toBe(first.url); // same stored password
    expect(await query(second.url, 'SELECT body FROM notes')).toEqual([{ body: 'survives restarts' }]);
    await stop(second);
  });

  it('refuses a data dir whose owner is alive, and cleans up after an owner killed with SIGKILL', async () => {
    const dataDir = await tempDataDir();
    const port = await freePort();

    const { child, url } = await startInChild(dataDir, port);
    await query(url, 'CREATE TABLE notes (body text NOT NULL)');
    await query(url, 'INSERT INTO notes (body) VALUES ($1)', ['written before the kill']);

    // The child is alive: a second start must not touch its server.
    await expect(start(dataDir, port)).rejects.toThrow(
      `another Deckhand process (pid ${child.pid}) is using ${dataDir}; stop it first or set DATABASE_URL`,
    );
    expect(await query(url, 'SELECT count(*)::int AS n FROM notes')).toEqual([{ n: 1 }]);

    // SIGKILL: the child cannot stop its postgres, which keeps running, reparented.
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    const stalePid = postmasterPid(dataDir);
    expect(stalePid).toBeDefined();
    expect(isAlive(stalePid!)).toBe(true);

    const { entries, log } = collectingLog();
    const server = await start(dataDir, port, log);
    expect(isAlive(stalePid!)).toBe(false);
    expect(entries).toContainEqual(
      expect.objectContaining({ level: 'warn', msg: expect.stringMatching(/stale embedded PostgreSQL/) }),
    );
    expect(await query(server.url, 'SELECT body FROM notes')).toEqual([{ body: 'written before the kill' }]);
    await stop(server);
  });
});
