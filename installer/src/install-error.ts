// The installer's own error, thrown from every part of it: its kind says whose fault a failure is
// (the CLI picks its exit code by it), its message what to do. It lives in a file of its own so
// that ssh-remote.ts and host-layout.ts can throw it without importing installer.ts, which
// imports them: a class extended at load time (HostKeyRefused) cannot come through that cycle.

/**
 * Why an installation stopped: `usage` — what was asked cannot be done as asked (a host key not
 * confirmed or not the pinned one, a key ssh cannot use); `host` — the host lacks something or a
 * step failed there; `coordinator` — the coordinator could not serve the agent.
 */
export type InstallErrorKind = 'usage' | 'host' | 'coordinator';

export class InstallError extends Error {
  readonly kind: InstallErrorKind;
  constructor(kind: InstallErrorKind, message: string) {
    super(message);
    this.name = 'InstallError';
    this.kind = kind;
  }
}

export const hostError = (message: string) => new InstallError('host', message);
