// A project: what to deploy (repository, branch, commands), where (target) and with what
// (environment, encrypted secrets). Deployments snapshot these fields when they are triggered.
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { baseProperties, timestamp } from '../common/base.entity.ts';

export type AgentTarget = { agents: { labels: string[] } } | { agents: { names: string[] } };
export interface SshTarget {
  ssh: { host: string; port: number; username: string; host_key_fingerprint: string };
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
    commands: p.json<string[]>(),
    target: p.json<Target>(),
    env: p.json<Record<string, string>>(),
    /** Secret names in clear (listable without decrypting), values in `secretsEncrypted`. */
    secretKeys: p.json<string[]>(),
    secretsEncrypted: p.text().nullable().hidden(),
    sshPrivateKeyEncrypted: p.text().nullable().hidden(),
    webhookSecretEncrypted: p.text().hidden(),
    updatedAt: timestamp()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});
export type IProject = InferEntity<typeof Project>;
