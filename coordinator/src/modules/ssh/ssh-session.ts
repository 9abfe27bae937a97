// One SSH connection to a target (ssh2): the host key checked against the pinned fingerprint
// before anything is sent (never accepted otherwise), public-key login, keepalives so a dead
// connection is noticed within seconds, and steps run as remote processes — each an exec
// channel running the step wrapper (remote-scripts.ts). A step's stop is the end of its stdin:
// the wrapper then stops its process group on the host, SIGTERM then SIGKILL after the grace;
// a dropped connection ends that stdin too, and one that drops silently stops the heartbeats
// written there, so nothing keeps running unseen.
import type { StepResult } from '@deckhand/protocol';
import ssh2 from 'ssh2';
import type { ServerHostKeyAlgorithm } from 'ssh2';
import {
  fingerprintOf,
  HOST_KEY_KINDS,
  type HostKey,
  hostKeyMismatch,
  keyAlgorithm,
  sameFingerprint,
} from './host-key.ts';
import { ERROR_MARK, HEARTBEAT, PREVIOUS_MARK, stepInput, wrapperCommand } from './remote-scripts.ts';

export interface SshEndpoint {
  host: string;
  port: number;
  username: string;
  /** The pinned `SHA256:…` fingerprint of the host key. */
  hostKeyFingerprint: string;
}

export interface SshTimings {
  /** Connecting, key exchange and login together. */
  connectTimeoutMs: number;
  /** A keepalive every this often; three unanswered ones drop the connection. */
  keepaliveMs: number;
}

/** Unanswered keepalives after which the connection counts as lost (ssh2 gives up on the next). */
const KEEPALIVE_COUNT_MAX = 3;

/** How long a connection may stay silent before this side gives it up: ssh2's keepalive timeout. */
function silenceLimitMs(timings: SshTimings): number {
  return timings.keepaliveMs * (KEEPALIVE_COUNT_MAX + 1);
}

export type ConnectFailure = 'host-key' | 'auth' | 'network' | 'no-such-key';

export class SshConnectError extends Error {
  readonly kind: ConnectFailure;
  /** For `host-key`: the key the host presented. */
  readonly presented: HostKey | undefined;
  constructor(kind: ConnectFailure, message: string, presented?: HostKey) {
    super(message);
    this.kind = kind;
    this.presented = presented;
  }
}

/** `user@host:port` as the log and reasons name the target. */
export function describeEndpoint(e: Pick<SshEndpoint, 'host' | 'port' | 'username'>): string {
  const host = e.host.includes(':') && !e.host.startsWith('[') ? `[${e.host}]` : e.host;
  return `${e.username}@${host}:${e.port}`;
}

/** The host name a deployment's jobs, log entries and reasons use for an SSH target: `user@host:port`. */
export function sshHostName(e: Pick<SshEndpoint, 'host' | 'port' | 'username'>): string {
  return describeEndpoint(e);
}

/** How the pieces of output reach their reader, and when to stop reading (backpressure). */
export interface OutputFlow {
  write(bytes: Buffer): void;
  /** Too much is waiting to be stored: stop reading. */
  readonly over: boolean;
  /** Calls `fn` once the backlog is small again. */
  onceBelow(fn: () => void): void;
}

export interface RemoteResult extends StepResult {
  /** activate only: where `current` pointed before (empty: nowhere). */
  previous?: string;
}

export interface RemoteRun {
  readonly result: Promise<RemoteResult>;
  /** Stops the step's process group on the host; the result then carries `error` as given. */
  stop(error: string): void;
}

/** After the remote process exited, how long a background grandchild may keep its output open. */
const DRAIN_AFTER_EXIT_MS = 1_000;
/** Past the kill grace, how long a stopped step may take to report before its channel is closed. */
const STOP_SLACK_MS = 10_000;

export class SshSession {
  readonly #client: ssh2.Client;
  readonly #timings: SshTimings;
  readonly endpoint: SshEndpoint;
  /** Set once the connection is gone: why. */
  #lost: string | undefined;
  readonly #onLost = new Set<(why: string) => void>();

