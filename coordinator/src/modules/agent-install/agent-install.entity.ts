// An agent installation started from the Agents page (POST /agents/install): what it was asked to
// do (never the private key), its steps, the installer's last lines and how it ended. The process
// running it writes its progress here, so any coordinator process can show it
// (GET /agents/installs/:id); `updated_at` is that process's heartbeat and `coordinator` names it.
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { baseProperties, timestamp } from '../common/base.entity.ts';

export interface InstallStepJson {
  step: string;
  title: string;
  status: 'pending' | 'running' | 'done' | 'failed';
}

export const AgentInstall = defineEntity({
  name: 'AgentInstall',
  tableName: 'agent_installs',
  properties: {
    ...baseProperties,
    /** Who started it (an email or a token name). */
    createdBy: p.string().length(255),
    host: p.string().length(255),
    port: p.integer(),
    username: p.string().length(64),
    hostKeyFingerprint: p.string().length(64),
    name: p.string().length(100),
    labels: p.json<string[]>(),
    /** running, succeeded or failed. */
    status: p.string().length(16),
    steps: p.json<InstallStepJson[]>(),
    /** The installer's last lines (capped). */
    lines: p.json<string[]>(),
    /** Why it failed and what to do next. */
    error: p.text().nullable(),
    agentId: p.uuid().nullable(),
    agentVersion: p.string().length(64).nullable(),
    /** The coordinator process running it. */
    coordinator: p.string().length(128),
    /** Written by that process at least every heartbeat while it runs (the database's clock). */
    updatedAt: timestamp(),
    finishedAt: timestamp().nullable(),
  },
  indexes: [{ properties: ['createdAt'] }],
});
export type IAgentInstall = InferEntity<typeof AgentInstall>;
