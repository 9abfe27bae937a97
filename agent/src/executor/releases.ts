// Releases: with `assign.releases` a project folder holds
//   repo/                     the git repository (clone, fetch)
//   releases/<deployment id>/ one folder per build, a `git worktree` of the commit
//   current -> releases/<id>  a relative symlink: what is live
//   .deckhand-releases        the release ids in the order they were created (for pruning)
// A worktree rather than `git archive | tar -x`: the build sees a real checkout (`git describe`,
// `git rev-parse HEAD` work, as they did in the single-folder layout), submodule metadata and
// attributes behave as in any clone, and git writes only the files of the commit; the price is a
// `git worktree prune` after deleting a release, which pruning does.
// `current` is switched atomically: a new symlink `current.tmp-<random>` renamed over `current`,
// so a reader sees the old release or the new one, never nothing.
import { randomBytes } from 'node:crypto';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import {
  appendFile,
  lstat,
  mkdir,
  readdir,
  readFile,
  readlink,
  rename,
  rm,
  stat,
  symlink,
  writeFile,
} from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { releasesToPrune, type StepResult } from '@deckhand/protocol';
import type { RunningProcess } from './process.ts';

const exec = promisify(execFile);

export interface ReleasePaths {
  project: string;
  repo: string;
  releases: string;
  current: string;
  order: string;
}

export function releasePaths(project: string): ReleasePaths {
  return {
    project,
    repo: path.join(project, 'repo'),
    releases: path.join(project, 'releases'),
    current: path.join(project, 'current'),
    order: path.join(project, '.deckhand-releases'),
  };
}

/** Where `current` points (`releases/<id>`), or null when there is no `current` symlink. */
export async function readCurrent(project: string): Promise<string | null> {
  try {
    return await readlink(releasePaths(project).current);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    if (code === 'EINVAL')
      throw new Error(`${releasePaths(project).current} is not a symlink`, { cause: err });
    throw err;
  }
}

