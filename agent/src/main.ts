// `deckhand-agent`: the daemon on a deploy target. Reads its configuration (flags, environment),
// connects to the coordinator and runs the jobs it is given until SIGINT/SIGTERM (a graceful stop:
// running jobs are cancelled) or a fatal refusal (exit code 2, with what to do).
import { readFileSync } from 'node:fs';
import pino from 'pino';
import { Agent } from './agent.ts';
import { AgentConfigError, type AgentConfig, loadAgentConfig } from './config.ts';

const EXIT_FATAL = 2;

let config: AgentConfig;
try {
  config = loadAgentConfig(process.argv.slice(2), process.env);
} catch (err) {
  if (err instanceof AgentConfigError || (err instanceof Error && 'code' in err)) {
    console.error(err.message);
    process.exit(EXIT_FATAL);
  }
  throw err;
}

const agentVersion = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

// Nothing logged carries the token or a job's environment; the redaction is a second line.
const log = pino({
  level: process.env.LOG_LEVEL ?? 'info',
  base: { pid: process.pid },
  redact: { paths: ['token', '*.token', 'env', '*.env', 'headers.authorization'], censor: '[redacted]' },
});

const agent = new Agent({
  config,
  log,
  agentVersion,
  graceMs: config.killGraceMs,
  onFatal: (message) => {
    log.fatal(message);
    console.error(`deckhand-agent: ${message}`);
    process.exit(EXIT_FATAL);
  },
});

let signalled = false;
function onSignal(signal: NodeJS.Signals): void {
  if (signalled) {
    // A second signal: no more waiting.
    log.warn({ signal }, 'stopping now');
    process.exit(1);
  }
  signalled = true;
  log.info({ signal }, 'stopping: cancelling running jobs');
  void agent.stop(`the agent received ${signal}`).then(() => {
    log.info('stopped');
    process.exit(0);
  });
}
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);
// Steps run in process groups of their own, so they would outlive an agent that exits abruptly.
process.on('exit', () => agent.killAllNow());

log.info(
  {
    url: config.url.origin + config.url.pathname,
    workDir: config.workDir,
    labels: config.labels,
    agentVersion,
  },
  'deckhand-agent starting',
);
agent.start();
