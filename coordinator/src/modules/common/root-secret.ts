// The root secret: from DECKHAND_SECRET, or generated once into <data dir>/secret (mode 0600)
// and read back on every later start. Replicas sharing a database must be given the same one.
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export async function loadRootSecret(
  configured: string | undefined,
  dataDir: string,
): Promise<{ secret: string; generated: boolean; path?: string }> {
  if (configured) return { secret: configured, generated: false };
  const path = join(dataDir, 'secret');
  try {
    const existing = (await readFile(path, 'utf8')).trim();
    if (existing.length >= 32) return { secret: existing, generated: false, path };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const secret = randomBytes(48).toString('base64url');
  // 'wx' fails if another process created it meanwhile; then read theirs.
  try {
    await writeFile(path, `${secret}\n`, { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return loadRootSecret(undefined, dataDir);
    throw err;
  }
  await chmod(path, 0o600);
  return { secret, generated: true, path };
}
