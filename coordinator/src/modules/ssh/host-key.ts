// Host keys of SSH targets: their SHA-256 fingerprint as OpenSSH prints it (`SHA256:` and the
// unpadded base64 of the digest of the key blob), the key's algorithm, and the "fetch host key"
// action, which connects only far enough to see the key the server presents, authenticates
// nothing and trusts nothing: the admin compares the answer with what the host itself prints
// (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`) before pinning it in the project.
import { createHash, timingSafeEqual } from 'node:crypto';
import ssh2 from 'ssh2';
import type { ServerHostKeyAlgorithm } from 'ssh2';

/** `SHA256:<base64, no padding>` of a key blob, as `ssh-keygen -l` and `ssh` print it. */
export function fingerprintOf(keyBlob: Buffer): string {
  return `SHA256:${createHash('sha256').update(keyBlob).digest('base64').replace(/=+$/, '')}`;
}

/** The algorithm named at the start of a key blob (`ssh-ed25519`, `ecdsa-sha2-nistp256`, `ssh-rsa`). */
export function keyAlgorithm(keyBlob: Buffer): string {
  if (keyBlob.length < 4) return 'unknown';
  const length = keyBlob.readUInt32BE(0);
  if (length > 64 || keyBlob.length < 4 + length) return 'unknown';
  return keyBlob.subarray(4, 4 + length).toString('latin1');
}

/** Whether two fingerprints are the same key (the `=` padding some tools print does not count). */
export function sameFingerprint(a: string, b: string): boolean {
  const x = Buffer.from(a.replace(/=+$/, ''));
  const y = Buffer.from(b.replace(/=+$/, ''));
  return x.length === y.length && timingSafeEqual(x, y);
}

export interface HostKey {
  fingerprint: string;
  algorithm: string;
}

/** What a refused host key means, for the log and the deployment's reason. */
export function hostKeyMismatch(presented: HostKey, pinned: string): string {
  return (
    `host key verification failed: the host presented ${presented.fingerprint} ` +
    `(${presented.algorithm}), the project pins ${pinned}. Nothing was sent to it. If the host's key ` +
    `changed on purpose, fetch it again (POST /projects/host-key), check it on the host, and update ` +
    `the project's target.ssh.host_key_fingerprint`
  );
}

export class HostKeyFetchError extends Error {}

/**
 * Connects to host:port, reads the host key the server presents in the key exchange and hangs up
 * before authenticating. Rejects with HostKeyFetchError when nothing SSH answers there.
 */
export function fetchHostKey(
  host: string,
  port: number,
  timeoutMs = 10_000,
  algorithms?: string[],
): Promise<HostKey> {
  return new Promise((resolve, reject) => {
    const client = new ssh2.Client();
    let done = false;
    const finish = (fn: () => void) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      client.end();
      fn();
    };
    const timer = setTimeout(
      () =>
        finish(() =>
          reject(
            new HostKeyFetchError(`no SSH server answered on ${host}:${port} within ${timeoutMs / 1000} s`),
          ),
        ),
      timeoutMs,
    );
    client.on('error', (err) =>
      finish(() =>
        reject(new HostKeyFetchError(`could not read the host key of ${host}:${port}: ${err.message}`)),
      ),
    );
    client.on('close', () =>
      finish(() =>
        reject(new HostKeyFetchError(`${host}:${port} closed the connection before showing a host key`)),
      ),
    );
    client.connect({
      host,
      port,
      // Any user name: the connection ends at the host key, before authentication.
      username: 'deckhand-host-key',
      readyTimeout: timeoutMs,
      ...(algorithms ? { algorithms: { serverHostKey: algorithms as ServerHostKeyAlgorithm[] } } : {}),
      hostVerifier: (key: Buffer) => {
        const presented = { fingerprint: fingerprintOf(key), algorithm: keyAlgorithm(key) };
        finish(() => resolve(presented));
        return false;
      },
    });
  });
}

/**
 * Every host key the server holds, one per kind (ed25519, ECDSA, RSA), the one a default
 * negotiation picks first; kinds the server does not have are left out. Rejects like
 * fetchHostKey when the host does not answer at all.
 */
export async function fetchHostKeys(host: string, port: number, timeoutMs = 10_000): Promise<HostKey[]> {
  const first = await fetchHostKey(host, port, timeoutMs);
  const keys = [first];
  for (const algorithms of HOST_KEY_KINDS) {
    if (algorithms.includes(first.algorithm)) continue;
    const key = await fetchHostKey(host, port, timeoutMs, algorithms).catch(() => null);
    if (key && !keys.some((k) => k.fingerprint === key.fingerprint)) keys.push(key);
  }
  return keys;
}

/** Host key algorithms, one group per kind of key (the name a key blob carries comes first). */
export const HOST_KEY_KINDS: string[][] = [
  ['ssh-ed25519'],
  ['ecdsa-sha2-nistp256'],
  ['ecdsa-sha2-nistp384'],
  ['ecdsa-sha2-nistp521'],
  ['ssh-rsa', 'rsa-sha2-512', 'rsa-sha2-256'],
];
