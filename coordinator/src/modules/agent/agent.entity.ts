// A registered agent: its identity, labels and token hash, and its presence (which coordinator
// process holds its connection, since when, last seen). Presence lives here so that every
// coordinator replica sees the same picture.
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { baseProperties, timestamp } from '../common/base.entity.ts';

export const Agent = defineEntity({
  name: 'Agent',
  tableName: 'agents',
  properties: {
    ...baseProperties,
    name: p.string().length(100).unique(),
    labels: p.json<string[]>(),
    tokenHash: p.string().length(64).unique().hidden(),
    version: p.string().length(64).nullable(),
    hostname: p.string().length(255).nullable(),
    connectedTo: p.string().length(128).nullable(),
    connectedAt: timestamp().nullable(),
    lastSeenAt: timestamp().nullable(),
  },
});
export type IAgent = InferEntity<typeof Agent>;
