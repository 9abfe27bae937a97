// A project: what to deploy (repository, branch, commands), where (target) and with what
// (environment, encrypted secrets). Deployments snapshot these fields when they are triggered.
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { baseProperties, timestamp } from '../common/base.entity.ts';

export type AgentTarget = { agents: { labels: string[] } } | { agents: { names: string[] } };
export interface SshTarget {
  ssh: { host: string; port: number; username: string; host_key_fingerprint: string };
}
export type CheckoutCredentials = 'deploy_key' | 'host';

/** How a project's deployments run: limits, concurrency and releases (API names, snake_case). */
export interface ProjectPolicies {
  timeouts: {
    /** One command; null: no limit. */
    command_seconds: number | null;
    /** The whole deployment, from when it starts running. */
    deployment_seconds: number | null;
    /** Waiting in the queue before it fails. */
    queue_seconds: number;
  };
  /** `queue`: one at a time, in order. `supersede`: a newer trigger cancels older queued ones. */
  concurrency: 'queue' | 'supersede';
  /** With `supersede`: also cancel the running deployment. */
  supersede_running: boolean;
  /** Build each deployment in its own release folder and switch `current` atomically. */
  releases: { keep: number; health_check: string | null } | null;
  /** Finished deployments older than this many days are pruned; null: RETENTION_DAYS applies. */
  retention_days: number | null;
}

export const DEFAULT_POLICIES: ProjectPolicies = {
  timeouts: { command_seconds: null, deployment_seconds: 3600, queue_seconds: 3600 },
  concurrency: 'queue',
  supersede_running: false,
  releases: null,
  retention_days: null,
};
/** Who is mailed when a deployment ends, and for which outcomes (API names, snake_case). */
export interface NotificationSettings {
  emails: string[];
  /** `failure`: failed or timed out; `success`; `always`: every end, cancelled included; `never`. */
  on: 'failure' | 'success' | 'always' | 'never';
  /** When mail was last switched on: deployments that ended before are never mailed. */
  since: string | null;
}

export const COMMIT_STATUS_PROVIDERS = ['github', 'gitea', 'gitlab'] as const;
export type CommitStatusProvider = (typeof COMMIT_STATUS_PROVIDERS)[number];

/** Where deployment states are reported as commit statuses; the forge token lives encrypted beside it. */
export interface CommitStatusSettings {
  provider: CommitStatusProvider;
  /** The forge's API root; null: derived from forge_url. */
  api_url: string | null;
  /** When reporting was configured: deployments from before are not reported. */
  since: string;
}

/** What a project stores as its target; an SSH private key lives encrypted beside it. */
export type Target = AgentTarget | SshTarget;

export const Project = defineEntity({
  name: 'Project',
  tableName: 'projects',
  properties: {
    ...baseProperties,
    name: p.string().length(100).unique(),
    forgeUrl: p.text(),
    branchName: p.string().length(255),
    /** Globs of further branches a push deploys (`release/*`), beside branch_name. */
    branchPatterns: p.json<string[]>().onCreate(() => []),
    commands: p.json<string[]>(),
    target: p.json<Target>(),
    env: p.json<Record<string, string>>(),
    /** Secret names in clear (listable without decrypting), values in `secretsEncrypted`. */
    secretKeys: p.json<string[]>(),
    secretsEncrypted: p.text().nullable().hidden(),
    sshPrivateKeyEncrypted: p.text().nullable().hidden(),
    webhookSecretEncrypted: p.text().hidden(),
    /** The project's deploy key: its public half is shown for the forge, the private half encrypted. */
    // Nullable: projects created before deploy keys existed get theirs on first use.
    deployKeyPublic: p.text().nullable(),
    deployKeyPrivateEncrypted: p.text().nullable().hidden(),
    /** `deploy_key`: checkouts over ssh use the deploy key; `host`: the host's own git credentials. */
    checkoutCredentials: p.string().length(16).$type<CheckoutCredentials>().default('deploy_key'),
    /** known_hosts lines for the forge; unset: the host's own known_hosts. Checked strictly either way. */
    forgeKnownHosts: p.text().nullable(),
    policies: p.json<ProjectPolicies>().onCreate(() => structuredClone(DEFAULT_POLICIES)),
    notifications: p.json<NotificationSettings>().nullable(),
    commitStatus: p.json<CommitStatusSettings>().nullable(),
    commitStatusTokenEncrypted: p.text().nullable().hidden(),
    updatedAt: timestamp()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});
export type IProject = InferEntity<typeof Project>;
