// `npm run db:migrate`: applies pending migrations to the configured database and exits (the
// coordinator also does this at start-up; this is for deploy pipelines that migrate first).
import { loadConfig } from '../config.ts';
import { createLogger, openConfiguredDatabase } from '../runtime.ts';

const config = loadConfig();
const log = createLogger(config);
const db = await openConfiguredDatabase(config, log, { shareRunning: true });
await db.close();
log.info('database is up to date');
