// Invitations: an admin invites an email address with a role; the link carries a random token
// (stored as a hash, shown once) that lets that address register while registration is closed.
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { baseProperties, timestamp } from '../common/base.entity.ts';
import type { Role } from './user.entity.ts';

export const Invitation = defineEntity({
  name: 'Invitation',
  tableName: 'invitations',
  properties: {
    ...baseProperties,
    email: p.string().length(320).index(),
    role: p.string().length(16).$type<Role>(),
    tokenHash: p.string().length(64).unique().hidden(),
    invitedBy: p.string().length(320),
    expiresAt: timestamp(),
    acceptedAt: timestamp().nullable(),
    revokedAt: timestamp().nullable(),
  },
});
export type IInvitation = InferEntity<typeof Invitation>;
