// The agent hub: the WebSocket connections of the agents this coordinator process holds. It runs
// the handshake (hello → welcome, or reject on a protocol mismatch), keeps presence in PostgreSQL,
// pings each connection and drops a silent one, sends pending jobs to the agents it holds, and
// hands each job message — in order, one at a time per connection — to the job service. A bad
// frame or a rule broken by one agent closes that connection with a documented code; nothing
// else is affected. The lifecycle is written down in protocol/src/lifecycle.ts.
import {
  type AgentMessage,
  CloseCode,
  type CoordinatorMessage,
  decodeAgentFrame,
  encodeFrame,
  type Hello,
  PROTOCOL_VERSION,
  type StepOutput,
  type Welcome,
} from '@deckhand/protocol';
import type { Logger } from 'pino';
import type { WebSocket } from 'ws';
import type { JobDispatch } from '../deployment/job-dispatch.ts';
import { type JobService, LateMessage, ProtocolViolation } from '../deployment/job.service.ts';
import type { IAgent } from './agent.entity.ts';
import type { AgentService } from './agent.service.ts';

export interface AgentHubOptions {
  agents: AgentService;
  jobs: JobService;
  dispatch: JobDispatch;
  /** Identifies this coordinator process in the agents' presence rows. */
  processId: string;
  heartbeatMs: number;
  leaseMs: number;
  abandonAfterMs: number;
  /** Called when an agent comes online (the scheduler may now start what waited for it). */
  onAgentOnline: () => void;
  /** The newer agent to offer in the welcome (Welcome.update), if any. */
  agentUpdate?: (agentVersion: string) => Promise<Welcome['update']>;
  /** Where users reach the coordinator, so a refused agent is told where to download its file. */
  publicUrl: () => string;
  log: Logger;
}

const HELLO_TIMEOUT_MS = 10_000;
/** How long a stopping coordinator waits for agents to answer its close frames. */
const STOP_CLOSE_WAIT_MS = 1_000;
/** Largest batch of output stored in one statement. */
const BATCH_BYTES = 4 * 1024 * 1024;
/** Output waiting to be stored per connection before reading from it pauses. */
const QUEUED_BYTES = 16 * 1024 * 1024;

class Connection {
  readonly socket: WebSocket;
  readonly agent: IAgent;
  welcomed = false;
  alive = true;
  /** Output frames waiting to be stored together (the last thing queued, if any). */
  openBatch: StepOutput[] | null = null;
  openBatchBytes = 0;
  /** Output bytes received and not yet stored; the socket is paused while they are many. */
  queuedBytes = 0;
  paused = false;
  /** Job messages are handled strictly in order. */
  queue: Promise<void> = Promise.resolve();

  constructor(socket: WebSocket, agent: IAgent) {
    this.socket = socket;
    this.agent = agent;
  }

  send(message: CoordinatorMessage): void {
    if (this.socket.readyState === this.socket.OPEN) this.socket.send(encodeFrame(message));
  }

  close(code: number, reason: string): void {
    // Close reasons are limited to 123 bytes.
    if (this.socket.readyState === this.socket.OPEN || this.socket.readyState === this.socket.CONNECTING) {
      this.socket.close(code, Buffer.from(reason).subarray(0, 123).toString());
    }
  }
}

export class AgentHub {
  readonly #o: AgentHubOptions;
  readonly #connections = new Map<string, Connection>();
  /** Each agent's latest connection, closed or not: its queued work must finish before the next one's. */
  readonly #latest = new Map<string, Connection>();
  #heartbeat: NodeJS.Timeout | undefined;
  /** Once stopping, connections are recorded offline by stop(), not by their close events. */
  #stopping = false;

  constructor(options: AgentHubOptions) {
    this.#o = options;
  }

  get heartbeatMs(): number {
    return this.#o.heartbeatMs;
  }

  start(): void {
    this.#heartbeat = setInterval(() => void this.#beat(), this.#o.heartbeatMs);
    this.#heartbeat.unref();
  }

