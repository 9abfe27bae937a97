// Every push delivery a project received: what the forge sent (headers without secrets),
// whether the signature held, what was decided and why, and the deployment it started.
// (project, delivery_id) is unique among deliveries that started a deployment: the de-duplication.
import { defineEntity, type InferEntity, p } from '@mikro-orm/core';
import { baseProperties } from '../common/base.entity.ts';
import { Project } from '../project/project.entity.ts';

export const WebhookDelivery = defineEntity({
  name: 'WebhookDelivery',
  tableName: 'webhook_deliveries',
  uniques: [
    {
      name: 'webhook_deliveries_handled_unique',
      expression: `create unique index "webhook_deliveries_handled_unique" on "webhook_deliveries" ("project_id", "delivery_id") where "decision" = 'deployed' and "delivery_id" is not null`,
    },
  ],
  properties: {
    ...baseProperties,
    project: () => p.manyToOne(Project).deleteRule('cascade').index(),
    forge: p.string().length(16),
    event: p.string().length(64).nullable(),
    deliveryId: p.string().length(128).nullable(),
    signatureValid: p.boolean(),
    statusCode: p.integer(),
    decision: p.string().length(32),
    reason: p.text(),
    deploymentId: p.uuid().nullable(),
    headers: p.json<Record<string, string>>(),
    /** The verified body (up to 1 MiB), kept so the delivery can be redelivered. */
    payload: p.blob().nullable().lazy(),
    /** For Deckhand's own redeliveries: the delivery repeated. */
    redeliveryOf: p.uuid().nullable(),
  },
});
export type IWebhookDelivery = InferEntity<typeof WebhookDelivery>;
