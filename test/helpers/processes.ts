// Child processes for end-to-end tests: the real `npm start` entry point and the command-line
// tools, with their output captured for assertions and failure messages.
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';

export const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export interface Spawned {
  child: ChildProcess;
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Runs a TypeScript entry point of the repo with this test's Node, env replaced (not merged) where given. */
export function spawnNode(script: string, args: string[], env: Record<string, string | undefined>): Spawned {
  const child = spawn(process.execPath, [script, ...args], {
    cwd: repoRoot,
    env: env as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return watched(child);
}

/** A started child as a Spawned: its stdout and stderr collected, its exit awaited. */
export function watched(child: ChildProcess): Spawned {
  let out = '';
  child.stdout?.on('data', (d) => (out += d));
  child.stderr?.on('data', (d) => (out += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, output: () => out, exited };
}

/** Polls `url` until it answers 200 (or the process dies, or time runs out). */
export async function waitForOk(url: string, proc: Spawned, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let exited = false;
  void proc.exited.then(() => (exited = true));
  while (Date.now() < deadline) {
    if (exited) throw new Error(`process exited before ${url} was ready:\n${proc.output()}`);
    try {
      const res = await fetch(url);
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${url} not ready after ${timeoutMs} ms:\n${proc.output()}`);
}

/** The environment without anything that would point the child at another database. */
export function cleanEnv(extra: Record<string, string>): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = { ...process.env };
  for (const key of Object.keys(env)) {
    if (key === 'DATABASE_URL' || key.startsWith('SMTP_') || key.startsWith('DECKHAND_')) delete env[key];
  }
  return { ...env, ...extra };
}

export interface CoordinatorProcess {
  url: string;
  port: number;
  proc: Spawned;
  /** Starts it again on the same port and database (after a kill). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * The real coordinator as its own process (`node coordinator/src/server.ts`), so a test can
 * SIGKILL it. `env` must name the database (DATABASE_URL) and usually DECKHAND_SECRET.
 */
export async function startCoordinatorProcess(env: Record<string, string>): Promise<CoordinatorProcess> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const fullEnv = cleanEnv({ HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'info', ...env });
  const handle: CoordinatorProcess = {
    url,
    port,
    proc: spawnNode('coordinator/src/server.ts', [], fullEnv),
    async restart() {
      handle.proc = spawnNode('coordinator/src/server.ts', [], fullEnv);
      await waitForOk(`${url}/readyz`, handle.proc, 60_000);
    },
    async stop() {
      const { child } = handle.proc;
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await handle.proc.exited;
        clearTimeout(timer);
      }
    },
  };
  await waitForOk(`${url}/readyz`, handle.proc, 60_000);
  return handle;
}
