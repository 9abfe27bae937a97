// The job's step plan, shared by every runner (the agent over child processes, the SSH executor
// over ssh2 channels): step 0 checks out the deployment's commit, steps 1..n run the project's
// commands in order, and the first failure ends the job with the remaining steps skipped.
// With releases, the build happens in its own `releases/<deployment id>` folder and two steps
// follow the commands: `activate` switches `current` to it atomically (and prunes old releases),
// and `health-check` runs the project's check in `current`, switching back when it fails. A
// rollback job is just those two steps, for a release kept from before.
// Pure logic: running a step is the runner's business, passed in as `execute`.

export type StepKind = 'checkout' | 'command' | 'activate' | 'health-check';

export interface PlannedStep {
  index: number;
  kind: StepKind;
  /** What the log entry shows as its command (for `command` and `health-check`: what runs). */
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

export interface PlanInput {
  commit: string;
  commands: readonly string[];
  kind?: 'deploy' | 'rollback';
  /** The release a deploy builds (its deployment id), or the one a rollback returns to. */
  release?: string | null;
  releases?: { keep: number; healthCheck: string | null } | null;
}

export function checkoutCommand(commit: string): string {
  return `git checkout --force --detach ${commit}`;
}

export function activateCommand(release: string): string {
  return `ln -sfn releases/${release} current`;
}

/** The folder, relative to the project folder, a job's checkout and commands run in. */
export function buildFolder(input: Pick<PlanInput, 'release' | 'releases'>): string {
  return input.releases && input.release ? `releases/${input.release}` : '.';
}

export function planSteps(input: PlanInput): PlannedStep[] {
  const steps: Array<Omit<PlannedStep, 'index'>> = [];
  const releases = input.releases ?? null;
  if (input.kind === 'rollback') {
    if (!releases || !input.release)
      throw new Error('a rollback needs releases and the release to return to');
  } else {
    steps.push({ kind: 'checkout', cmd: checkoutCommand(input.commit) });
    for (const cmd of input.commands) steps.push({ kind: 'command', cmd });
  }
  if (releases && input.release) {
    steps.push({ kind: 'activate', cmd: activateCommand(input.release) });
    if (releases.healthCheck) steps.push({ kind: 'health-check', cmd: releases.healthCheck });
  }
  return steps.map((s, index) => ({ ...s, index }));
}

export function stepSucceeded(result: StepResult): boolean {
  return result.exitCode === 0 && result.signal === null && !result.error;
}

export function describeFailure(step: PlannedStep, result: StepResult): string {
  const what =
    step.kind === 'checkout'
      ? 'the checkout'
      : step.kind === 'activate'
        ? 'switching the release'
        : step.kind === 'health-check'
          ? `the health check (${step.cmd})`
          : `command ${step.index} (${step.cmd})`;
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

/** Release folders to delete after activating `current`: all but the newest `keep` (by the order given, oldest first). */
export function releasesToPrune(releasesOldestFirst: readonly string[], keep: number): string[] {
  return releasesOldestFirst.slice(0, Math.max(0, releasesOldestFirst.length - keep));
}

/**
 * Names of environment variables whose values are masked in output besides the project's
 * secrets: anything named like a token, password, secret or key.
 */
export const MASKED_NAME = /(^|_)(TOKEN|PASSWORD|PASSWD|SECRET|KEY)$/i;

/** The values to mask for a job's environment: secret values and those of secret-looking names (4+ characters). */
export function maskedValues(env: Record<string, string>, secretNames: readonly string[]): string[] {
  const values = new Set<string>();
  for (const [name, value] of Object.entries(env)) {
    if ((secretNames.includes(name) || MASKED_NAME.test(name)) && value.length >= 4) values.add(value);
  }
  // Longest first, so a secret that contains another is masked whole.
  return [...values].sort((a, b) => b.length - a.length);
}
