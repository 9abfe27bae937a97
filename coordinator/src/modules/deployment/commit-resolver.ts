// Fixes a deployment's commit when its trigger named only a branch: `git ls-remote` of the
// repository at dispatch, once, so every host checks out the same commit. Uses the project's
// deploy key for ssh remotes (host keys checked strictly), like the agents' checkouts.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface ResolveInput {
  url: string;
  branch: string;
  sshKey: string | null;
  knownHosts: string | null;
}

const TIMEOUT_MS = 30_000;

function run(args: string[], env: NodeJS.ProcessEnv): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile('git', args, { env, timeout: TIMEOUT_MS, maxBuffer: 4 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) reject(Object.assign(err, { stderr }));
      else resolve({ stdout, stderr });
    });
  });
}

const shellQuote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;

/** The commit sha the branch points at, or an Error whose message says why not. */
export async function resolveBranchHead(input: ResolveInput): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'deckhand-ls-remote-'));
  try {
    const env: NodeJS.ProcessEnv = { ...process.env, GIT_TERMINAL_PROMPT: '0' };
    if (input.sshKey) {
      const key = join(dir, 'key');
      await writeFile(key, input.sshKey.endsWith('\n') ? input.sshKey : `${input.sshKey}\n`, { mode: 0o600 });
      let ssh = `ssh -i ${shellQuote(key)} -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes -o BatchMode=yes`;
      if (input.knownHosts) {
        const known = join(dir, 'known_hosts');
        await writeFile(known, input.knownHosts, { mode: 0o600 });
        // Only the project's known hosts count, not the machine-wide file too.
        ssh += ` -o UserKnownHostsFile=${shellQuote(known)} -o GlobalKnownHostsFile=/dev/null`;
      }
      env.GIT_SSH_COMMAND = ssh;
    }
    const ref = `refs/heads/${input.branch}`;
    let stdout: string;
    try {
      ({ stdout } = await run(['ls-remote', '--', input.url, ref], env));
    } catch (err) {
      const stderr = String((err as { stderr?: string }).stderr ?? '').trim();
      // git ends with a generic "Could not read from remote repository"; the cause is the line before.
      const lines = stderr
        .split('\n')
        .map((l) => l.trim())
        .filter(Boolean);
      const generic = lines.indexOf('fatal: Could not read from remote repository.');
      const why = (generic > 0 ? lines[generic - 1] : lines.at(-1)) ?? (err as Error).message;
      throw new Error(`Could not read branch ${input.branch} of ${input.url}: ${why}`, { cause: err });
    }
    const line = stdout.split('\n').find((l) => l.endsWith(`\t${ref}`));
    const sha = line?.split('\t')[0];
    if (!sha || !/^[0-9a-f]{40,64}$/.test(sha)) {
      throw new Error(`Branch ${input.branch} does not exist in ${input.url}`);
    }
    return sha;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
