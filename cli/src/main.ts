// `deckhand`: the command-line client (see `deckhand --help`). Wires `run` to the process: its
// arguments, streams, environment and signals; exits with the code `run` returns.
import { run } from './cli.ts';

type Handler = (signal: NodeJS.Signals) => void;
const handlers = new Set<Handler>();

// While a command waits on a deployment it decides what Ctrl-C means; otherwise it stops at once.
function onSignal(signal: NodeJS.Signals): void {
  if (handlers.size === 0) process.exit(signal === 'SIGTERM' ? 143 : 130);
  for (const handler of [...handlers]) handler(signal);
}
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);

// `deckhand logs <id> | head`: a closed pipe is not an error worth a stack trace.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(0);
    throw err;
  });
}

const code = await run(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
  onInterrupt(handler) {
    handlers.add(handler);
    return () => handlers.delete(handler);
  },
});

// Let what was written reach a pipe before exiting (pending requests would otherwise keep us).
await new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
await new Promise<void>((resolve) => process.stderr.write('', () => resolve()));
process.exit(code);