  /**
   * Closes every connection with GOING_AWAY (agents reconnect, here or to another replica), lets
   * what they sent be stored, and records them offline — all before the database closes.
   */
  async stop(): Promise<void> {
    this.#stopping = true;
    clearInterval(this.#heartbeat);
    const all = [...this.#connections.values()];
    this.#connections.clear();
    const closed = all.map(
      (c) =>
        new Promise<void>((resolve) => {
          if (c.socket.readyState === c.socket.CLOSED) return resolve();
          c.socket.once('close', () => resolve());
        }),
    );
    for (const c of all) c.close(CloseCode.GOING_AWAY, 'coordinator shutting down');
    // An agent that does not answer the close handshake is not waited for long.
    const slow = setTimeout(() => {
      for (const c of all) c.socket.terminate();
    }, STOP_CLOSE_WAIT_MS);
    await Promise.all(closed);
    clearTimeout(slow);
    await Promise.allSettled(all.map((c) => c.queue));
    await Promise.allSettled(all.map((c) => this.#o.agents.disconnected(c.agent.id, this.#o.processId)));
  }

  connectedAgentIds(): string[] {
    return [...this.#connections.values()].filter((c) => c.welcomed).map((c) => c.agent.id);
  }

  /** A revoked agent's live connection is closed at once. */
  revoke(agentId: string): void {
    this.#connections.get(agentId)?.close(CloseCode.UNAUTHORIZED, 'this agent was revoked');
  }

  accept(socket: WebSocket, agent: IAgent): void {
    if (this.#stopping) {
      socket.close(CloseCode.GOING_AWAY, 'coordinator shutting down');
      return;
    }
    const conn = new Connection(socket, agent);
    const log = this.#o.log.child({ agent: agent.name });
    const helloTimer = setTimeout(() => conn.close(CloseCode.BAD_FRAME, 'expected hello'), HELLO_TIMEOUT_MS);
    socket.on('pong', () => {
      conn.alive = true;
    });
    socket.on('message', (data, isBinary) => {
      conn.alive = true;
      const decoded = decodeAgentFrame(data, isBinary);
      if (!decoded.ok) {
        log.warn({ error: decoded.error }, 'bad frame from agent: closing its connection');
        conn.close(decoded.code, decoded.error);
        return;
      }
      const message = decoded.message;
      if (!conn.welcomed && message.type !== 'hello') {
        conn.close(CloseCode.BAD_FRAME, `expected hello, got ${message.type}`);
        return;
      }
      const failed = (err: unknown) => {
        if (err instanceof LateMessage) {
          log.info({ error: err.message, type: message.type }, 'ignored a late message about an ended job');
        } else if (err instanceof ProtocolViolation) {
          log.warn({ error: err.message }, 'agent broke the protocol: closing its connection');
          conn.close(CloseCode.BAD_FRAME, err.message);
        } else {
          // Our failure (e.g. the database): the agent keeps its unacknowledged output and
          // re-sends it when it reconnects.
          log.error({ err }, 'could not handle an agent message: closing the connection');
          conn.close(CloseCode.GOING_AWAY, 'coordinator error, reconnect');
        }
      };
      if (message.type === 'step.output') {
        // Output frames that arrive while earlier work is in progress are stored together, in
        // one statement (up to BATCH_BYTES), when their turn comes; order with other messages is
        // kept. Past QUEUED_BYTES waiting, the socket is paused: TCP pushes back on the agent,
        // whose own bound then pauses the command, so memory stays bounded on both sides.
        const size = message.data.length;
        conn.queuedBytes += size;
        if (conn.queuedBytes > QUEUED_BYTES && !conn.paused) {
          conn.paused = true;
          socket.pause();
        }
        if (conn.openBatch && conn.openBatchBytes + size <= BATCH_BYTES) {
          conn.openBatch.push(message);
          conn.openBatchBytes += size;
          return;
        }
        const batch: StepOutput[] = [message];
        conn.openBatch = batch;
        conn.openBatchBytes = size;
        conn.queue = conn.queue.then(async () => {
          if (conn.openBatch === batch) conn.openBatch = null;
          try {
            await this.#outputs(conn, batch);
          } catch (err) {
            failed(err);
          } finally {
            conn.queuedBytes -= batch.reduce((n, f) => n + f.data.length, 0);
            if (conn.paused && conn.queuedBytes <= QUEUED_BYTES / 2) {
              conn.paused = false;
              socket.resume();
            }
          }
        });
        return;
      }
      conn.openBatch = null;
      conn.queue = conn.queue.then(() => this.#handle(conn, message).catch(failed));
      if (message.type === 'hello') clearTimeout(helloTimer);
    });
    socket.on('close', () => {
      clearTimeout(helloTimer);
      if (!this.#stopping && this.#connections.get(agent.id) === conn) {
        this.#connections.delete(agent.id);
        void conn.queue
          .then(() => this.#o.agents.disconnected(agent.id, this.#o.processId))
          .catch((err) => log.error({ err }, 'could not record the agent as offline'));
        log.info('agent disconnected');
      }
    });
    socket.on('error', (err) => log.warn({ err }, 'agent connection error'));
  }

  async #handle(conn: Connection, message: AgentMessage): Promise<void> {
    const { jobs } = this.#o;
    const agentId = conn.agent.id;
    switch (message.type) {
      case 'hello':
        return this.#hello(conn, message);
      case 'job.accepted':
        return jobs.accepted(agentId, message.jobId);
      case 'step.started':
        return jobs.stepStarted(agentId, message.jobId, message.step, message.cmd);
      case 'step.output':
        return this.#outputs(conn, [message]);
      case 'step.finished':
        return jobs.stepFinished(agentId, message.jobId, message.step, message);
      case 'job.finished':
        try {
          await jobs.jobFinished(agentId, message.jobId, message.status, message.reason);
        } catch (err) {
          if (!(err instanceof LateMessage)) throw err;
        }
        // Stored (or already ended): either way the agent may forget the job.
        conn.send({ type: 'job.ack', jobId: message.jobId });
        return;
    }
  }

  /** Stores output frames (one statement for the lot) and acknowledges each step's new offset. */
  async #outputs(conn: Connection, frames: StepOutput[]): Promise<void> {
    const chunks = frames.map((f) => ({ jobId: f.jobId, step: f.step, offset: f.offset, data: f.data }));
    for (const ack of await this.#o.jobs.outputs(conn.agent.id, chunks)) {
      conn.send({ type: 'output.ack', ...ack });
    }
  }

  async #hello(conn: Connection, hello: Hello): Promise<void> {
    if (conn.welcomed) throw new ProtocolViolation('hello sent twice');
    // Output the agent's previous connection is still storing must be stored before this one
    // starts from the database's view of it (two queues of one agent must never overlap).
    const prior = this.#latest.get(conn.agent.id);
    this.#latest.set(conn.agent.id, conn);
    if (prior && prior !== conn) await prior.queue.catch(() => undefined);
    if (hello.protocolVersion !== PROTOCOL_VERSION) {
      // The agent cannot update itself across protocols (the offer is in the welcome it will never
      // get), so the reason is the whole instruction: the person reading it is on the host.
      const download = `${this.#o.publicUrl()}/agent/download`;
      const speaks = `This agent speaks protocol ${hello.protocolVersion}; the coordinator speaks ${PROTOCOL_VERSION}.`;
      const reason =
        hello.protocolVersion < PROTOCOL_VERSION
          ? `${speaks} Upgrade the agent to the coordinator's version: download it from ${download} ` +
            `(curl -fsSLo deckhand-agent.js ${download}) and restart it with the same arguments, or, ` +
            `if it was installed over SSH, run: deckhand agents upgrade --host ${hello.hostname || '<host>'} ` +
            `--user <ssh user> --name ${conn.agent.name}`
          : `${speaks} Upgrade the coordinator, or run an agent of its version (from ${download}).`;
      conn.send({ type: 'reject', reason });
      conn.close(CloseCode.VERSION_MISMATCH, `protocol ${hello.protocolVersion} is not ${PROTOCOL_VERSION}`);
      return;
    }
    // A newer connection of the same agent wins.
    const previous = this.#connections.get(conn.agent.id);
    if (previous && previous !== conn) previous.close(CloseCode.REPLACED, 'replaced by a newer connection');
    this.#connections.set(conn.agent.id, conn);
    // Its jobs are its own again before anything else happens (a lease may be about to run out).
    await this.#o.jobs.renewLeases([conn.agent.id]);
    const agent = await this.#o.agents.connected(conn.agent.id, this.#o.processId, hello);
    const update = await this.#o.agentUpdate?.(hello.agentVersion).catch(() => undefined);
    conn.welcomed = true;
    conn.send({
      type: 'welcome',
      agentId: agent.id,
      agentName: agent.name,
      protocolVersion: PROTOCOL_VERSION,
      heartbeatMs: this.#o.heartbeatMs,
      leaseMs: this.#o.leaseMs,
      abandonAfterMs: this.#o.abandonAfterMs,
      ...(update ? { update } : {}),
    });
    this.#o.log.info(
      { agent: agent.name, version: hello.agentVersion, hostname: hello.hostname, offered: update?.version },
      'agent connected',
    );
    const ended = await this.#o.jobs.agentReconnected(
      agent.id,
      hello.runningJobs.map((j) => j.jobId),
    );
    for (const jobId of ended) {
      // Its result no longer counts; what it prints is acknowledged and dropped.
      conn.send({
        type: 'job.cancel',
        jobId,
        reason: 'this job had already ended on the coordinator while the agent was away',
        as: 'cancelled',
      });
      this.#o.log.info(
        { agent: agent.name, job: jobId },
        'stopping a job that ended while its agent was away',
      );
    }
    await this.#o.jobs.renewLeases([agent.id]);
    this.#o.onAgentOnline();
    // Only this agent's: with thousands connected, asking for everyone's at every hello made a
    // reconnect storm quadratic.
    await this.dispatch([agent.id]);
    await this.sendCancels([agent.id]);
  }

  /** Tells the agents connected here to stop the jobs whose deployments were cancelled or timed out. */
  async sendCancels(agentIds = this.connectedAgentIds()): Promise<void> {
    if (agentIds.length === 0) return;
    for (const c of await this.#o.jobs.cancelsToSend(agentIds)) {
      this.#connections
        .get(c.agentId)
        ?.send({ type: 'job.cancel', jobId: c.jobId, reason: c.reason, as: c.as });
      this.#o.log.info({ job: c.jobId, as: c.as }, 'job cancel sent');
    }
  }

  /** Sends the pending jobs of the agents connected here. */
  async dispatch(agentIds = this.connectedAgentIds()): Promise<void> {
    if (agentIds.length === 0) return;
    const claimed = await this.#o.dispatch.claimPending(agentIds);
    for (const { agentId, assign } of claimed) {
      const conn = this.#connections.get(agentId);
      if (conn) conn.send(assign);
      this.#o.log.info(
        { agent: conn?.agent.name, job: assign.jobId, deployment: assign.deploymentId },
        'job sent',
      );
    }
  }

  async #beat(): Promise<void> {
    for (const conn of this.#connections.values()) {
      // A paused socket is not read, pongs included: it is busy, not silent.
      if (!conn.alive && !conn.paused) {
        this.#o.log.warn({ agent: conn.agent.name }, 'agent silent for a heartbeat: dropping its connection');
        conn.socket.terminate();
        continue;
      }
      conn.alive = false;
      conn.socket.ping();
    }
    try {
      const ids = this.connectedAgentIds();
      const existing = await this.#o.agents.seen(ids, this.#o.processId);
      // Revoked through another replica (the one that served the DELETE closed its own).
      for (const id of ids.filter((i) => !existing.has(i))) this.revoke(id);
      await this.#o.jobs.renewLeases(ids);
      // Pending jobs and cancels can also come from another replica.
      await this.dispatch();
      await this.sendCancels();
    } catch (err) {
      this.#o.log.error({ err }, 'agent heartbeat bookkeeping failed');
    }
  }
}
