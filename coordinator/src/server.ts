// Starts the coordinator for real: configuration, database (embedded when DATABASE_URL is unset),
// migrations, root secret, HTTP server; and stops it gracefully on SIGINT/SIGTERM.
import { buildApp, deriveSetupToken, publicUrlOf, setupTokenNeeded } from './app.ts';
import { ConfigError, loadConfig } from './config.ts';
import { loadRootSecret } from './modules/common/root-secret.ts';
import { User } from './modules/user/user.entity.ts';
import { createLogger, openConfiguredDatabase } from './runtime.ts';

let config: ReturnType<typeof loadConfig>;
try {
  config = loadConfig();
} catch (err) {
  if (err instanceof ConfigError) {
    console.error(err.message);
    process.exit(78);
  }
  throw err;
}
const log = createLogger(config);

const root = await loadRootSecret(config.secret, config.dataDir);
if (root.generated)
  log.info({ path: root.path }, 'generated the root secret (keep this file; replicas need DECKHAND_SECRET)');

let db: Awaited<ReturnType<typeof openConfiguredDatabase>>;
try {
  db = await openConfiguredDatabase(config, log);
} catch (err) {
  log.fatal(
    { err },
    'could not open the database: check DATABASE_URL, or remove it to use the embedded PostgreSQL',
  );
  process.exit(1);
}

const app = await buildApp({ config, orm: db.orm, rootSecret: root.secret, logger: log });

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  log.info({ signal }, 'shutting down: finishing requests in flight');
  const force = setTimeout(() => {
    log.error('shutdown took longer than 15 s: exiting');
    process.exit(1);
  }, 15_000);
  force.unref();
  try {
    await app.close();
    log.info('HTTP server closed: closing the database');
    await db.close();
    log.info('stopped');
    process.exit(0);
  } catch (err) {
    log.error({ err }, 'error during shutdown');
    process.exit(1);
  }
}
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGTERM', () => void shutdown('SIGTERM'));

try {
  await app.listen({ host: config.host, port: config.port });
} catch (err) {
  log.fatal(
    { err },
    `could not listen on ${config.host}:${config.port}: is another process using it? Set PORT to change it`,
  );
  await db.close();
  process.exit(1);
}
const address = app.server.address();
const port = typeof address === 'object' && address ? address.port : config.port;
log.info({ url: publicUrlOf(config, port) }, 'Deckhand is ready');
if (setupTokenNeeded(config) && (await db.orm.em.fork().count(User, {})) === 0) {
  // Printed on purpose: whoever reads the server's own log may create the first (admin) account.
  log.warn(
    `first run on a non-loopback address: register the admin account with setup_token ${config.setupToken ?? deriveSetupToken(root.secret)}`,
  );
}
