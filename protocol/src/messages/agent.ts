// Messages an agent sends to the coordinator, one schema each; `AgentMessage` is their union.
import Type, { type Static } from 'typebox';
import { ByteOffset, Id, StepIndex } from './common.ts';

/** The largest output chunk an agent sends in one frame (raw bytes, before base64). */
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

export const StepOutput = Type.Object({
  type: Type.Literal('step.output'),
  jobId: Id,
  step: StepIndex,
  /** Chunk number within the step, from 0: for ordering checks and diagnostics. */
  seq: Type.Integer({ minimum: 0 }),
  /** Byte offset of the chunk's first byte in the step's output. */
  offset: ByteOffset,
  /** The bytes, base64 (the receiver checks it: decoding must give back the same text). */
  data: Type.String({ maxLength: Math.ceil(MAX_CHUNK_BYTES / 3) * 4 }),
});
export type StepOutput = Static<typeof StepOutput>;

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

export const AGENT_MESSAGES = {
  hello: Hello,
  'job.accepted': JobAccepted,
  'step.started': StepStarted,
  'step.output': StepOutput,
  'step.finished': StepFinished,
  'job.finished': JobFinished,
} as const;

export type AgentMessage = Hello | JobAccepted | StepStarted | StepOutput | StepFinished | JobFinished;
