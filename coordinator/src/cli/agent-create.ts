// `npm run agent:create -- --name <name> [--labels a,b] --token-file <path>`: registers an agent
// from the server's shell and leaves its token in a file (mode 600) for an agent started beside
// the coordinator — docker-compose.yml's agent-token service runs it before its agent. Nothing
// crosses the network: it opens the database as reset-password does. The token is never printed.
//
// Run again, it keeps what works: a file whose token still authenticates the agent of that name is
// left alone; a file whose agent was revoked (or is missing) is replaced by a new registration.
// Exit codes: 0 done (or nothing to do), 64 bad arguments, 1 anything else.
import { randomBytes } from 'node:crypto';
import { type FileHandle, open, readFile, rename, rm } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { loadConfig } from '../config.ts';
import type { Actor } from '../modules/common/actor.ts';
import { ConflictError } from '../modules/common/errors.ts';
import { AGENT_LABEL, AGENT_LABELS_MAX, AGENT_NAME } from '../modules/agent/agent.schema.ts';
import { AgentService } from '../modules/agent/agent.service.ts';
import { createLogger, type Database, openConfiguredDatabase } from '../runtime.ts';

const USAGE = 'Usage: npm run agent:create -- --name <name> [--labels a,b] --token-file <path>';
const EX_USAGE = 64;

// The rules of POST /agents' body, which this command must not loosen.
const NAME = new RegExp(AGENT_NAME.pattern);
const LABEL = new RegExp(AGENT_LABEL.pattern);

const ACTOR: Actor = { type: 'system', id: null, name: 'agent-create command', role: 'admin', userId: null };

class UsageError extends Error {}

function parse(argv: string[]): { name: string; labels: string[]; tokenFile: string } {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        name: { type: 'string' },
        labels: { type: 'string' },
        'token-file': { type: 'string' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const name = values.name?.trim() ?? '';
  if (!name) throw new UsageError('Give the agent a name: --name <name>');
  if (name.length > AGENT_NAME.maxLength || !NAME.test(name)) {
    throw new UsageError(
      `Not an agent name: ${name} (up to 100 letters, digits, ".", "_" or "-", starting with a letter or digit)`,
    );
  }
  const labels = [
    ...new Set(
      (values.labels ?? '')
        .split(',')
        .map((l) => l.trim())
        .filter(Boolean),
    ),
  ];
  for (const label of labels) {
    if (label.length > AGENT_LABEL.maxLength || !LABEL.test(label)) {
      throw new UsageError(
        `Not a label: ${label} (up to 63 letters, digits, "_", ".", ":" or "-", starting with a letter or digit)`,
      );
    }
  }
  if (labels.length > AGENT_LABELS_MAX) throw new UsageError(`At most ${AGENT_LABELS_MAX} labels`);
  const tokenFile = values['token-file']?.trim() ?? '';
  if (!tokenFile) throw new UsageError('Say where to write the token: --token-file <path>');
  return { name, labels, tokenFile: resolve(tokenFile) };
}

/** The token in the file, or null when there is no file (or nothing in it). */
async function readToken(file: string): Promise<string | null> {
  try {
    return (await readFile(file, 'utf8')).trim() || null;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new Error(`Cannot read ${file}: ${(err as Error).message}`, { cause: err });
  }
}

async function main(): Promise<number> {
  let args;
  try {
    args = parse(process.argv.slice(2));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    console.error(`${err.message}\n${USAGE}`);
    return EX_USAGE;
  }
  const { name, labels, tokenFile } = args;
  const config = loadConfig();
  const existing = await readToken(tokenFile);
  // The new token goes to a temporary file beside the old one, renamed over it once complete. It
  // is created first, so a folder that cannot be written to fails before the database is opened.
  const temp = join(dirname(tokenFile), `.${basename(tokenFile)}.${randomBytes(6).toString('hex')}.tmp`);
  let handle: FileHandle | undefined;
  try {
    handle = await open(temp, 'wx', 0o600);
  } catch (err) {
    throw new Error(`Cannot write the token next to ${tokenFile}: ${(err as Error).message}`, { cause: err });
  }
  let db: Database | undefined;
  let created: Awaited<ReturnType<AgentService['create']>> | undefined;
  let agents: AgentService | undefined;
  try {
    // The umask may only narrow the mode given to open; this makes it exactly 600.
    await handle.chmod(0o600);
    db = await openConfiguredDatabase(config, createLogger({ ...config, logLevel: 'warn' }), {
      shareRunning: true,
    });
    // Presence is not asked here, so the online window does not matter.
    agents = new AgentService(db.orm, 0);
    if (existing) {
      const holder = await agents.authenticate(existing);
      if (holder?.name === name) {
        console.log(`Agent ${name} is registered and the token in ${tokenFile} still works: nothing to do.`);
        return 0;
      }
      console.log(
        holder
          ? `The token in ${tokenFile} belongs to agent ${holder.name}, not ${name}: registering ${name}.`
          : `The token in ${tokenFile} no longer authenticates an agent (revoked?): registering ${name} again.`,
      );
    }
    try {
      created = await agents.create({ name, labels }, ACTOR);
    } catch (err) {
      if (err instanceof ConflictError) {
        throw new Error(
          `An agent named ${name} already exists and ${tokenFile} does not hold its token: revoke it (Agents page, or DELETE /agents/<id>) or choose another --name.`,
          { cause: err },
        );
      }
      throw err;
    }
    await handle.writeFile(`${created.token}\n`);
    await handle.sync();
    await handle.close();
    handle = undefined;
    await rename(temp, tokenFile);
    console.log(
      `Registered agent ${name}${labels.length ? ` (labels: ${labels.join(', ')})` : ''}; its token is in ${tokenFile} (mode 600).`,
    );
    return 0;
  } catch (err) {
    // A registered agent whose token was lost could never connect: take it back.
    if (created && agents) await agents.delete(created.agent.id, ACTOR).catch(() => {});
    throw err;
  } finally {
    await handle?.close().catch(() => {});
    // Gone after the rename; otherwise not needed.
    await rm(temp, { force: true });
    await db?.close();
  }
}

try {
  process.exitCode = await main();
} catch (err) {
  if (!(err instanceof Error)) throw err;
  console.error(err.message);
  process.exitCode = 1;
}
