// API tokens: a user's named credentials for machines (CI pipelines, scripts), each with a scope
// and an optional expiry. Only a hash is stored; revoking sets revoked_at.
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { baseProperties, timestamp } from '../common/base.entity.ts';
import { User } from '../user/user.entity.ts';

export const TOKEN_SCOPES = ['read', 'deploy', 'admin'] as const;
export type TokenScope = (typeof TOKEN_SCOPES)[number];

export const ApiToken = defineEntity({
  name: 'ApiToken',
  tableName: 'api_tokens',
  properties: {
    ...baseProperties,
    user: () => p.manyToOne(User).deleteRule('cascade').index(),
    name: p.string().length(100),
    scope: p.string().length(16).$type<TokenScope>(),
    tokenHash: p.string().length(64).unique().hidden(),
    expiresAt: timestamp().nullable(),
    lastUsedAt: timestamp().nullable(),
    revokedAt: timestamp().nullable(),
  },
});
export type IApiToken = InferEntity<typeof ApiToken>;
