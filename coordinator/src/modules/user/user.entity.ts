// Accounts and their server-side sessions. A session row is what the `connect.sid` cookie names;
// deleting or revoking it ends that session for good, whatever cookie is replayed.
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { baseProperties, timestamp } from '../common/base.entity.ts';

export const ROLES = ['admin', 'deployer', 'viewer'] as const;
export type Role = (typeof ROLES)[number];

export const User = defineEntity({
  name: 'User',
  tableName: 'users',
  properties: {
    ...baseProperties,
    email: p.string().length(320).unique(),
    passwordHash: p.text().hidden(),
    role: p.string().length(16).$type<Role>(),
    updatedAt: timestamp()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});
export type IUser = InferEntity<typeof User>;

export const Session = defineEntity({
  name: 'Session',
  tableName: 'sessions',
  properties: {
    // sha256 of the random session id carried (encrypted) in the cookie: a database leak does
    // not hand out live sessions.
    id: p.string().length(64).primary(),
    user: () => p.manyToOne(User).deleteRule('cascade').index(),
    createdAt: timestamp().onCreate(() => new Date()),
    lastSeenAt: timestamp().onCreate(() => new Date()),
    expiresAt: timestamp(),
    revokedAt: timestamp().nullable(),
    ip: p.string().length(64).nullable(),
    userAgent: p.string().length(512).nullable(),
  },
});
export type ISession = InferEntity<typeof Session>;
