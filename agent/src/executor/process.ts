// One child process of a step, in a process group of its own: stdout and stderr merged into one
// byte stream in arrival order, stopping by group (process-group.ts), backpressure (its pipes are
// paused while the agent's unacknowledged output is past its bound, output/budget.ts), and a
// result that never rejects (a process that cannot start is a result with `error`).
import { spawn } from 'node:child_process';
import type { StepResult } from '@deckhand/protocol';
import type { OutputFlow } from '../output/budget.ts';
import { KILL_GRACE_MS, stopGroup } from './process-group.ts';

export interface ProcessOptions {
  cwd: string;
  env: NodeJS.ProcessEnv;
  onOutput: (bytes: Buffer) => void;
  /** SIGTERM → SIGKILL grace on stop. */
  graceMs?: number;
  /** Live process groups, so the agent can kill them all if it has to exit at once. */
  groups?: Set<number>;
  /** When to stop reading the pipes (and when to start again). */
  flow?: OutputFlow;
}

export interface RunningProcess {
  readonly result: Promise<StepResult>;
  /**
   * Stops the whole group (SIGTERM, grace, SIGKILL); the result then carries `error` as given
   * (e.g. "cancelled: <reason>", "timed out after 5 s").
   */
  cancel(error: string): void;
}

/**
 * After the process exits, how long its output pipes may stay open. A background grandchild
 * (`server &`) inherits them and may never close them; the step ends regardless, and such a
 * process should redirect its own output (or be started by systemd). The wait does not run down
 * while the pipes are paused for backpressure: what is still in them is the step's output.
 */
const DRAIN_AFTER_EXIT_MS = 1_000;

export function runProcess(file: string, args: readonly string[], opts: ProcessOptions): RunningProcess {
  const graceMs = opts.graceMs ?? KILL_GRACE_MS;
  let cancelled: string | undefined;
  let stopping: Promise<unknown> | undefined;
  let cancel: (error: string) => void = () => {};

  const result = new Promise<StepResult>((resolve) => {
    let child;
    try {
      child = spawn(file, args, {
        cwd: opts.cwd,
        env: opts.env,
        // Its own process group (pgid = pid), so a stop reaches everything it starts.
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (err) {
      resolve({ exitCode: null, signal: null, error: `could not start ${file}: ${(err as Error).message}` });
      return;
    }
    const pid = child.pid;
    if (pid !== undefined) opts.groups?.add(pid);
    let exit: { exitCode: number | null; signal: string | null } | undefined;
    let settled = false;
    let paused = false;
    let drainTimer: NodeJS.Timeout | undefined;
    const finish = async (value: StepResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(drainTimer);
      child.stdout.removeAllListeners('data');
      child.stderr.removeAllListeners('data');
      child.stdout.destroy();
      child.stderr.destroy();
      if (stopping) await stopping;
      if (pid !== undefined) opts.groups?.delete(pid);
      resolve(cancelled === undefined ? value : { ...value, error: cancelled });
    };
    // After the exit: end the step once the pipes had their chance (not while paused, unless stopped).
    const armDrain = () => {
      if (!exit || settled || drainTimer) return;
      if (paused && cancelled === undefined) return;
      drainTimer = setTimeout(() => void finish(exit!), DRAIN_AFTER_EXIT_MS);
      drainTimer.unref();
    };
    const resume = () => {
      paused = false;
      if (settled) return;
      child.stdout.resume();
      child.stderr.resume();
      armDrain();
    };
    const onData = (b: Buffer) => {
      opts.onOutput(b);
      if (opts.flow?.over && !paused) {
        paused = true;
        child.stdout.pause();
        child.stderr.pause();
        opts.flow.onceBelow(resume);
      }
    };

    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('error', (err) => {
      // Only a failed start ends the step here; a later error (a failed kill) is not the step's end.
      if (pid === undefined) {
        void finish({ exitCode: null, signal: null, error: `could not start ${file}: ${err.message}` });
      }
    });
    child.on('exit', (exitCode, signal) => {
      exit = { exitCode, signal };
      armDrain();
    });
    // Both pipes drained after the exit: all output is in.
    child.on('close', () => {
      if (exit) void finish(exit);
    });

    cancel = (error) => {
      if (cancelled !== undefined || settled || pid === undefined) return;
      cancelled = error;
      stopping = stopGroup(pid, graceMs);
      armDrain();
    };
  });

  return { result, cancel: (error) => cancel(error) };
}
