// The connection loop: connect to the coordinator's agent socket, say hello, wait for welcome,
// hand job messages to the runner, watch the heartbeat, and reconnect with backoff until told
// to stop or a fatal close (retryable.ts decides which). Everything sent goes through one outbox
// (outbox.ts) in order; while not connected it waits and leaves after the next welcome, behind
// the re-sent unacknowledged output. Writing is flow-controlled: at most WRITE_WINDOW_BYTES may
// sit in the socket's send buffer, so a slow network holds output in the spool, not in memory.
import {
  type AgentMessage,
  CloseCode,
  type CoordinatorMessage,
  decodeCoordinatorFrame,
  encodeFrame,
  type Hello,
  MAX_FRAME_BYTES,
  PROTOCOL_VERSION,
  type Welcome,
} from '@deckhand/protocol';
import type { Logger } from 'pino';
import WebSocket from 'ws';
import { agentSocketUrl } from './coordinator-url.ts';
import { HeartbeatWatchdog } from './heartbeat.ts';
import { messageEntry, Outbox, type OutboxEntry } from './outbox.ts';
import { Backoff, classifyDisconnect, type Disconnect } from './retryable.ts';

/** The messages that concern jobs (everything after the handshake). */
export type JobMessage = Exclude<CoordinatorMessage, { type: 'welcome' | 'reject' }>;

export interface ConnectionOptions {
  /** The coordinator's base URL (http(s) or ws(s)); `/agent/ws` is appended. */
  url: URL;
  token: string;
  log: Logger;
  /** The hello to send on each new connection (running jobs change between connections). */
  hello: () => Hello;
  /**
   * After each welcome: what the old connection may have lost, to be sent before anything waiting
   * in the outbox.
   */
  onReady: (welcome: Welcome) => OutboxEntry[];
  /** A welcomed connection ended (the agent is cut off until the next welcome). */
  onDown?: () => void;
  onMessage: (message: JobMessage) => void;
  /** A close that must not be retried: `message` says what to do. The connection has stopped. */
  onFatal: (message: string) => void;
  welcomeTimeoutMs?: number;
  backoff?: Backoff;
}

type State = 'idle' | 'connecting' | 'handshaking' | 'ready' | 'waiting' | 'stopped';

/** What happened to one socket, gathered from its events for the close decision. */
interface Attempt {
  httpStatus?: number;
  localReason?: string;
  rejectReason?: string;
  error?: Error;
}

const WELCOME_TIMEOUT_MS = 10_000;
const CLOSE_TIMEOUT_MS = 2_000;
/** Bytes of frames handed to the socket and not yet flushed to the kernel, at most. */
export const WRITE_WINDOW_BYTES = 1024 * 1024;

export class AgentConnection {
  readonly #opts: ConnectionOptions;
  readonly #log: Logger;
  readonly #backoff: Backoff;
  readonly #welcomeTimeoutMs: number;
  readonly #outbox = new Outbox();
  #state: State = 'idle';
  #ws: WebSocket | undefined;
  #reconnectTimer: NodeJS.Timeout | undefined;
  #welcomeTimer: NodeJS.Timeout | undefined;
  #watchdog: HeartbeatWatchdog | undefined;
  #onStopped: (() => void) | undefined;
  /** Bytes handed to the current socket whose write has not completed. */
  #inFlight = 0;

  constructor(opts: ConnectionOptions) {
    this.#opts = opts;
    this.#log = opts.log;
    this.#backoff = opts.backoff ?? new Backoff();
    this.#welcomeTimeoutMs = opts.welcomeTimeoutMs ?? WELCOME_TIMEOUT_MS;
  }

  get ready(): boolean {
    return this.#state === 'ready';
  }

