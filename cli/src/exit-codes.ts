// The CLI's exit codes (documented in `deckhand --help`). A deployment's end state maps onto 0–3 so
// a CI job can tell "the deployment failed" from "the CLI could not do its job" (64, 69).

export const EXIT = {
  success: 0,
  failed: 1,
  cancelled: 2,
  timedOut: 3,
  /** EX_USAGE: bad arguments or configuration; the token refused; unknown project or deployment. */
  usage: 64,
  /** EX_UNAVAILABLE: the coordinator could not be reached, answered an error, or the stream was lost. */
  unavailable: 69,
  /** 128 + SIGINT. */
  interrupted: 130,
} as const;

export const FINAL_STATUSES: ReadonlySet<string> = new Set(['success', 'failed', 'cancelled', 'timed_out']);

export function isFinal(status: string): boolean {
  return FINAL_STATUSES.has(status);
}

/** The exit code for a deployment in `status`: 0–3 once it ended, 0 while queued or running. */
export function exitCodeForStatus(status: string): number {
  switch (status) {
    case 'success':
    case 'queued':
    case 'running':
      return EXIT.success;
    case 'failed':
      return EXIT.failed;
    case 'cancelled':
      return EXIT.cancelled;
    case 'timed_out':
      return EXIT.timedOut;
    default:
      // A state this CLI does not know is not a success.
      return EXIT.failed;
  }
}

/** An error the CLI reports in one line and exits with `exitCode`. */
export class CliError extends Error {
  readonly exitCode: number;

  constructor(message: string, exitCode: number) {
    super(message);
    this.name = 'CliError';
    this.exitCode = exitCode;
  }
}

export class UsageError extends CliError {
  constructor(message: string) {
    super(message, EXIT.usage);
    this.name = 'UsageError';
  }
}
