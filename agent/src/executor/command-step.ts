// A command step: the project's command line run by bash in the project's folder.
import { existsSync } from 'node:fs';
import { type ProcessOptions, type RunningProcess, runProcess } from './process.ts';

export function runCommandStep(cmd: string, opts: ProcessOptions): RunningProcess {
  if (!existsSync(opts.cwd)) {
    // spawn would report a missing cwd as "spawn bash ENOENT", which points at the wrong thing.
    return {
      result: Promise.resolve({
        exitCode: null,
        signal: null,
        error: `the project folder ${opts.cwd} does not exist`,
      }),
      cancel: () => {},
    };
  }
  return runProcess('bash', ['-c', cmd], opts);
}
