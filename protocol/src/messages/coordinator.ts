// Messages the coordinator sends to an agent, one schema each; `CoordinatorMessage` is their union.
import Type, { type Static } from 'typebox';
import { ByteOffset, Id, StepIndex } from './common.ts';

export const Welcome = Type.Object({
  type: Type.Literal('welcome'),
  agentId: Id,
  agentName: Type.String(),
  protocolVersion: Type.Integer(),
  /** How often the agent should expect a ping; silence for twice this means a dead connection. */
  heartbeatMs: Type.Integer({ minimum: 100 }),
  /**
   * How long the coordinator keeps a job of a silent agent before giving it up as lost. An agent
   * cut off from the coordinator for longer than `abandonAfterMs` stops its jobs itself (kills
   * their process groups) and reports them `abandoned` when it can.
   */
  leaseMs: Type.Integer({ minimum: 100 }),
  abandonAfterMs: Type.Integer({ minimum: 100 }),
  /**
   * Sent when the coordinator serves a newer agent than this one (GET /agent/download): its
   * version and the file's SHA-256. An agent running as the one-file bundle may update itself to
   * it (agent/src/self-update.ts); one that does not know the field ignores it, so adding it
   * changed no protocol version.
   */
  update: Type.Optional(
    Type.Object({
      version: Type.String({ maxLength: 64 }),
      sha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
    }),
  ),
});
export type Welcome = Static<typeof Welcome>;

export const Reject = Type.Object({
  type: Type.Literal('reject'),
  /** Says what to do, e.g. which version to upgrade to. */
  reason: Type.String(),
});
export type Reject = Static<typeof Reject>;

export const JobAssign = Type.Object({
  type: Type.Literal('job.assign'),
  jobId: Id,
  deploymentId: Id,
  /** The name is the project's folder on the host: a plain folder name. */
  project: Type.Object({
    id: Id,
    name: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$', maxLength: 100 }),
  }),
  repository: Type.Object({
    url: Type.String(),
    branch: Type.String(),
    /** Fixed once for the deployment; every host checks out exactly this commit. */
    commit: Type.String({ pattern: '^[0-9a-f]{40,64}$' }),
    /** The project's deploy key (OpenSSH private key) for ssh remotes, or null to use the host's own credentials. */
    sshKey: Type.Union([Type.String(), Type.Null()]),
    /** known_hosts lines for the forge, checked strictly when set. */
    knownHosts: Type.Union([Type.String(), Type.Null()]),
  }),
  commands: Type.Array(Type.String()),
  /** The deployment's environment, secrets included; DECKHAND_* variables are added by the agent. */
  env: Type.Record(Type.String(), Type.String()),
  /** `deploy` builds the commit; `rollback` makes a kept release current again (releases only). */
  kind: Type.Enum(['deploy', 'rollback']),
  /** For `rollback`: the release (a deployment id) to switch `current` back to. */
  rollbackTo: Type.Union([Id, Type.Null()]),
  /**
   * Releases: build in `<project>/releases/<deployment id>`, switch `<project>/current` to it
   * atomically when every command succeeded, run the health check (switching back if it fails),
   * keep the newest `keep` releases. Null: build and run in `<project>` itself.
   */
  releases: Type.Union([
    Type.Object({
      keep: Type.Integer({ minimum: 1, maximum: 100 }),
      healthCheck: Type.Union([Type.String({ minLength: 1 }), Type.Null()]),
    }),
    Type.Null(),
  ]),
  /** A command running longer is stopped (TERM, grace, KILL to its group) and the job ends `timed_out`. */
  commandTimeoutMs: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]),
  /** Values replaced by `[MASKED]` in every byte of output the agent sends (secrets and the like). */
  masks: Type.Array(Type.String({ minLength: 1 })),
});
export type JobAssign = Static<typeof JobAssign>;

export const OutputAck = Type.Object({
  type: Type.Literal('output.ack'),
  jobId: Id,
  step: StepIndex,
  /** Every byte before this offset is stored: the agent may forget it. */
  offset: ByteOffset,
});
export type OutputAck = Static<typeof OutputAck>;

export const JobCancel = Type.Object({
  type: Type.Literal('job.cancel'),
  jobId: Id,
  reason: Type.String(),
  /** How the job ends: `cancelled` (a person or a newer deployment) or `timed_out` (the deployment's deadline). */
  as: Type.Enum(['cancelled', 'timed_out']),
});
export type JobCancel = Static<typeof JobCancel>;

/** The job's end is stored: the agent may forget the job (until then it re-sends its end after reconnecting). */
export const JobAck = Type.Object({ type: Type.Literal('job.ack'), jobId: Id });
export type JobAck = Static<typeof JobAck>;

export const COORDINATOR_MESSAGES = {
  welcome: Welcome,
  reject: Reject,
  'job.assign': JobAssign,
  'output.ack': OutputAck,
  'job.cancel': JobCancel,
  'job.ack': JobAck,
} as const;

export type CoordinatorMessage = Welcome | Reject | JobAssign | OutputAck | JobCancel | JobAck;
