// The job's step plan, shared by every runner (the agent over child processes, the SSH executor
// over ssh2 channels): step 0 checks out the deployment's commit, steps 1..n run the project's
// commands in order, and the first failure ends the job with the remaining steps skipped.
// Pure logic: running a step is the runner's business, passed in as `execute`.

export interface PlannedStep {
  index: number;
  kind: 'checkout' | 'command';
  /** What the log entry shows as its command. */
  cmd: string;
}

export interface StepResult {
  exitCode: number | null;
  signal: string | null;
  /** Set when the step could not run at all, or was stopped (cancel, timeout). */
  error?: string;
}

export type JobOutcome =
  | { status: 'success' }
  | { status: 'failed'; failedStep: PlannedStep; reason: string; skipped: PlannedStep[] };

export function checkoutCommand(commit: string): string {
  return `git checkout --force --detach ${commit}`;
}

export function planSteps(job: { commit: string; commands: readonly string[] }): PlannedStep[] {
  return [
    { index: 0, kind: 'checkout', cmd: checkoutCommand(job.commit) },
    ...job.commands.map((cmd, i) => ({ index: i + 1, kind: 'command' as const, cmd })),
  ];
}

export function stepSucceeded(result: StepResult): boolean {
  return result.exitCode === 0 && result.signal === null && !result.error;
}

export function describeFailure(step: PlannedStep, result: StepResult): string {
  const what = step.kind === 'checkout' ? 'the checkout' : `command ${step.index} (${step.cmd})`;
  if (result.error) return `${what} failed: ${result.error}`;
  if (result.signal) return `${what} was killed by ${result.signal}`;
  return `${what} exited with code ${result.exitCode}`;
}

/** The steps after `failedIndex`, which are skipped. */
export function stepsAfter(plan: readonly PlannedStep[], failedIndex: number): PlannedStep[] {
  return plan.filter((s) => s.index > failedIndex);
}

/**
 * Runs the plan in order, from `from` (a resumed job skips what already ran), stopping at the
 * first failure. `execute` runs one step (a cancelled or timed-out step reports it in its result).
 */
export async function runPlan(
  plan: readonly PlannedStep[],
  execute: (step: PlannedStep) => Promise<StepResult>,
  opts: { from?: number } = {},
): Promise<JobOutcome> {
  for (const step of plan) {
    if (step.index < (opts.from ?? 0)) continue;
    const result = await execute(step);
    if (!stepSucceeded(result)) {
      return {
        status: 'failed',
        failedStep: step,
        reason: describeFailure(step, result),
        skipped: stepsAfter(plan, step.index),
      };
    }
  }
  return { status: 'success' };
}
