// Drives an agent-swarm.ts process (many simulated agents) from the benchmark: one command at a
// time, each answered by one JSON line. The process runs with its open-file limit raised to the
// hard limit (one socket per agent).
import { type ChildProcess, spawn, type StdioOptions } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { type Cleanup, withTimeout } from './harness.ts';

export interface Swarm {
  pid: number;
  command<T extends { ev: string }>(cmd: Record<string, unknown>, timeoutMs?: number): Promise<T>;
}

/**
 * Spawns `node …nodeArgs` with the soft open-file limit raised to the hard one (a shell's
 * `ulimit -n`; Node cannot raise its own limit).
 */
export function spawnWithFileLimit(
  nodeArgs: string[],
  opts: { env?: NodeJS.ProcessEnv; cwd?: string; stdio: StdioOptions },
): ChildProcess {
  return spawn(
    'bash',
    ['-c', 'ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$@"', 'bash', process.execPath, ...nodeArgs],
    { env: opts.env ?? process.env, cwd: opts.cwd, stdio: opts.stdio },
  );
}

export async function startSwarm(cleanup: Cleanup, label: string): Promise<Swarm> {
  const script = fileURLToPath(new URL('./agent-swarm.ts', import.meta.url));
  const child = spawnWithFileLimit([script], { stdio: ['pipe', 'pipe', 'inherit'] });
  let exited = false;
  const gone = new Promise<void>((resolve) =>
    child.once('exit', () => {
      exited = true;
      resolve();
    }),
  );
  cleanup.defer(`agent swarm (${label})`, async () => {
    if (exited) return;
    child.stdin!.end(`${JSON.stringify({ cmd: 'close' })}\n`);
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await gone;
    clearTimeout(timer);
  });
  const lines = createInterface({ input: child.stdout! });
  const answers: string[] = [];
  let waiting: ((line: string) => void) | undefined;
  lines.on('line', (line) => {
    if (waiting) {
      const w = waiting;
      waiting = undefined;
      w(line);
    } else answers.push(line);
  });
  const next = () =>
    new Promise<string>((resolve, reject) => {
      const queued = answers.shift();
      if (queued !== undefined) return resolve(queued);
      waiting = resolve;
      void gone.then(() => reject(new Error(`the agent swarm (${label}) exited`)));
    });
  return {
    pid: child.pid!,
    async command<T extends { ev: string }>(cmd: Record<string, unknown>, timeoutMs = 300_000) {
      const answer = next();
      child.stdin!.write(`${JSON.stringify(cmd)}\n`);
      return JSON.parse(await withTimeout(answer, timeoutMs, `agent swarm: ${String(cmd.cmd)}`)) as T;
    },
  };
}
