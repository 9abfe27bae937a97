// Deploy keys (coordinator/src/modules/ssh/ed25519-key.ts): every key made loads, in ssh2 and in
// OpenSSH, with the public key it was given. ssh2's own generator gets about one in 256 wrong.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import ssh2 from 'ssh2';
import { afterAll, describe, expect, it } from 'vitest';
import { ed25519KeyPair } from '../../coordinator/src/modules/ssh/ed25519-key.ts';

const dir = mkdtempSync(path.join(os.tmpdir(), 'deckhand-keys-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('ed25519KeyPair', () => {
  it('gives an OpenSSH private key and an authorized_keys line with the comment', () => {
    const pair = ed25519KeyPair('deckhand deploy key');
    expect(pair.private).toMatch(
      /^-----BEGIN OPENSSH PRIVATE KEY-----\n[A-Za-z0-9+/=\n]+\n-----END OPENSSH PRIVATE KEY-----\n$/,
    );
    expect(pair.public).toMatch(
      /^ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI[A-Za-z0-9+/]+=* deckhand deploy key$/,
    );
  });

  it('makes keys ssh2 loads, each with its own public key and able to sign (2,000 keys)', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 2000; i++) {
      const pair = ed25519KeyPair('k');
      const parsed = ssh2.utils.parseKey(pair.private);
      if (parsed instanceof Error) throw new Error(`key ${i} does not load: ${parsed.message}`);
      const pub = pair.public.split(' ')[1]!;
      expect(parsed.getPublicSSH().toString('base64')).toBe(pub);
      seen.add(pub);
      if (i % 200 === 0) {
        const data = Buffer.from(`signed ${i}`);
        expect(parsed.verify(data, parsed.sign(data))).toBe(true);
      }
    }
    expect(seen.size).toBe(2000);
  });

  it('makes keys OpenSSH loads, deriving the same public key (ssh-keygen -y)', () => {
    for (let i = 0; i < 40; i++) {
      const pair = ed25519KeyPair(`key ${i}`);
      const file = path.join(dir, `key-${i}`);
      writeFileSync(file, pair.private, { mode: 0o600 });
      const derived = execFileSync('ssh-keygen', ['-y', '-f', file], { encoding: 'utf8' }).trim();
      expect(derived.split(' ').slice(0, 2)).toEqual(pair.public.split(' ').slice(0, 2));
    }
  });
});
