// Messages an agent sends to the coordinator, one schema each; `AgentMessage` is their union.
import Type, { type Static } from 'typebox';
import { ByteOffset, Id, StepIndex } from './common.ts';

/** The largest output chunk an agent sends in one frame (raw bytes). */
export const MAX_CHUNK_BYTES = 256 * 1024;

export const Hello = Type.Object({
  type: Type.Literal('hello'),
  protocolVersion: Type.Integer({ minimum: 0 }),
  agentVersion: Type.String({ maxLength: 64 }),
  hostname: Type.String({ maxLength: 255 }),
  labels: Type.Array(Type.String({ maxLength: 63 }), { maxItems: 50 }),
  /** Jobs still running on the agent (after a reconnect), with how far each got. */
  runningJobs: Type.Array(Type.Object({ jobId: Id, step: StepIndex, offset: ByteOffset }), { maxItems: 100 }),
});
export type Hello = Static<typeof Hello>;

export const JobAccepted = Type.Object({ type: Type.Literal('job.accepted'), jobId: Id });
export type JobAccepted = Static<typeof JobAccepted>;

export const StepStarted = Type.Object({
  type: Type.Literal('step.started'),
  jobId: Id,
  step: StepIndex,
  cmd: Type.String({ maxLength: 20_000 }),
});
export type StepStarted = Static<typeof StepStarted>;

/**
 * A chunk of a step's output. It travels as a binary frame — a fixed header, then the raw bytes
 * (codec.ts) — never as JSON: output is most of what agents send, and base64 inside JSON cost
 * both sides more CPU than storing it did.
 */
export interface StepOutput {
  type: 'step.output';
  jobId: string;
  /** Step index (0 is the checkout). */
  step: number;
  /** Chunk number within the step, from 0: for ordering checks and diagnostics. */
  seq: number;
  /** Byte offset of the chunk's first byte in the step's output. */
  offset: number;
  /** The raw bytes, at most MAX_CHUNK_BYTES. */
  data: Buffer;
}

export const StepFinished = Type.Object({
  type: Type.Literal('step.finished'),
  jobId: Id,
  step: StepIndex,
  exitCode: Type.Union([Type.Integer(), Type.Null()]),
  signal: Type.Union([Type.String({ maxLength: 16 }), Type.Null()]),
  /** Total bytes the step printed: the coordinator completes the entry once it has them all. */
  outputBytes: ByteOffset,
  /** Why it ended, when not by itself (e.g. "the command could not be started"). */
  error: Type.Optional(Type.String({ maxLength: 2000 })),
});
export type StepFinished = Static<typeof StepFinished>;

export const JOB_RESULTS = ['success', 'failed', 'cancelled', 'timed_out', 'abandoned'] as const;
export const JobFinished = Type.Object({
  type: Type.Literal('job.finished'),
  jobId: Id,
  status: Type.Enum(JOB_RESULTS),
  reason: Type.Optional(Type.String({ maxLength: 2000 })),
});
export type JobFinished = Static<typeof JobFinished>;

/** The JSON messages (text frames); step.output is the one binary frame. */
export const AGENT_MESSAGES = {
  hello: Hello,
  'job.accepted': JobAccepted,
  'step.started': StepStarted,
  'step.finished': StepFinished,
  'job.finished': JobFinished,
} as const;

export type AgentMessage = Hello | JobAccepted | StepStarted | StepOutput | StepFinished | JobFinished;