/** Points `current` at `target` (relative, e.g. `releases/<id>`) atomically. */
export async function switchCurrent(project: string, target: string): Promise<void> {
  const tmp = path.join(project, `current.tmp-${randomBytes(6).toString('hex')}`);
  await symlink(target, tmp);
  try {
    await rename(tmp, releasePaths(project).current);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

/**
 * Makes room for a new release folder: a leftover of an earlier attempt of the same deployment is
 * removed (unless it is live: then the error says so). `removed` means git's worktree list needs a prune.
 */
export async function prepareReleaseFolder(
  project: string,
  release: string,
  print: (b: Buffer) => void,
): Promise<{ removed: boolean; error?: string }> {
  const { releases } = releasePaths(project);
  await mkdir(releases, { recursive: true });
  const folder = path.join(releases, release);
  if (!existsSync(folder)) return { removed: false };
  if ((await readCurrent(project)) === `releases/${release}`) {
    return {
      removed: false,
      error: `releases/${release} exists and is the current release: not rebuilding it`,
    };
  }
  print(Buffer.from(`removing releases/${release}, left over from an earlier attempt\n`));
  await rm(folder, { recursive: true, force: true });
  return { removed: true };
}

/** Notes a new release in the creation-order file. */
export async function recordRelease(project: string, release: string): Promise<void> {
  const order = await recordedOrder(project);
  if (!order.includes(release)) await appendFile(releasePaths(project).order, `${release}\n`);
}

async function recordedOrder(project: string): Promise<string[]> {
  try {
    return (await readFile(releasePaths(project).order, 'utf8')).split('\n').filter(Boolean);
  } catch {
    return [];
  }
}

/** The release folders, oldest first: those not recorded (made by hand) first by mtime, then in recorded order. */
export async function releasesOldestFirst(project: string): Promise<string[]> {
  const { releases } = releasePaths(project);
  let names: string[];
  try {
    names = (await readdir(releases, { withFileTypes: true }))
      .filter((d) => d.isDirectory())
      .map((d) => d.name);
  } catch {
    return [];
  }
  const order = await recordedOrder(project);
  const unrecorded = names.filter((n) => !order.includes(n));
  const mtimes = new Map(
    await Promise.all(
      unrecorded.map(async (n) => [n, (await stat(path.join(releases, n))).mtimeMs] as const),
    ),
  );
  unrecorded.sort((a, b) => mtimes.get(a)! - mtimes.get(b)!);
  return [...unrecorded, ...order.filter((n) => names.includes(n))];
}

export interface ActivateOptions {
  project: string;
  release: string;
  keep: number;
  print: (b: Buffer) => void;
  env: NodeJS.ProcessEnv;
  /** Told where `current` pointed before the switch (null: nowhere), for a health check's switch back. */
  onSwitched: (previous: string | null) => void;
}

/**
 * The `activate` step: switch `current` to `releases/<release>`, then prune all but the newest
 * `keep` releases (oldest first in creation order), sparing the one `current` now points to and
 * the one it pointed to before (a failing health check switches back to it). Runs in the agent, so there is nothing to
 * cancel: it takes milliseconds.
 */
export function runActivateStep(opts: ActivateOptions): RunningProcess {
  const say = (line: string) => opts.print(Buffer.from(`${line}\n`));
  const run = async (): Promise<StepResult> => {
    const { project, release } = opts;
    const paths = releasePaths(project);
    const target = `releases/${release}`;
    const folder = path.join(paths.releases, release);
    if (!(await isDirectory(folder))) {
      return { exitCode: null, signal: null, error: `release ${release} is gone (${folder} does not exist)` };
    }
    const previous = await readCurrent(project);
    await switchCurrent(project, target);
    opts.onSwitched(previous);
    say(`current -> ${target}${previous === null ? '' : ` (was ${previous})`}`);

    // Never the live release, nor the one a failing health check switches back to.
    const all = await releasesOldestFirst(project);
    const spared = new Set([release, ...(previous === null ? [] : [path.basename(previous)])]);
    const prune = releasesToPrune(all, opts.keep).filter((r) => !spared.has(r));
    for (const r of prune) {
      await rm(path.join(paths.releases, r), { recursive: true, force: true });
      say(`removed releases/${r} (keeping the newest ${opts.keep})`);
    }
    if (prune.length > 0) {
      const order = await recordedOrder(project);
      await writeFile(
        paths.order,
        order
          .filter((r) => !prune.includes(r))
          .map((r) => `${r}\n`)
          .join(''),
      );
      if (existsSync(path.join(paths.repo, '.git'))) {
        await exec('git', ['-C', paths.repo, 'worktree', 'prune'], { env: opts.env }).catch(() => undefined);
      }
    } else {
      say(`nothing to prune (${all.length} release${all.length === 1 ? '' : 's'}, keeping ${opts.keep})`);
    }
    return { exitCode: 0, signal: null };
  };
  const result = run().catch((err: unknown): StepResult => ({
    exitCode: null,
    signal: null,
    error: `could not switch the release: ${(err as Error).message}`,
  }));
  return { result, cancel: () => {} };
}

/** After a failed health check: `current` back to where it pointed before the activate, said in the log. */
export async function switchBack(
  project: string,
  previous: string | null,
  print: (b: Buffer) => void,
): Promise<void> {
  const say = (line: string) => print(Buffer.from(`${line}\n`));
  if (previous === null) {
    say('no release was current before this one: current stays where it is');
    return;
  }
  try {
    await switchCurrent(project, previous);
    say(`switched current back to ${previous}`);
  } catch (err) {
    say(`could not switch current back to ${previous}: ${(err as Error).message}`);
  }
}

async function isDirectory(p: string): Promise<boolean> {
  try {
    return (await lstat(p)).isDirectory();
  } catch {
    return false;
  }
}