  private constructor(client: ssh2.Client, endpoint: SshEndpoint, timings: SshTimings) {
    this.#client = client;
    this.#timings = timings;
    this.endpoint = endpoint;
    const lose = (why: string) => {
      if (this.#lost !== undefined) return;
      this.#lost = why;
      for (const fn of this.#onLost) fn(why);
    };
    client.on('error', (err: Error & { level?: string }) =>
      lose(
        err.level === 'client-timeout'
          ? `the host did not answer for ${silenceLimitMs(timings) / 1000} s (keepalives unanswered)`
          : err.message,
      ),
    );
    client.on('close', () => lose('the connection closed'));
  }

  /** Why the connection is gone, or undefined while it is up. */
  get lost(): string | undefined {
    return this.#lost;
  }

  /**
   * Connects and logs in. Rejects with SshConnectError: `host-key` when the host key is not the
   * pinned one (nothing was sent), `auth` when the key was refused, `network` otherwise.
   */
  static async connect(endpoint: SshEndpoint, privateKey: string, timings: SshTimings): Promise<SshSession> {
    try {
      return await SshSession.#attempt(endpoint, privateKey, timings, undefined);
    } catch (first) {
      if (!(first instanceof SshConnectError) || first.kind !== 'host-key') throw first;
      // A host holds one key per algorithm, and the pin may name another than the one negotiated
      // first (e.g. the RSA key's fingerprint): each other algorithm is tried on its own. Only a
      // key that matches the pin is ever accepted.
      for (const algorithms of HOST_KEY_KINDS) {
        if (first.presented && algorithms.includes(first.presented.algorithm)) continue;
        try {
          return await SshSession.#attempt(endpoint, privateKey, timings, algorithms);
        } catch (err) {
          if (err instanceof SshConnectError && (err.kind === 'host-key' || err.kind === 'no-such-key'))
            continue;
          throw err;
        }
      }
      throw first;
    }
  }

  static #attempt(
    endpoint: SshEndpoint,
    privateKey: string,
    timings: SshTimings,
    hostKeyAlgorithms: string[] | undefined,
  ): Promise<SshSession> {
    return new Promise((resolve, reject) => {
      const client = new ssh2.Client();
      let presented: HostKey | undefined;
      // How far a connect that timed out got, for its reason.
      let tcpConnected = false;
      let handshaken = false;
      client.once('connect', () => (tcpConnected = true));
      client.once('handshake', () => (handshaken = true));
      let settled = false;
      const fail = (err: SshConnectError) => {
        if (settled) return;
        settled = true;
        client.end();
        reject(err);
      };
      client.once('ready', () => {
        if (settled) return;
        settled = true;
        client.removeAllListeners('error');
        client.removeAllListeners('close');
        resolve(new SshSession(client, endpoint, timings));
      });
      client.on('error', (err: Error & { level?: string }) => {
        if (presented && !sameFingerprint(presented.fingerprint, endpoint.hostKeyFingerprint)) {
          fail(
            new SshConnectError(
              'host-key',
              hostKeyMismatch(presented, endpoint.hostKeyFingerprint),
              presented,
            ),
          );
        } else if (hostKeyAlgorithms && !presented) {
          // Asked for one kind of key only: a host without it hangs up before showing any.
          fail(new SshConnectError('no-such-key', `the host has no ${hostKeyAlgorithms[0]} key`));
        } else if (err.level === 'client-authentication') {
          fail(
            new SshConnectError(
              'auth',
              `the host refused the project's private key (authentication failed): add its public half to ~${endpoint.username}/.ssh/authorized_keys on the host`,
            ),
          );
        } else if (err.level === 'client-timeout') {
          const where = !tcpConnected
            ? `no TCP connection to ${endpoint.host}:${endpoint.port}`
            : !handshaken
              ? 'the host accepted the TCP connection but never completed an SSH handshake'
              : 'the login did not complete';
          fail(
            new SshConnectError(
              'network',
              `could not connect over SSH within ${timings.connectTimeoutMs / 1000} s: ${where}`,
            ),
          );
        } else {
          fail(new SshConnectError('network', `could not connect over SSH: ${err.message}`));
        }
      });
      client.on('close', () =>
        fail(
          hostKeyAlgorithms && !presented
            ? new SshConnectError('no-such-key', `the host has no ${hostKeyAlgorithms[0]} key`)
            : new SshConnectError(
                'network',
                'could not connect over SSH: the connection closed during login',
              ),
        ),
      );
      try {
        client.connect({
          host: endpoint.host.replace(/^\[(.*)\]$/, '$1'),
          port: endpoint.port,
          username: endpoint.username,
          privateKey,
          readyTimeout: timings.connectTimeoutMs,
          keepaliveInterval: timings.keepaliveMs,
          keepaliveCountMax: KEEPALIVE_COUNT_MAX,
          // Only the key; never a password prompt, an agent or keyboard-interactive.
          tryKeyboard: false,
          ...(hostKeyAlgorithms
            ? { algorithms: { serverHostKey: hostKeyAlgorithms as ServerHostKeyAlgorithm[] } }
            : {}),
          hostVerifier: (key: Buffer) => {
            presented = { fingerprint: fingerprintOf(key), algorithm: keyAlgorithm(key) };
            return sameFingerprint(presented.fingerprint, endpoint.hostKeyFingerprint);
          },
        });
      } catch (err) {
        // ssh2 throws at once for a key it cannot parse.
        fail(
          new SshConnectError('auth', `the project's private key cannot be used: ${(err as Error).message}`),
        );
      }
    });
  }

  end(): void {
    this.#client.end();
  }

  /**
   * Runs a step's script on the host: in `dir` (relative to the login's home), with `env`, its
   * output (stdout and stderr in order) to `output`. Never rejects.
   */
  run(opts: {
    dir: string;
    script: string;
    env: Record<string, string>;
    graceMs: number;
    output: OutputFlow;
    /** One of Deckhand's own scripts, which may report to the runner on fd 4 (remote-scripts.ts). */
    markers?: boolean;
  }): RemoteRun {
    let stopError: string | undefined;
    let stopNow: () => void = () => {};
    const result = new Promise<RemoteResult>((resolve) => {
      if (this.#lost !== undefined) {
        resolve({ exitCode: null, signal: null, error: `the SSH connection was lost: ${this.#lost}` });
        return;
      }
      let settled = false;
      let channel: ssh2.ClientChannel | undefined;
      let exit: { code: number | null; signal: string | null } | undefined;
      let drainTimer: NodeJS.Timeout | undefined;
      let stopTimer: NodeJS.Timeout | undefined;
      let heartbeat: NodeJS.Timeout | undefined;
      let paused = false;
      let stderrLine = '';
      let markedError: string | undefined;
      let previous: string | undefined;

      const finish = () => {
        if (settled) return;
        settled = true;
        clearTimeout(drainTimer);
        clearTimeout(stopTimer);
        clearInterval(heartbeat);
        this.#onLost.delete(onLost);
        flushStderr();
        channel?.removeAllListeners('data');
        channel?.stderr.removeAllListeners('data');
        let r: RemoteResult;
        if (exit) {
          r = { exitCode: exit.code, signal: exit.signal };
          if (markedError !== undefined) r = { exitCode: null, signal: null, error: markedError };
        } else if (this.#lost !== undefined) {
          r = { exitCode: null, signal: null, error: `the SSH connection was lost: ${this.#lost}` };
        } else {
          r = { exitCode: null, signal: null, error: 'the SSH channel closed without an exit status' };
        }
        if (stopError !== undefined) r = { ...r, error: stopError };
        if (previous !== undefined) r.previous = previous;
        resolve(r);
      };
      const onLost = () => finish();
      this.#onLost.add(onLost);

      const stderrText = (text: string) => {
        if (text.startsWith(ERROR_MARK)) markedError = text.slice(ERROR_MARK.length);
        else if (text.startsWith(PREVIOUS_MARK)) previous = text.slice(PREVIOUS_MARK.length);
        else opts.output.write(Buffer.from(`${text}\n`));
      };
      const flushStderr = () => {
        if (stderrLine !== '') stderrText(stderrLine);
        stderrLine = '';
      };
      const armDrain = () => {
        if (!exit || settled || drainTimer || (paused && stopError === undefined)) return;
        drainTimer = setTimeout(() => {
          channel?.close();
          finish();
        }, DRAIN_AFTER_EXIT_MS);
        drainTimer.unref();
      };
      const resume = () => {
        paused = false;
        if (settled) return;
        channel?.resume();
        armDrain();
      };

      stopNow = () => {
        if (!channel || settled) return;
        // End of stdin: the wrapper stops the group (TERM, grace, KILL) and then exits.
        clearInterval(heartbeat);
        channel.end();
        stopTimer = setTimeout(() => {
          channel?.close();
          finish();
        }, opts.graceMs + STOP_SLACK_MS);
        stopTimer.unref();
        if (paused) resume();
      };

      // The host's silence limit is this side's, so both ends give a silent connection up together.
      const command = wrapperCommand(opts.graceMs, opts.markers === true, silenceLimitMs(this.#timings));
      this.#client.exec(command, (err, ch) => {
        if (err) {
          if (!settled) {
            settled = true;
            this.#onLost.delete(onLost);
            resolve({
              exitCode: null,
              signal: null,
              error: stopError ?? `could not start the step over SSH: ${err.message}`,
            });
          }
          return;
        }
        channel = ch;
        if (settled) {
          ch.close();
          return;
        }
        ch.on('data', (b: Buffer) => {
          opts.output.write(b);
          if (opts.output.over && !paused) {
            paused = true;
            ch.pause();
            opts.output.onceBelow(resume);
          }
        });
        ch.stderr.on('data', (b: Buffer) => {
          const lines = (stderrLine + b.toString('utf8')).split('\n');
          stderrLine = lines.pop() ?? '';
          for (const line of lines) stderrText(line);
        });
        ch.on('exit', (code: number | null, signal?: string) => {
          exit = { code: code ?? null, signal: signal ? `SIG${signal}` : null };
          armDrain();
        });
        ch.on('close', () => finish());
        ch.write(stepInput(opts.dir, opts.script, opts.env));
        heartbeat = setInterval(() => ch.write(HEARTBEAT), this.#timings.keepaliveMs);
        heartbeat.unref();
        if (stopError !== undefined) stopNow();
      });
    });
    return {
      result,
      stop: (error) => {
        if (stopError !== undefined) return;
        stopError = error;
        stopNow();
      },
    };
  }
}
