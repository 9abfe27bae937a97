// A fresh database per test file, on the server named by DATABASE_URL (set by `npm test`, which
// starts an embedded PostgreSQL when it is unset, or by CI).
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export interface TestDatabase {
  /** Same server and credentials as DATABASE_URL, database deckhand_test_<random hex>. */
  url: string;
  /** Drops the database, disconnecting whoever is still connected. Safe to call twice. */
  drop(): Promise<void>;
}

/** A connected `pg` client for `url`; the caller ends it. */
export async function connectPg(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined); // e.g. the server going away during a test's teardown
  await client.connect();
  return client;
}

async function withAdmin<T>(baseUrl: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = await connectPg(baseUrl);
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const baseUrl = process.env.DATABASE_URL;
  if (!baseUrl) {
    throw new Error(
      'DATABASE_URL is not set: run the tests with `npm test` (it starts an embedded PostgreSQL) ' +
        'or set DATABASE_URL=postgres://user:password@host:port/database',
    );
  }
  const name = `deckhand_test_${randomBytes(8).toString('hex')}`;
  await withAdmin(baseUrl, (c) => c.query(`CREATE DATABASE ${c.escapeIdentifier(name)}`));
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      await withAdmin(baseUrl, (c) =>
        c.query(`DROP DATABASE IF EXISTS ${c.escapeIdentifier(name)} WITH (FORCE)`),
      );
    },
  };
}
