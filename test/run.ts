// The test command (`npm test`; extra arguments go to vitest, e.g. `npm test -- test/unit`).
//
// Without DATABASE_URL it starts the embedded PostgreSQL (.data/test-postgres, port 54330) and
// hands its URL to vitest; tests create their own databases from it (test/helpers/database.ts).
// vitest runs as a child process with the default reporter on the terminal and the JSON reporter
// written to a temp file; the very last line printed is `N passed, N failed`. The exit code is
// vitest's (non-zero when the JSON report is missing). SIGINT/SIGTERM go to vitest, and the
// embedded server is still stopped.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type EmbeddedPostgres, startEmbeddedPostgres } from '../coordinator/src/db/embedded-postgres.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const EMBEDDED_PORT = 54330;

let child: ChildProcess | undefined;
let interrupted: NodeJS.Signals | undefined;
let killTimer: NodeJS.Timeout | undefined;

function onSignal(signal: NodeJS.Signals): void {
  interrupted ??= signal;
  if (child && child.exitCode === null && child.signalCode === null) {
    child.kill(signal);
    // vitest normally finishes promptly; do not hang on it forever.
    killTimer ??= setTimeout(() => child?.kill('SIGKILL'), 10_000);
  }
}
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);

interface JsonReport {
  numPassedTests?: number;
  numFailedTests?: number;
  testResults?: { status?: string; assertionResults?: { status?: string }[] }[];
}

function summarise(reportFile: string, exitCode: number): { passed: number; failed: number } {
  if (!existsSync(reportFile)) return { passed: 0, failed: 1 };
  let report: JsonReport;
  try {
    report = JSON.parse(readFileSync(reportFile, 'utf8')) as JsonReport;
  } catch {
    return { passed: 0, failed: 1 };
  }
  const passed = report.numPassedTests ?? 0;
  let failed = report.numFailedTests ?? 0;
  // A file that fails before its tests run (import error, failing beforeAll) has no failed test;
  // count it, so that a failing run never reads "0 failed".
  for (const file of report.testResults ?? []) {
    if (file.status === 'failed' && !file.assertionResults?.some((t) => t.status === 'failed')) failed += 1;
  }
  if (exitCode !== 0 && failed === 0) failed = 1;
  return { passed, failed };
}

async function main(): Promise<number> {
  let embedded: EmbeddedPostgres | undefined;
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'deckhand-test-'));
  const reportFile = path.join(tmp, 'vitest.json');
  let exitCode: number;
  try {
    const env = { ...process.env };
    if (!env.DATABASE_URL) {
      const dataDir = path.join(root, '.data', 'test-postgres');
      const started = Date.now();
      embedded = await startEmbeddedPostgres({
        dataDir,
        port: EMBEDDED_PORT,
        database: 'postgres',
        log: {
          info() {},
          debug() {},
          warn(obj, msg) {
            console.error(`[embedded-postgres] ${msg ?? ''} ${JSON.stringify(obj)}`);
          },
        },
      }).catch((err: unknown) => {
        throw new Error(
          `could not start the embedded PostgreSQL: ${err instanceof Error ? err.message : String(err)}`,
        );
      });
      env.DATABASE_URL = embedded.url;
      console.log(
        `Embedded PostgreSQL on port ${EMBEDDED_PORT} (${path.relative(root, dataDir)}), ` +
          `ready in ${Date.now() - started} ms`,
      );
    }
    if (interrupted) {
      exitCode = 128 + (os.constants.signals[interrupted] ?? 2);
    } else {
      const args = [
        path.join(root, 'node_modules', '.bin', 'vitest'),
        'run',
        '--reporter=default',
        '--reporter=json',
        `--outputFile.json=${reportFile}`,
        ...process.argv.slice(2),
      ];
      const running = spawn(process.execPath, args, { cwd: root, env, stdio: 'inherit' });
      child = running;
      exitCode = await new Promise<number>((resolve) => {
        running.on('error', (err) => {
          console.error(`could not run vitest: ${err.message}`);
          resolve(1);
        });
        running.on('exit', (code, signal) => {
          resolve(code ?? 128 + (signal ? (os.constants.signals[signal] ?? 1) : 1));
        });
      });
      clearTimeout(killTimer);
    }
  } catch (err) {
    console.error(err instanceof Error ? err.message : err);
    exitCode = 1;
  } finally {
    if (embedded) {
      await embedded.stop().catch((err: unknown) => {
        console.error(`could not stop the embedded PostgreSQL: ${String(err)}`);
      });
    }
  }
  const reportMissing = !existsSync(reportFile);
  const { passed, failed } = summarise(reportFile, exitCode);
  rmSync(tmp, { recursive: true, force: true });
  console.log(`${passed} passed, ${failed} failed`);
  return reportMissing && exitCode === 0 ? 1 : exitCode;
}

// Exit explicitly: nothing may keep the process alive after the summary line.
process.exit(await main());
