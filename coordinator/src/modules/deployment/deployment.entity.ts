// Deployments, their per-command log entries and the raw output chunks that stream into them.
// A deployment holds a snapshot of what it will run, taken when it was triggered, so editing the
// project later never changes a deployment already queued.
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { baseProperties, timestamp } from '../common/base.entity.ts';
import { Agent } from '../agent/agent.entity.ts';
import { Project, type ProjectPolicies, type Target } from '../project/project.entity.ts';

export const DEPLOYMENT_STATUSES = [
  'queued',
  'running',
  'success',
  'failed',
  'cancelled',
  'timed_out',
] as const;
export type DeploymentStatus = (typeof DEPLOYMENT_STATUSES)[number];
export const TRIGGERS = ['manual', 'webhook', 'redeploy', 'rollback', 'api'] as const;
export type Trigger = (typeof TRIGGERS)[number];
export const LOG_ENTRY_STATUSES = [
  'running',
  'success',
  'failed',
  'cancelled',
  'timed_out',
  'skipped',
] as const;
export type LogEntryStatus = (typeof LOG_ENTRY_STATUSES)[number];

export interface DeploymentSnapshot {
  projectName: string;
  forgeUrl: string;
  commands: string[];
  env: Record<string, string>;
  target: Target;
  /** The project's secrets at trigger time, still encrypted. */
  secretsEncrypted: string | null;
  /** Limits, concurrency and releases at trigger time (absent in deployments older than them). */
  policies?: ProjectPolicies;
}

export const Deployment = defineEntity({
  name: 'Deployment',
  tableName: 'deployments',
  indexes: [
    {
      name: 'deployments_project_started_index',
      expression:
        'create index "deployments_project_started_index" on "deployments" ("project_id", "started_at" desc)',
    },
    {
      name: 'deployments_started_index',
      expression: 'create index "deployments_started_index" on "deployments" ("started_at" desc)',
    },
  ],
  uniques: [
    {
      // One running deployment per project, guaranteed by the database.
      name: 'deployments_one_running_per_project',
      expression: `create unique index "deployments_one_running_per_project" on "deployments" ("project_id") where "status" = 'running'`,
    },
  ],
  properties: {
    ...baseProperties,
    project: () => p.manyToOne(Project).deleteRule('cascade').index(),
    status: p.string().length(16).$type<DeploymentStatus>().index(),
    reason: p.text().nullable(),
    commit: p.string().length(64).nullable(),
    branch: p.string().length(255),
    trigger: p.string().length(16).$type<Trigger>(),
    triggeredBy: p.text(),
    triggeredByUserId: p.uuid().nullable(),
    snapshot: p.json<DeploymentSnapshot>(),
    hosts: p.json<string[]>(),
    startedAt: timestamp().onCreate(() => new Date()),
    finishedAt: timestamp().nullable(),
    /** `deploy` builds the commit; `rollback` switches back to the release of `rollbackTo`. */
    kind: p.string().length(16).$type<'deploy' | 'rollback'>().default('deploy'),
    rollbackTo: p.uuid().nullable(),
    /** When it must end (running since + the deployment timeout); past it, it is stopped as timed out. */
    deadlineAt: timestamp().nullable(),
    /** A cancel (or timeout) was asked for: how it ends and why. */
    cancelRequestedAt: timestamp().nullable(),
    cancelAs: p.string().length(16).$type<'cancelled' | 'timed_out'>().nullable(),
    cancelReason: p.text().nullable(),
  },
});
export type IDeployment = InferEntity<typeof Deployment>;

export const JOB_STATUSES = [
  'pending',
  'sent',
  'running',
  'success',
  'failed',
  'cancelled',
  'timed_out',
  'abandoned',
] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];

/** One host's part of a deployment: the job an agent is given. */
export const DeploymentJob = defineEntity({
  name: 'DeploymentJob',
  tableName: 'deployment_jobs',
  indexes: [
    { properties: ['agent', 'status'] },
    {
      name: 'deployment_jobs_pending_index',
      expression: `create index "deployment_jobs_pending_index" on "deployment_jobs" ("agent_id") where "status" = 'pending'`,
    },
  ],
  properties: {
    ...baseProperties,
    deployment: () => p.manyToOne(Deployment).deleteRule('cascade').index(),
    agent: () => p.manyToOne(Agent).deleteRule('set null').nullable(),
    host: p.string().length(255),
    status: p.string().length(16).$type<JobStatus>(),
    reason: p.text().nullable(),
    sentAt: timestamp().nullable(),
    /** Renewed while its agent is heard from; past it the job is given up as lost. */
    leaseExpiresAt: timestamp().nullable(),
    /** When `job.cancel` went to the agent. */
    cancelSentAt: timestamp().nullable(),
    startedAt: timestamp().nullable(),
    finishedAt: timestamp().nullable(),
  },
});
export type IDeploymentJob = InferEntity<typeof DeploymentJob>;

export const LogEntry = defineEntity({
  name: 'LogEntry',
  tableName: 'log_entries',
  uniques: [{ properties: ['deployment', 'host', 'seq'] }],
  indexes: [
    {
      name: 'log_entries_order_index',
      expression:
        'create index "log_entries_order_index" on "log_entries" ("deployment_id", "started_at", "seq")',
    },
  ],
  properties: {
    ...baseProperties,
    deployment: () => p.manyToOne(Deployment).deleteRule('cascade').index(),
    seq: p.integer(),
    host: p.string().length(255),
    cmd: p.text(),
    status: p.string().length(16).$type<LogEntryStatus>(),
    success: p.boolean().default(false),
    exitCode: p.integer().nullable(),
    signal: p.string().length(16).nullable(),
    /**
     * Output lives in log_chunks. Set only for entries that never had chunks (skipped: empty) and
     * for entries whose chunks earlier versions compacted into one value.
     */
    output: p.blob().nullable().lazy(),
    outputBytes: p.bigint('number').default(0),
    startedAt: timestamp(),
    finishedAt: timestamp().nullable(),
  },
});
export type ILogEntry = InferEntity<typeof LogEntry>;

export const LogChunk = defineEntity({
  name: 'LogChunk',
  tableName: 'log_chunks',
  uniques: [{ properties: ['logEntry', 'offset'] }],
  properties: {
    id: p.bigint('number').primary().autoincrement(),
    logEntry: () => p.manyToOne(LogEntry).deleteRule('cascade'),
    offset: p.bigint('number'),
    data: p.blob(),
    createdAt: timestamp().onCreate(() => new Date()),
  },
});
export type ILogChunk = InferEntity<typeof LogChunk>;
