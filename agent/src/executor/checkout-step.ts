// Step 0: the project's folder at exactly the deployment's commit. First time a clone (no
// checkout), then always fetch every branch and check the commit out detached, forcibly (the
// folder belongs to the agent). Each git command line and all git output go into the step's
// output, so the log shows what happened. A deploy key, when given, is written for ssh to use.
// With releases the repository lives in `<project>/repo` and the commit is materialised as a
// worktree in `<project>/releases/<deployment id>` (releases.ts says why a worktree).
import { existsSync } from 'node:fs';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { JobAssign, StepResult } from '@deckhand/protocol';
import type { OutputFlow } from '../output/budget.ts';
import { type ProcessOptions, type RunningProcess, runProcess } from './process.ts';
import { prepareReleaseFolder, recordRelease, releasePaths } from './releases.ts';
import { gitEnv } from './step-env.ts';

/** The coordinator's rule for project names, which are folder names here: never a path. */
const PROJECT_FOLDER = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

export interface CheckoutOptions {
  workDir: string;
  job: JobAssign;
  baseEnv: NodeJS.ProcessEnv;
  onOutput: (bytes: Buffer) => void;
  graceMs?: number;
  groups?: Set<number>;
  flow?: OutputFlow;
  /** With releases: the release (deployment id) to build, in `<project>/releases/<release>`. */
  release?: string;
}

export function projectDir(workDir: string, projectName: string): string | undefined {
  return PROJECT_FOLDER.test(projectName) ? path.join(workDir, projectName) : undefined;
}

/** Single-quotes a word for the shell that runs GIT_SSH_COMMAND. */
export function shellQuote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/** A URL as it may appear in the log: without a password or token in it. */
function redactUrl(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/@]*@/i, '$1***@');
}

async function sshCommand(workDir: string, job: JobAssign): Promise<string | undefined> {
  const { sshKey, knownHosts } = job.repository;
  if (sshKey === null) return undefined;
  const dir = path.join(workDir, '.deckhand', 'keys');
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const keyFile = path.join(dir, job.project.id);
  // OpenSSH refuses a key without its final newline, and a key others can read.
  await writeFile(keyFile, sshKey.endsWith('\n') ? sshKey : `${sshKey}\n`, { mode: 0o600 });
  await chmod(keyFile, 0o600);
  let cmd = `ssh -i ${shellQuote(keyFile)} -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes -o BatchMode=yes`;
  if (knownHosts !== null) {
    const hostsFile = `${keyFile}.known_hosts`;
    await writeFile(hostsFile, knownHosts.endsWith('\n') ? knownHosts : `${knownHosts}\n`, { mode: 0o600 });
    // Only the project's known hosts count, not the machine-wide file too.
    cmd += ` -o UserKnownHostsFile=${shellQuote(hostsFile)} -o GlobalKnownHostsFile=/dev/null`;
  }
  return cmd;
}

export function runCheckoutStep(opts: CheckoutOptions): RunningProcess {
  let current: RunningProcess | undefined;
  let cancelled: string | undefined;

  const git = async (
    args: string[],
    cwd: string,
    env: NodeJS.ProcessEnv,
    show: { echo?: string; output?: (b: Buffer) => void } = {},
  ): Promise<StepResult> => {
    if (cancelled !== undefined) return { exitCode: null, signal: null, error: cancelled };
    if (show.echo !== undefined) opts.onOutput(Buffer.from(`$ git ${show.echo}\n`));
    const procOpts: ProcessOptions = { cwd, env, onOutput: show.output ?? opts.onOutput };
    if (opts.graceMs !== undefined) procOpts.graceMs = opts.graceMs;
    if (opts.groups !== undefined) procOpts.groups = opts.groups;
    if (opts.flow !== undefined) procOpts.flow = opts.flow;
    current = runProcess('git', args, procOpts);
    return current.result;
  };

  const run = async (): Promise<StepResult> => {
    const { job, workDir } = opts;
    const project = projectDir(workDir, job.project.name);
    if (project === undefined) {
      return {
        exitCode: null,
        signal: null,
        error: `unusable project name for a folder: ${job.project.name}`,
      };
    }
    const { url, commit } = job.repository;
    const paths = releasePaths(project);
    const dir = opts.release === undefined ? project : paths.repo;
    await mkdir(opts.release === undefined ? workDir : project, { recursive: true });
    const env = gitEnv(opts.baseEnv, await sshCommand(workDir, job));
    const ok = (r: StepResult) => r.exitCode === 0 && r.signal === null && !r.error;

    if (!existsSync(path.join(dir, '.git'))) {
      const r = await git(['clone', '--no-checkout', '--', url, dir], workDir, env, {
        echo: `clone --no-checkout ${redactUrl(url)} ${dir}`,
      });
      if (!ok(r)) return r;
    } else {
      const chunks: Buffer[] = [];
      const origin = await git(['remote', 'get-url', 'origin'], dir, env, { output: (b) => chunks.push(b) });
      const existing = Buffer.concat(chunks).toString('utf8').trim();
      if (!ok(origin) || existing !== url) {
        const verb = ok(origin) ? 'set-url' : 'add';
        const r = await git(['remote', verb, 'origin', url], dir, env, {
          echo: `remote ${verb} origin ${redactUrl(url)}`,
        });
        if (!ok(r)) return r;
      }
    }
    const fetched = await git(
      ['fetch', '--force', '--prune', 'origin', '+refs/heads/*:refs/remotes/origin/*'],
      dir,
      env,
      { echo: `fetch --force --prune origin '+refs/heads/*:refs/remotes/origin/*'` },
    );
    if (!ok(fetched)) return fetched;
    if (opts.release === undefined) {
      return git(['checkout', '--force', '--detach', commit], dir, env, {
        echo: `checkout --force --detach ${commit}`,
      });
    }
    const target = path.join(paths.releases, opts.release);
    const prepared = await prepareReleaseFolder(project, opts.release, opts.onOutput);
    if (prepared.error !== undefined) return { exitCode: null, signal: null, error: prepared.error };
    if (prepared.removed) {
      const r = await git(['worktree', 'prune'], dir, env, { echo: 'worktree prune' });
      if (!ok(r)) return r;
    }
    await recordRelease(project, opts.release);
    return git(['worktree', 'add', '--detach', '--force', target, commit], dir, env, {
      echo: `-C ${dir} worktree add --detach --force ${target} ${commit}`,
    });
  };

  const result = run().catch((err: unknown): StepResult => ({
    exitCode: null,
    signal: null,
    error: `checkout could not run: ${(err as Error).message}`,
  }));
  return {
    result,
    cancel: (reason) => {
      if (cancelled !== undefined) return;
      cancelled = reason;
      current?.cancel(reason);
    },
  };
}
