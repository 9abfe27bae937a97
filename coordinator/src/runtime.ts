// What server.ts and the command-line tools share: the logger, and a database (the configured
// server, or the embedded one under the data folder) opened with every migration applied.
import { resolve } from 'node:path';
import type { MikroORM } from '@mikro-orm/postgresql';
import pino, { type Logger } from 'pino';
import type { Config } from './config.ts';
import {
  type EmbeddedPostgres,
  runningEmbeddedPostgresUrl,
  startEmbeddedPostgres,
} from './db/embedded-postgres.ts';
import { migrate, openDatabase } from './db/orm.ts';
import { loggerOptions } from './plugins/logger.ts';

export function createLogger(config: Config): Logger {
  return pino(loggerOptions(config.logLevel));
}

export interface Database {
  orm: MikroORM;
  embedded: EmbeddedPostgres | null;
  close(): Promise<void>;
}

/**
 * `shareRunning`: a command-line tool run beside a live coordinator uses that coordinator's
 * embedded server rather than failing to start a second one on the same data folder.
 */
export async function openConfiguredDatabase(
  config: Config,
  log: Logger,
  opts: { shareRunning?: boolean } = {},
): Promise<Database> {
  let embedded: EmbeddedPostgres | null = null;
  let url = config.databaseUrl;
  if (!url && opts.shareRunning) {
    url =
      (await runningEmbeddedPostgresUrl({ dataDir: config.dataDir, port: config.embeddedPostgresPort })) ??
      undefined;
  }
  if (!url) {
    const dataDir = resolve(config.dataDir);
    log.info(
      { dataDir, port: config.embeddedPostgresPort },
      'no DATABASE_URL: starting the embedded PostgreSQL',
    );
    embedded = await startEmbeddedPostgres({
      dataDir,
      port: config.embeddedPostgresPort,
      log: log.child({ component: 'embedded-postgres' }),
    });
    url = embedded.url;
  }
  try {
    const orm = await openDatabase({
      url,
      poolMax: config.databasePoolMax,
      log: log.child({ component: 'orm' }),
    });
    const applied = await migrate(orm);
    if (applied.length) log.info({ migrations: applied }, 'database migrated');
    return {
      orm,
      embedded,
      async close() {
        await orm.close();
        await embedded?.stop();
      },
    };
  } catch (err) {
    await embedded?.stop();
    throw err;
  }
}
