// A real OpenSSH server for tests: its own host key, config and authorized keys in a temp folder,
// listening on a free loopback port, logging in as the user the tests run as (root in CI). Git
// over ssh works against it: `ssh://root@127.0.0.1:<port>/absolute/path/to/repo.git`. Also what
// the tests check on that host: key fingerprints as ssh-keygen prints them, and its processes.
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './processes.ts';

const exec = promisify(execFile);

export const SSHD_PATH = '/usr/sbin/sshd';

export interface TestSshd {
  port: number;
  /** The server's host key as a known_hosts line: `[127.0.0.1]:PORT ssh-ed25519 AAAA…`. */
  hostKeyLine: string;
  /** Who to log in as (the user running the tests). */
  user: string;
  /** The server's log so far (LogLevel VERBOSE), for failure messages. */
  log(): Promise<string>;
  stop(): Promise<void>;
}

export interface SshdOptions {
  /** authorized_keys lines (`ssh-ed25519 AAAA… comment`) that may log in as `user`. */
  authorizedKeys: string[];
  /** The sshd binary; tests need not set it. */
  sshdPath?: string;
  /** More sshd_config lines (e.g. `SetEnv NAME=value`). */
  extraConfig?: string[];
}

/** Whether an SSH server answers on the port: it greets with its `SSH-2.0-…` banner. */
function answersSsh(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(2_000, () => done(false));
    socket.once('data', (d) => done(d.toString('latin1').startsWith('SSH-')));
    socket.once('error', () => done(false));
    socket.once('close', () => done(false));
  });
}

export async function startSshd(opts: SshdOptions): Promise<TestSshd> {
  const sshd = opts.sshdPath ?? SSHD_PATH;
  if (!existsSync(sshd)) {
    throw new Error(
      `${sshd} is missing: these tests need a real OpenSSH server. ` +
        `Install it with \`apt-get install -y openssh-server\` (.ci/run does this in CI).`,
    );
  }
  const user = userInfo().username;
  const dir = await mkdtemp(join(tmpdir(), 'deckhand-sshd-'));
  await chmod(dir, 0o700);
  const hostKey = join(dir, 'ssh_host_ed25519_key');
  const authorizedKeys = join(dir, 'authorized_keys');
  const config = join(dir, 'sshd_config');
  const logFile = join(dir, 'sshd.log');
  const pidFile = join(dir, 'sshd.pid');
  const readLog = () => readFile(logFile, 'utf8').catch(() => '');

  try {
    await exec('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'deckhand-test-sshd', '-f', hostKey]);
    const [type, key] = (await readFile(`${hostKey}.pub`, 'utf8')).trim().split(/\s+/);
    await writeFile(authorizedKeys, opts.authorizedKeys.map((k) => `${k.trim()}\n`).join(''), {
      mode: 0o600,
    });
    await chmod(authorizedKeys, 0o600);
    // sshd's privilege separation folder (the package creates it at boot, not at install).
    await mkdir('/run/sshd', { recursive: true, mode: 0o755 });

    const port = await freePort();
    await writeFile(
      config,
      [
        `Port ${port}`,
        'ListenAddress 127.0.0.1',
        `HostKey ${hostKey}`,
        `PidFile ${pidFile}`,
        `AuthorizedKeysFile ${authorizedKeys}`,
        // The temp folder sits in /tmp (world-writable), which StrictModes would refuse.
        'StrictModes no',
        'PubkeyAuthentication yes',
        'PasswordAuthentication no',
        'KbdInteractiveAuthentication no',
        'UsePAM no',
        'PermitRootLogin prohibit-password',
        'LogLevel VERBOSE',
        ...(opts.extraConfig ?? []),
        '',
      ].join('\n'),
      { mode: 0o600 },
    );

    const child = spawn(sshd, ['-D', '-f', config, '-E', logFile], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    let spawnError: Error | undefined;
    const exited = new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.once('error', (err) => {
        spawnError = err;
        resolve();
      });
    });
    const running = () => spawnError === undefined && child.exitCode === null && child.signalCode === null;

    const stop = async () => {
      if (running()) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
        await exited;
        clearTimeout(timer);
      }
      await rm(dir, { recursive: true, force: true });
    };

    const deadline = Date.now() + 10_000;
    for (;;) {
      if (!running()) {
        const why = spawnError?.message ?? `exit ${child.exitCode ?? child.signalCode}`;
        throw new Error(`sshd stopped (${why}) before listening:\n${output}\n${await readLog()}`);
      }
      if (await answersSsh(port)) break;
      if (Date.now() > deadline) {
        const log = await readLog();
        await stop();
        throw new Error(`sshd did not listen on 127.0.0.1:${port} within 10 s:\n${output}\n${log}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }

    return { port, hostKeyLine: `[127.0.0.1]:${port} ${type} ${key}`, user, log: readLog, stop };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** The fingerprint `ssh-keygen -l -E sha256` prints for a public key file (`SHA256:…`). */
export async function keyFingerprint(pubFile: string): Promise<string> {
  return (await exec('ssh-keygen', ['-l', '-E', 'sha256', '-f', pubFile])).stdout.split(' ')[1]!;
}

/**
 * The server's host key fingerprint as OpenSSH computes it, independently of Deckhand's own code
 * (the key is written to `dir`/host.pub for ssh-keygen).
 */
export async function hostKeyFingerprint(sshd: TestSshd, dir: string): Promise<string> {
  const pub = join(dir, 'host.pub');
  await writeFile(pub, `${sshd.hostKeyLine.split(' ').slice(1).join(' ')}\n`);
  return keyFingerprint(pub);
}

/** A second host key, RSA, made in `dir` for `extraConfig: [`HostKey ${file}`]`: its file and fingerprint. */
export async function rsaHostKey(dir: string): Promise<{ file: string; fingerprint: string }> {
  const file = join(dir, 'ssh_host_rsa_key');
  await exec('ssh-keygen', ['-q', '-t', 'rsa', '-b', '2048', '-N', '', '-f', file]);
  return { file, fingerprint: await keyFingerprint(`${file}.pub`) };
}

/** Processes on this machine (the SSH host) whose command line is exactly `args` (no zombies). */
export async function processesWith(args: string): Promise<string[]> {
  const { stdout } = await exec('ps', ['-eo', 'pid=,stat=,args=']);
  return stdout
    .split('\n')
    .map((l) => l.trim().split(/\s+/))
    .filter(([, stat, ...rest]) => rest.join(' ') === args && !stat!.startsWith('Z'))
    .map((f) => f.join(' '));
}
