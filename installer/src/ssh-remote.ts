// Talking to the host over SSH: logging in with the host key checked against a pinned
// fingerprint (every kind of key the host holds is tried before a pin is declared wrong) or
// confirmed by whoever runs the installation, and then running scripts and writing files there.
// Everything the installer does on the host goes through Remote: a script runs as one quoted
// bash -c, and a file's content (the agent's token among them) travels on the channel's stdin
// through writeRemote, never on a command line.
import { createHash, timingSafeEqual } from 'node:crypto';
import path from 'node:path';
import ssh2 from 'ssh2';
import type { Client as SshClient, ConnectConfig } from 'ssh2';
import { hostError, InstallError } from './install-error.ts';
import type { InstallHooks, InstallTarget } from './installer.ts';

/** `SHA256:<base64, no padding>` of a key blob, as `ssh-keygen -l` prints it. */
function fingerprintOf(key: Buffer): string {
  return `SHA256:${createHash('sha256').update(key).digest('base64').replace(/=+$/, '')}`;
}

function keyAlgorithm(key: Buffer): string {
  const n = key.length >= 4 ? key.readUInt32BE(0) : 0;
  return n > 0 && n < 64 && key.length >= 4 + n ? key.subarray(4, 4 + n).toString('latin1') : 'unknown';
}

function sameFingerprint(a: string, b: string): boolean {
  const x = Buffer.from(a.replace(/=+$/, ''));
  const y = Buffer.from(b.replace(/=+$/, ''));
  return x.length === y.length && timingSafeEqual(x, y);
}

/** Host key algorithms, one group per kind of key (the name a key blob carries comes first). */
const HOST_KEY_KINDS = [
  ['ssh-ed25519'],
  ['ecdsa-sha2-nistp256'],
  ['ecdsa-sha2-nistp384'],
  ['ecdsa-sha2-nistp521'],
  ['ssh-rsa', 'rsa-sha2-512', 'rsa-sha2-256'],
];

/** Single-quotes a word for a POSIX shell. */
export function q(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

export interface Remote {
  run(script: string, stdin?: Buffer): Promise<{ code: number | null; stdout: string; stderr: string }>;
  end(): void;
}

class HostKeyRefused extends InstallError {
  readonly algorithm: string;
  constructor(message: string, algorithm: string) {
    super('usage', message);
    this.algorithm = algorithm;
  }
}

class NoSuchHostKey extends Error {}

/**
 * Connects and logs in. With a pinned fingerprint, a host whose first key does not match is
 * asked for each other kind of key it may hold (the pin may name its RSA key, say); only a key
 * that matches is accepted.
 */
export async function connect(
  t: InstallTarget,
  hooks: InstallHooks,
): Promise<{ remote: Remote; fingerprint: string; algorithm: string }> {
  try {
    return await connectOnce(t, hooks, undefined);
  } catch (first) {
    if (!(first instanceof HostKeyRefused) || t.fingerprint === null) throw first;
    for (const kinds of HOST_KEY_KINDS) {
      if (kinds.includes(first.algorithm)) continue;
      try {
        return await connectOnce(t, hooks, kinds);
      } catch (err) {
        if (err instanceof HostKeyRefused || err instanceof NoSuchHostKey) continue;
        throw err;
      }
    }
    throw first;
  }
}

async function connectOnce(
  t: InstallTarget,
  hooks: InstallHooks,
  kinds: string[] | undefined,
): Promise<{ remote: Remote; fingerprint: string; algorithm: string }> {
  const where = `${t.user}@${t.host}:${t.port}`;
  let presented: { fingerprint: string; algorithm: string } | undefined;
  let refused: InstallError | undefined;
  const client: SshClient = new ssh2.Client();
  await new Promise<void>((resolve, reject) => {
    client.once('ready', () => resolve());
    // (After `ready` a rejection changes nothing.)
    client.on('close', () =>
      reject(
        refused ??
          (kinds && !presented
            ? new NoSuchHostKey('closed')
            : hostError(`Cannot connect to ${where}: the connection closed during login`)),
      ),
    );
    client.on('error', (err: Error & { level?: string }) => {
      client.end();
      if (refused) reject(refused);
      // Asked for one kind of key only: a host without it hangs up before showing any.
      else if (kinds && !presented) reject(new NoSuchHostKey(err.message));
      else if (err.level === 'client-authentication')
        reject(
          hostError(`${where} refused the key: add its public key to ~${t.user}/.ssh/authorized_keys there.`),
        );
      else reject(hostError(`Cannot connect to ${where}: ${err.message}`));
    });
    client.connect({
      host: t.host.replace(/^\[(.*)\]$/, '$1'),
      port: t.port,
      username: t.user,
      readyTimeout: 20_000,
      tryKeyboard: false,
      ...t.auth,
      ...(kinds ? { algorithms: { serverHostKey: kinds } } : {}),
      hostVerifier: (key: Buffer, verify: (ok: boolean) => void) => {
        presented = { fingerprint: fingerprintOf(key), algorithm: keyAlgorithm(key) };
        const fp = presented.fingerprint;
        if (t.fingerprint !== null) {
          const ok = sameFingerprint(fp, t.fingerprint);
          if (!ok)
            refused = new HostKeyRefused(
              `Host key verification failed for ${where}: it presented ${fp} (${presented.algorithm}), not ${t.fingerprint}. Nothing was sent.`,
              presented.algorithm,
            );
          verify(ok);
          return;
        }
        const ask = hooks.confirmHostKey ?? (async () => false);
        void ask(where, fp, presented.algorithm).then(
          (ok) => {
            if (!ok)
              refused = new InstallError(
                'usage',
                `The host key of ${where} is ${fp} (${presented!.algorithm}), and it was not confirmed. Check it on the host (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and pass --host-key-fingerprint ${fp}.`,
              );
            verify(ok);
          },
          () => verify(false),
        );
      },
    } as ConnectConfig);
  });
  client.on('error', () => undefined);
  const remote: Remote = {
    run: (script, stdin) =>
      new Promise((resolve, reject) => {
        client.exec(`exec bash --norc -c ${q(script)}`, (err, ch) => {
          if (err) return reject(hostError(`Cannot run a command on ${where}: ${err.message}`));
          let stdout = '';
          let stderr = '';
          let code: number | null = null;
          ch.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
          ch.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
          ch.on('exit', (c: number | null) => (code = c));
          ch.on('close', () => resolve({ code, stdout, stderr }));
          ch.end(stdin ?? Buffer.alloc(0));
        });
      }),
    end: () => client.end(),
  };
  return { remote, ...presented! };
}

export async function writeRemote(
  remote: Remote,
  file: string,
  content: Buffer,
  mode: string,
): Promise<void> {
  const dir = path.posix.dirname(file);
  const r = await remote.run(
    `set -e; umask 077; mkdir -p ${q(dir)}; tmp=${q(file)}.tmp-$$; cat > "$tmp"; chmod ${mode} "$tmp"; mv -f "$tmp" ${q(file)}`,
    content,
  );
  if (r.code !== 0) throw hostError(`Could not write ${file} on the host: ${r.stderr.trim()}`);
}

export async function must(remote: Remote, what: string, script: string): Promise<string> {
  const r = await remote.run(script);
  if (r.code !== 0)
    throw hostError(
      `${what} failed (exit ${r.code}): ${(r.stderr || r.stdout).trim().split('\n').slice(-5).join(' | ')}`,
    );
  return r.stdout;
}
