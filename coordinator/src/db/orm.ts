// The MikroORM instance: PostgreSQL, the entity list, and the committed migrations, which are
// applied at start-up (listed explicitly in migrations/index.ts, so no file discovery at run time).
import { Migrator } from '@mikro-orm/migrations';
import { defineConfig, MikroORM } from '@mikro-orm/postgresql';
import { entities } from './entities.ts';
import { migrations } from './migrations/index.ts';

export interface OrmOptions {
  url: string;
  poolMax: number;
  log?: { debug(msg: string): void };
}

export function ormConfig({ url, poolMax, log }: OrmOptions) {
  return defineConfig({
    clientUrl: url,
    entities,
    extensions: [Migrator],
    pool: { min: 0, max: poolMax },
    debug: false,
    logger: (message: string) => log?.debug(message),
    migrations: {
      migrationsList: migrations,
      path: new URL('./migrations', import.meta.url).pathname,
      emit: 'ts',
      snapshot: false,
      transactional: true,
      allOrNothing: true,
      silent: true,
    },
  });
}

export async function openDatabase(options: OrmOptions): Promise<MikroORM> {
  return MikroORM.init(ormConfig(options));
}

/** Applies pending migrations; returns the names it applied. */
export async function migrate(orm: MikroORM): Promise<string[]> {
  const applied = await orm.migrator.up();
  return applied.map((m) => m.name);
}

/** True when every committed migration has been applied (used by /readyz). */
export async function migrationsApplied(orm: MikroORM): Promise<boolean> {
  const pending = await orm.migrator.getPending();
  return pending.length === 0;
}
