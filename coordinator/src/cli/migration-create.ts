// Developer command (`npm run db:migration:create -- <name>`): diffs the entities against a
// database with every committed migration applied and writes the difference as a new migration
// under coordinator/src/db/migrations. Add it to migrations/index.ts and commit both.
import { migrate, openDatabase } from '../db/orm.ts';

const url = process.env.DATABASE_URL;
if (!url) {
  console.error('Set DATABASE_URL to a scratch PostgreSQL database (it is migrated, then diffed).');
  process.exit(1);
}
const name = process.argv[2];
const orm = await openDatabase({ url, poolMax: 2 });
try {
  await migrate(orm);
  const result = await orm.migrator.create(undefined, false, false, name);
  if (!result.diff.up.length) console.log('Entities and migrations agree: nothing to create.');
  else console.log(`Wrote ${result.fileName}; add it to coordinator/src/db/migrations/index.ts.`);
} finally {
  await orm.close();
}
