// A new Ed25519 key pair in OpenSSH's formats (the private key as `openssh-key-v1`, unencrypted;
// the public key as an `authorized_keys` line), for projects' deploy keys.
//
// Not ssh2's `utils.generateKeyPairSync`: it drops a leading zero byte of the public key, so
// about one key in 256 comes out malformed, and neither OpenSSH ("error in libcrypto") nor ssh2
// itself can load it — a project would get a deploy key no checkout can use. Node's crypto makes
// the key; its JWK gives the 32-byte seed and public key exactly, and the format is written here
// (PROTOCOL.key in OpenSSH's sources).
import { generateKeyPairSync, randomBytes } from 'node:crypto';

const KEY_TYPE = 'ssh-ed25519';

/** An SSH wire-format string: a 4-byte big-endian length, then the bytes. */
function sshString(value: Buffer | string): Buffer {
  const bytes = typeof value === 'string' ? Buffer.from(value) : value;
  const length = Buffer.alloc(4);
  length.writeUInt32BE(bytes.length);
  return Buffer.concat([length, bytes]);
}

function uint32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

export interface OpenSshKeyPair {
  /** `-----BEGIN OPENSSH PRIVATE KEY-----` … */
  private: string;
  /** `ssh-ed25519 AAAA… comment` */
  public: string;
}

export function ed25519KeyPair(comment: string): OpenSshKeyPair {
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = privateKey.export({ format: 'jwk' });
  const seed = Buffer.from(jwk.d!, 'base64url');
  const pub = Buffer.from(jwk.x!, 'base64url');
  if (seed.length !== 32 || pub.length !== 32) throw new Error('unexpected Ed25519 key size');

  const publicBlob = Buffer.concat([sshString(KEY_TYPE), sshString(pub)]);
  // Two equal random words let a reader check a decryption; the key is not encrypted, but the
  // format keeps them.
  const check = randomBytes(4).readUInt32BE();
  let secret = Buffer.concat([
    uint32(check),
    uint32(check),
    sshString(KEY_TYPE),
    sshString(pub),
    sshString(Buffer.concat([seed, pub])),
    sshString(comment),
  ]);
  // Padded with 1, 2, 3, … to the cipher's block size (8 for "none").
  const pad = (8 - (secret.length % 8)) % 8;
  secret = Buffer.concat([secret, Buffer.from(Array.from({ length: pad }, (_, i) => i + 1))]);

  const body = Buffer.concat([
    Buffer.from('openssh-key-v1\0'),
    sshString('none'),
    sshString('none'),
    sshString(''),
    uint32(1),
    sshString(publicBlob),
    sshString(secret),
  ]);
  const lines = body.toString('base64').match(/.{1,70}/g)!;
  return {
    private: `-----BEGIN OPENSSH PRIVATE KEY-----\n${lines.join('\n')}\n-----END OPENSSH PRIVATE KEY-----\n`,
    public: `${KEY_TYPE} ${publicBlob.toString('base64')} ${comment}`,
  };
}
