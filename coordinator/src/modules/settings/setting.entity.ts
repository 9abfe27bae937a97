// Settings an admin stores from the web UI or the API, one encrypted JSON value per key (today
// `smtp`). The environment wins over what is stored here (API.md "Mail").
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { timestamp } from '../common/base.entity.ts';

export const Setting = defineEntity({
  name: 'Setting',
  tableName: 'settings',
  properties: {
    key: p.string().length(64).primary(),
    /** SecretBox ciphertext of the JSON value: it may hold passwords. */
    valueEncrypted: p.text(),
    updatedAt: timestamp()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
    updatedBy: p.text(),
  },
});
export type ISetting = InferEntity<typeof Setting>;
