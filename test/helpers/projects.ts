// Projects for the suites: the secrets `sampleProject()` carries, an SSH target's key material, and
// what the coordinator stores for them.
import { expect } from 'vitest';
import { deriveKey, SecretBox } from '../../coordinator/src/modules/common/crypto.ts';
import type { Client, HttpResponse, TestCoordinator } from './coordinator.ts';
import { sql } from './sql.ts';
import { ed25519KeyPair } from '../../coordinator/src/modules/ssh/ed25519-key.ts';

/** The secret value `sampleProject()` stores under API_KEY. */
export const SECRET_VALUE = 'sk-live-very-secret';

/** A (fake) SSH host key fingerprint and a throw-away private key for SSH targets. */
export const FINGERPRINT = `SHA256:${'nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8'}`;
// A real key: the coordinator refuses one it could not log in with.
export const PRIVATE_KEY = ed25519KeyPair('deckhand-test').private;
/** A line of the private key's body, to look for in answers and rows. */
export const PRIVATE_KEY_BODY_LINE = PRIVATE_KEY.split('\n')[2]!;

export function patch(client: Client, path: string, json: unknown) {
  return client.request('PATCH', path, { json });
}

export function del(client: Client, path: string) {
  return client.request('DELETE', path);
}

/** The project's secrets as stored, decrypted with the coordinator's own key. */
export async function storedSecrets(
  coord: TestCoordinator,
  projectId: string,
): Promise<Record<string, string> | null> {
  const [row] = await sql(coord, 'select secrets_encrypted from projects where id = ?', [projectId]);
  if (!row.secrets_encrypted) return null;
  const box = new SecretBox(deriveKey(coord.rootSecret, 'secrets-at-rest'));
  return box.decryptJson<Record<string, string>>(row.secrets_encrypted);
}

/** No secret value (SECRET_VALUE, nor any of `secrets`) anywhere in the response text. */
export function expectNoSecrets(res: HttpResponse, ...secrets: string[]) {
  for (const secret of [SECRET_VALUE, ...secrets]) expect(res.text).not.toContain(secret);
}
