// Many simulated agents in one process, for ws-fan-in and agent-capacity:
// `node bench/lib/agent-swarm.ts`. Each is a bare `ws` client speaking the agent protocol the way
// deckhand-agent does on the wire — Bearer token, the agent's zero masking key, hello → welcome,
// pongs (ws answers pings by itself), binary step.output frames (protocol codec), reconnecting
// with the agent's own backoff (agent/src/connection/retryable.ts) — without running anything.
//
// Commands, one JSON line each on stdin; every command is answered by one JSON line on stdout:
//   {cmd:'connect', url, tokens}  opens one connection per token (a few hundred handshakes at a
//                                 time) → {ev:'connected', count, ms}
//   {cmd:'mark'}                  → {ev:'marked'}; remembers now
//   {cmd:'await-welcome'}         → {ev:'welcomed', lastAt, attempts}: once every agent has been
//                                 welcomed since the mark (lastAt: wall-clock ms of the last welcome)
//   {cmd:'prepare'}               → {ev:'prepared'} once every agent holds a new job (job.assign
//                                 answered with job.accepted, step 0 started and finished with no
//                                 output, step 1 started)
//   {cmd:'go', frames, frameBytes, windowBytes}
//                                 every agent sends `frames` step.output frames of `frameBytes`
//                                 bytes for step 1, keeping at most `windowBytes` unacknowledged
//                                 → {ev:'done', ms, frames}: ms from go until the last agent's
//                                 last byte was acknowledged (output.ack)
//   {cmd:'finish'}                step.finished 1 and job.finished success from every agent
//                                 → {ev:'finished'} once every job.ack came
//   {cmd:'close'}                 closes everything and exits.
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import WebSocket from 'ws';
import { Backoff, classifyDisconnect } from '../../agent/src/connection/retryable.ts';
import { encodeFrame, PROTOCOL_VERSION } from '../../protocol/src/index.ts';

interface Job {
  jobId: string;
  /** Bytes sent and acknowledged for step 1. */
  sent: number;
  acked: number;
  acks: number;
  finished: boolean;
}

interface Agent {
  index: number;
  token: string;
  ws: WebSocket | null;
  welcomedAt: number;
  backoff: Backoff;
  job: Job | null;
  onAck: (() => void) | null;
}

const HANDSHAKES_AT_ONCE = 200;
const wallMs = () => performance.timeOrigin + performance.now();
const out = (event: object) => process.stdout.write(`${JSON.stringify(event)}\n`);

let url = '';
let closing = false;
const agents: Agent[] = [];
let markAt = 0;
let attempts = 0;
/** Re-evaluated after every welcome, job step and ack: resolves whatever waits for a state. */
let waiters: Array<() => boolean> = [];
const poke = () => {
  waiters = waiters.filter((w) => !w());
};
const until = (done: () => boolean) =>
  new Promise<void>((resolve) => {
    const check = () => {
      if (!done()) return false;
      resolve();
      return true;
    };
    if (!check()) waiters.push(check);
  });

function send(agent: Agent, message: Parameters<typeof encodeFrame>[0]): void {
  if (agent.ws?.readyState === WebSocket.OPEN) agent.ws.send(encodeFrame(message));
}

function connect(agent: Agent): Promise<void> {
  attempts++;
  return new Promise((resolve) => {
    const ws = new WebSocket(url, {
      headers: { Authorization: `Bearer ${agent.token}` },
      generateMask: (mask) => mask.fill(0),
      handshakeTimeout: 30_000,
    });
    agent.ws = ws;
    let settled = false;
    const settle = () => {
      if (!settled) resolve();
      settled = true;
    };
    ws.on('open', () => {
      ws.send(
        encodeFrame({
          type: 'hello',
          protocolVersion: PROTOCOL_VERSION,
          agentVersion: 'bench-swarm',
          hostname: `swarm-${agent.index}`,
          labels: [],
          runningJobs: [],
        }),
      );
    });
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (isBinary) return;
      const m = JSON.parse(data.toString('utf8')) as { type: string; jobId?: string; offset?: number };
      switch (m.type) {
        case 'welcome':
          agent.welcomedAt = wallMs();
          agent.backoff.reset();
          settle();
          poke();
          return;
        case 'job.assign': {
          const jobId = m.jobId!;
          agent.job = { jobId, sent: 0, acked: 0, acks: 0, finished: false };
          send(agent, { type: 'job.accepted', jobId });
          send(agent, { type: 'step.started', jobId, step: 0, cmd: 'checkout' });
          send(agent, { type: 'step.finished', jobId, step: 0, exitCode: 0, signal: null, outputBytes: 0 });
          send(agent, { type: 'step.started', jobId, step: 1, cmd: 'stream' });
          poke();
          return;
        }
        case 'output.ack':
          if (agent.job && m.jobId === agent.job.jobId) {
            agent.job.acked = Math.max(agent.job.acked, m.offset ?? 0);
            agent.job.acks++;
            agent.onAck?.();
          }
          return;
        case 'job.ack':
          if (agent.job && m.jobId === agent.job.jobId) {
            agent.job.finished = true;
            poke();
          }
          return;
      }
    });
    ws.on('error', () => undefined);
    ws.on('close', (code: number, reason: Buffer) => {
      settle();
      if (agent.ws !== ws || closing) return;
      agent.ws = null;
      // As the agent's connection does: GOING_AWAY (a restart) is retried soon.
      const verdict = classifyDisconnect({ kind: 'closed', code, reason: reason.toString('utf8') });
      if (verdict.retry && verdict.goingAway) agent.backoff.goingAway();
      setTimeout(() => void connect(agent), agent.backoff.next());
    });
  });
}

