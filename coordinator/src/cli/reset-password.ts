// `npm run reset-password -- <email>`: sets a new password for an account from the server's
// shell (the new password is read from DECKHAND_NEW_PASSWORD or asked for on the terminal, never
// taken from the command line, where other users could see it) and ends its sessions.
import { createInterface } from 'node:readline/promises';
import { loadConfig } from '../config.ts';
import { UserService } from '../modules/user/user.service.ts';
import { createLogger, openConfiguredDatabase } from '../runtime.ts';

async function readPassword(): Promise<string> {
  if (process.env.DECKHAND_NEW_PASSWORD) return process.env.DECKHAND_NEW_PASSWORD;
  if (!process.stdin.isTTY) {
    throw new Error('Set DECKHAND_NEW_PASSWORD, or run this on a terminal to be asked for the password.');
  }
  const rl = createInterface({ input: process.stdin, output: process.stdout });
  try {
    return await rl.question('New password (at least 8 characters): ');
  } finally {
    rl.close();
  }
}

const email = process.argv[2];
if (!email) {
  console.error('Usage: npm run reset-password -- <email>');
  process.exit(2);
}
try {
  const config = loadConfig();
  const password = await readPassword();
  if (password.length < 8 || password.length > 1024)
    throw new Error('The password must have 8 to 1024 characters.');
  const db = await openConfiguredDatabase(config, createLogger({ ...config, logLevel: 'warn' }), {
    shareRunning: true,
  });
  try {
    await new UserService(db.orm, { mode: 'closed', setupToken: null }, config.sessionTtlMs).resetPassword(
      email,
      password,
    );
  } finally {
    await db.close();
  }
  console.log(`Password changed for ${email.trim().toLowerCase()}; every session of that account has ended.`);
} catch (err) {
  if (err instanceof Error) {
    console.error(err.message);
    process.exit(1);
  }
  throw err;
}
