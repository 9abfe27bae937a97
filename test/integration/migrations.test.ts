// The committed migrations are the schema: applied to an empty database they produce exactly what
// the entities describe (plus the indexes only SQL can say), and they can be rolled back.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { migrate, migrationsApplied, openDatabase } from '../../coordinator/src/db/orm.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/database.ts';

let db: TestDatabase;
let orm: MikroORM;

beforeAll(async () => {
  db = await createTestDatabase();
  orm = await openDatabase({ url: db.url, poolMax: 2 });
});

afterAll(async () => {
  await orm?.close();
  await db?.drop();
});

describe('database migrations', () => {
  it('apply to an empty database and leave nothing pending', async () => {
    expect(await migrationsApplied(orm)).toBe(false);
    const applied = await migrate(orm);
    expect(applied.length).toBeGreaterThan(0);
    expect(await migrationsApplied(orm)).toBe(true);
    expect(await migrate(orm)).toEqual([]);
  });

  it('match the entities exactly', async () => {
    const diff = await orm.schema.getUpdateSchemaSQL({ wrap: false });
    const statements = diff
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('set names'));
    expect(statements).toEqual([]);
  });

  it('roll back completely and apply again', async () => {
    await orm.migrator.down({ to: 0 });
    const tables = await orm.em
      .fork()
      .execute<Array<{ n: number }>>(
        "select count(*)::int as n from information_schema.tables where table_schema = 'public' and table_name <> 'mikro_orm_migrations'",
      );
    expect(tables[0]!.n).toBe(0);
    await migrate(orm);
    expect(await migrationsApplied(orm)).toBe(true);
  });
});
