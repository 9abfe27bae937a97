// A PostgreSQL server of the test's own (embedded), for tests that stop and start the database.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../../coordinator/src/db/embedded-postgres.ts';
import { freePort } from './processes.ts';

export interface OwnPostgres {
  url: string;
  stop(): Promise<void>;
  start(): Promise<void>;
  remove(): Promise<void>;
}

const quiet = { info() {}, warn() {}, debug() {} };

export async function startOwnPostgres(): Promise<OwnPostgres> {
  const dataDir = await mkdtemp(join(tmpdir(), 'deckhand-own-pg-'));
  const port = await freePort();
  let server: EmbeddedPostgres | null = await startEmbeddedPostgres({ dataDir, port, log: quiet });
  const url = server.url;
  return {
    url,
    async stop() {
      await server?.stop();
      server = null;
    },
    async start() {
      server ??= await startEmbeddedPostgres({ dataDir, port, log: quiet });
    },
    async remove() {
      await server?.stop();
      server = null;
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