  start(): void {
    if (this.#state === 'idle') this.#connect();
  }

  /** Sends when welcomed (and the socket takes more), else queues; order is kept either way. */
  send(message: AgentMessage, onWritten?: () => void): void {
    this.enqueue(messageEntry(message, onWritten));
  }

  /** Queues an entry (e.g. lazy output) behind everything sent before it. */
  enqueue(entry: OutboxEntry): void {
    this.#outbox.push(entry);
    this.#pump();
  }

  /** Stops reconnecting and closes the connection with `code`; resolves once it is closed. */
  stop(code: number = CloseCode.NORMAL, reason = 'agent stopping'): Promise<void> {
    const ws = this.#ws;
    this.#state = 'stopped';
    clearTimeout(this.#reconnectTimer);
    clearTimeout(this.#welcomeTimer);
    this.#watchdog?.stop();
    if (!ws || ws.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => ws.terminate(), CLOSE_TIMEOUT_MS);
      this.#onStopped = () => {
        clearTimeout(timer);
        resolve();
      };
      if (ws.readyState === WebSocket.OPEN) ws.close(code, reason);
      else ws.terminate();
    });
  }

  #connect(): void {
    this.#state = 'connecting';
    const url = agentSocketUrl(this.#opts.url);
    this.#log.debug({ url: url.href }, 'connecting');
    const ws = new WebSocket(url, {
      headers: { Authorization: `Bearer ${this.#opts.token}` },
      maxPayload: MAX_FRAME_BYTES,
      handshakeTimeout: this.#welcomeTimeoutMs,
      // A zero masking key: ws then skips XOR-ing every byte on both ends. Masking protects
      // proxies from scripts a browser runs on behalf of strangers; an agent runs none.
      generateMask: (mask) => mask.fill(0),
    });
    this.#ws = ws;
    this.#inFlight = 0;
    const attempt: Attempt = {};

    ws.on('unexpected-response', (_req, res) => {
      attempt.httpStatus = res.statusCode ?? 0;
      res.resume();
      ws.terminate();
    });
    ws.on('open', () => {
      if (this.#state !== 'connecting') return;
      this.#state = 'handshaking';
      ws.send(encodeFrame(this.#opts.hello()));
      this.#welcomeTimer = setTimeout(
        () => this.#end(ws, attempt, `no welcome within ${this.#welcomeTimeoutMs} ms`),
        this.#welcomeTimeoutMs,
      );
    });
    ws.on('message', (data, isBinary) => this.#onFrame(ws, attempt, isBinary ? null : data));
    ws.on('ping', () => this.#watchdog?.seen());
    ws.on('error', (err) => {
      attempt.error = err;
    });
    ws.on('close', (code, reason) => this.#onClose(ws, attempt, code, reason.toString('utf8')));
  }

  #onFrame(ws: WebSocket, attempt: Attempt, raw: unknown): void {
    if (ws !== this.#ws) return;
    this.#watchdog?.seen();
    const decoded = decodeCoordinatorFrame(raw);
    if (!decoded.ok) {
      this.#log.warn({ error: decoded.error }, 'bad frame from the coordinator: closing the connection');
      this.#end(ws, attempt, `bad frame from the coordinator: ${decoded.error}`, decoded.code);
      return;
    }
    const message = decoded.message;
    if (message.type === 'reject') {
      // The coordinator closes the connection next; the reason goes into that decision.
      attempt.rejectReason = message.reason;
      this.#log.error({ reason: message.reason }, 'the coordinator rejected this agent');
      return;
    }
    if (message.type === 'welcome') {
      if (this.#state !== 'handshaking') {
        this.#end(ws, attempt, 'welcome out of order', CloseCode.BAD_FRAME);
        return;
      }
      this.#onWelcome(ws, attempt, message);
      return;
    }
    if (this.#state !== 'ready') {
      this.#end(ws, attempt, `${message.type} before welcome`, CloseCode.BAD_FRAME);
      return;
    }
    try {
      this.#opts.onMessage(message);
    } catch (err) {
      this.#log.error({ err, type: message.type }, 'handling a coordinator message failed');
    }
  }

  #onWelcome(ws: WebSocket, attempt: Attempt, welcome: Welcome): void {
    clearTimeout(this.#welcomeTimer);
    this.#backoff.reset();
    if (welcome.protocolVersion !== PROTOCOL_VERSION) {
      this.#log.warn(
        { ours: PROTOCOL_VERSION, theirs: welcome.protocolVersion },
        'the coordinator welcomed a different protocol version',
      );
    }
    this.#watchdog = new HeartbeatWatchdog({
      heartbeatMs: welcome.heartbeatMs,
      onDead: (silentMs) => this.#end(ws, attempt, `nothing from the coordinator for ${silentMs} ms`),
    });
    this.#log.info(
      { agentId: welcome.agentId, agentName: welcome.agentName, heartbeatMs: welcome.heartbeatMs },
      'connected',
    );
    let resend: OutboxEntry[] = [];
    try {
      resend = this.#opts.onReady(welcome);
    } catch (err) {
      this.#log.error({ err }, 'collecting unacknowledged output to re-send failed');
    }
    this.#outbox.unshift(resend);
    this.#state = 'ready';
    this.#pump();
  }

  /** Writes queued frames while welcomed and the socket's send buffer has room. */
  #pump(): void {
    const ws = this.#ws;
    if (this.#state !== 'ready' || !ws || ws.readyState !== WebSocket.OPEN) return;
    while (this.#inFlight < WRITE_WINDOW_BYTES) {
      const next = this.#outbox.take();
      if (!next) return;
      const frame = encodeFrame(next.message);
      const size = typeof frame === 'string' ? Buffer.byteLength(frame) : frame.length;
      this.#inFlight += size;
      ws.send(frame, () => {
        if (ws !== this.#ws) return;
        this.#inFlight -= size;
        // Called from the socket's write callback: continue on a fresh tick, not inside it.
        if (this.#inFlight < WRITE_WINDOW_BYTES) setImmediate(() => this.#pump());
      });
      next.entry.written?.(next.message);
    }
  }

  /** Ends this socket from our side; the close handler decides what comes next. */
  #end(ws: WebSocket, attempt: Attempt, reason: string, code?: number): void {
    attempt.localReason ??= reason;
    clearTimeout(this.#welcomeTimer);
    this.#watchdog?.stop();
    if (code !== undefined && ws.readyState === WebSocket.OPEN) {
      // Close reasons are limited to 123 bytes.
      ws.close(
        code,
        Buffer.from(reason)
          .subarray(0, 120)
          .toString('utf8')
          .replace(/\uFFFD$/, ''),
      );
      setTimeout(() => ws.terminate(), CLOSE_TIMEOUT_MS).unref();
    } else {
      ws.terminate();
    }
  }

  #onClose(ws: WebSocket, attempt: Attempt, code: number, reason: string): void {
    if (ws !== this.#ws) return;
    this.#ws = undefined;
    const wasReady = this.#state === 'ready';
    clearTimeout(this.#welcomeTimer);
    this.#watchdog?.stop();
    this.#watchdog = undefined;
    if (this.#state === 'stopped') {
      this.#onStopped?.();
      this.#onStopped = undefined;
      return;
    }
    const disconnect: Disconnect =
      attempt.httpStatus !== undefined
        ? { kind: 'http', status: attempt.httpStatus }
        : attempt.localReason !== undefined
          ? { kind: 'local', reason: attempt.localReason }
          : {
              kind: 'closed',
              code,
              reason: reason || attempt.error?.message || '',
              ...(attempt.rejectReason !== undefined ? { rejectReason: attempt.rejectReason } : {}),
            };
    if (wasReady) this.#opts.onDown?.();
    const verdict = classifyDisconnect(disconnect);
    if (!verdict.retry) {
      this.#state = 'stopped';
      this.#opts.onFatal(verdict.message);
      return;
    }
    if (verdict.goingAway) this.#backoff.goingAway();
    const delayMs = Math.max(this.#backoff.next(), verdict.minDelayMs ?? 0);
    this.#log.warn(
      { reason: verdict.reason, retryInMs: delayMs, queued: this.#outbox.size },
      'disconnected from the coordinator',
    );
    this.#state = 'waiting';
    this.#reconnectTimer = setTimeout(() => this.#connect(), delayMs);
  }
}
