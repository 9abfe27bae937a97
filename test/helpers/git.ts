// Real git repositories for tests: a bare repository on disk (the "forge") and a working clone
// the test commits to and pushes from.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const exec = promisify(execFile);

async function git(cwd: string, ...args: string[]): Promise<string> {
  const { stdout } = await exec(
    'git',
    ['-c', 'user.name=Test', '-c', 'user.email=test@example.com', ...args],
    {
      cwd,
    },
  );
  return stdout.trim();
}

export interface TestRepo {
  /** The bare repository: what a project's forge_url points at. */
  url: string;
  /** Writes files, commits them on `branch` and pushes; returns the commit sha. */
  commit(files: Record<string, string>, message?: string, branch?: string): Promise<string>;
  remove(): Promise<void>;
}

export async function createTestRepo(): Promise<TestRepo> {
  const root = await mkdtemp(join(tmpdir(), 'deckhand-repo-'));
  const bare = join(root, 'forge.git');
  const work = join(root, 'work');
  await exec('git', ['init', '--bare', '--initial-branch=main', bare]);
  await exec('git', ['clone', bare, work]);
  await git(work, 'checkout', '-B', 'main');
  return {
    url: bare,
    async commit(files, message = 'change', branch = 'main') {
      await git(work, 'checkout', '-B', branch);
      for (const [name, content] of Object.entries(files)) await writeFile(join(work, name), content);
      await git(work, 'add', '-A');
      await git(work, 'commit', '--allow-empty', '-m', message);
      await git(work, 'push', '--force', 'origin', `${branch}:${branch}`);
      return git(work, 'rev-parse', 'HEAD');
    },
    async remove() {
      await rm(root, { recursive: true, force: true });
    },
  };
}