async function stream(agent: Agent, frames: number, frameBytes: number, windowBytes: number): Promise<void> {
  const job = agent.job!;
  const payload = Buffer.alloc(frameBytes, 0x61);
  for (let i = 0; i < frameBytes; i += 64) payload[i] = 0x0a;
  const total = frames * frameBytes;
  await new Promise<void>((resolve) => {
    let seq = 0;
    const pump = () => {
      while (seq < frames && job.sent - job.acked + frameBytes <= windowBytes) {
        send(agent, { type: 'step.output', jobId: job.jobId, step: 1, seq, offset: job.sent, data: payload });
        job.sent += frameBytes;
        seq++;
      }
      if (job.acked >= total) {
        agent.onAck = null;
        resolve();
      }
    };
    agent.onAck = pump;
    pump();
  });
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  const c = JSON.parse(line) as {
    cmd: string;
    url?: string;
    tokens?: string[];
    frames?: number;
    frameBytes?: number;
    windowBytes?: number;
  };
  switch (c.cmd) {
    case 'connect': {
      url = c.url!;
      const start = performance.now();
      const fresh = c.tokens!.map((token, i) => ({
        index: agents.length + i,
        token,
        ws: null,
        welcomedAt: 0,
        backoff: new Backoff(),
        job: null,
        onAck: null,
      }));
      agents.push(...fresh);
      for (let i = 0; i < fresh.length; i += HANDSHAKES_AT_ONCE) {
        await Promise.all(fresh.slice(i, i + HANDSHAKES_AT_ONCE).map(connect));
      }
      await until(() => fresh.every((a) => a.welcomedAt > 0));
      out({ ev: 'connected', count: agents.length, ms: performance.now() - start });
      break;
    }
    case 'mark':
      markAt = wallMs();
      attempts = 0;
      out({ ev: 'marked' });
      break;
    case 'await-welcome':
      await until(() => agents.every((a) => a.welcomedAt > markAt));
      out({ ev: 'welcomed', lastAt: Math.max(...agents.map((a) => a.welcomedAt)), attempts });
      break;
    case 'prepare':
      // A job.assign may come before this command is read: a job not yet finished is a new one.
      await until(() => agents.every((a) => a.job !== null && !a.job.finished));
      out({ ev: 'prepared' });
      break;
    case 'go': {
      const start = performance.now();
      await Promise.all(agents.map((a) => stream(a, c.frames!, c.frameBytes!, c.windowBytes!)));
      const ms = performance.now() - start;
      out({
        ev: 'done',
        ms,
        frames: agents.length * c.frames!,
        acks: agents.reduce((n, a) => n + (a.job?.acks ?? 0), 0),
      });
      break;
    }
    case 'finish':
      for (const a of agents) {
        const job = a.job!;
        send(a, {
          type: 'step.finished',
          jobId: job.jobId,
          step: 1,
          exitCode: 0,
          signal: null,
          outputBytes: job.sent,
        });
        send(a, { type: 'job.finished', jobId: job.jobId, status: 'success' });
      }
      await until(() => agents.every((a) => a.job?.finished));
      out({ ev: 'finished' });
      break;
    case 'close':
      closing = true;
      for (const a of agents) a.ws?.terminate();
      process.exit(0);
  }
}
