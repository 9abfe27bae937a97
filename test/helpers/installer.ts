// `deckhand agents install|upgrade` against a real sshd on this machine: the host to install on
// (a client key file, the host key's fingerprint), a coordinator with an admin API token for the
// installer, and the installer run as an operator would.
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ed25519KeyPair } from '../../coordinator/src/modules/ssh/ed25519-key.ts';
import {
  type Client,
  createApiToken,
  signUp,
  startCoordinator,
  type TestCoordinator,
} from './coordinator.ts';
import { repoRoot } from './processes.ts';
import { hostKeyFingerprint, startSshd, type TestSshd } from './sshd.ts';

export interface InstallHost {
  sshd: TestSshd;
  /** The private key sshd accepts (ed25519), in `dir`/id_ed25519. */
  keyFile: string;
  /** sshd's host key fingerprint, as ssh-keygen prints it. */
  fingerprint: string;
  coordinator: TestCoordinator;
  /** The coordinator's admin. */
  admin: Client;
  /** An admin-scoped API token (named `installer`), as the installer is given. */
  apiToken: string;
  /** Stops the coordinator, then sshd. */
  close(): Promise<void>;
}

/**
 * Starts sshd (with `extraConfig`) accepting a new key written into `dir`, and a coordinator with
 * fast scheduling and heartbeats; what started is stopped again on failure.
 */
export async function startInstallHost(
  dir: string,
  opts: { keyComment: string; extraConfig?: string[] },
): Promise<InstallHost> {
  let sshd: TestSshd | undefined;
  let coordinator: TestCoordinator | undefined;
  const close = async () => {
    await coordinator?.close();
    await sshd?.stop();
  };
  try {
    const pair = ed25519KeyPair(opts.keyComment);
    const keyFile = join(dir, 'id_ed25519');
    await writeFile(keyFile, pair.private, { mode: 0o600 });
    sshd = await startSshd({ authorizedKeys: [pair.public], extraConfig: opts.extraConfig });
    const fingerprint = await hostKeyFingerprint(sshd, dir);
    coordinator = await startCoordinator({ SCHEDULER_INTERVAL_MS: '200', AGENT_HEARTBEAT_MS: '1000' });
    const { client: admin } = await signUp(coordinator.url);
    const apiToken = await createApiToken(admin, 'installer', 'admin');
    return { sshd, keyFile, fingerprint, coordinator, admin, apiToken, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/**
 * Runs `deckhand agents <sub> …args` against the coordinator at `url` with the API token `token`,
 * not interactive (CI=true) and without the caller's SSH agent: its exit code and output.
 */
export function runAgentsCommand(
  sub: 'install' | 'upgrade',
  args: string[],
  url: string,
  token: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      DECKHAND_URL: url,
      DECKHAND_TOKEN: token,
      CI: 'true',
    };
    delete env.SSH_AUTH_SOCK;
    const child = spawn(process.execPath, ['cli/bin/deckhand.js', 'agents', sub, ...args], {
      cwd: repoRoot,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}
