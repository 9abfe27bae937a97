// Properties every table shares: a UUID primary key generated in the application (so a row's id
// is known before it is flushed) and its creation time.
import { randomUUID } from 'node:crypto';
import { p } from '@mikro-orm/core';

export const baseProperties = {
  id: p
    .uuid()
    .primary()
    .onCreate(() => randomUUID()),
  createdAt: p
    .datetime()
    .onCreate(() => new Date())
    .columnType('timestamptz(3)'),
};

export const timestamp = () => p.datetime().columnType('timestamptz(3)');
