// Rate-limit counters shared by every coordinator process: one row per key (route and client
// address), counting hits in the current window. Written only by pg-rate-limit-store.ts.
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { timestamp } from '../common/base.entity.ts';

export const RateLimitHit = defineEntity({
  name: 'RateLimitHit',
  tableName: 'rate_limit_hits',
  properties: {
    key: p.string().length(255).primary(),
    count: p.integer(),
    windowStartedAt: timestamp().index(),
  },
});
export type IRateLimitHit = InferEntity<typeof RateLimitHit>;
