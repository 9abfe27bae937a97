// A project's webhook deliveries: what each forge sent (headers without secrets), whether it was
// verified, what was decided and why, the deployment it started — and "redeliver" for one.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, formDone, isBrowserForm } from '../plugins/forms.ts';
import { errors, Ok, Timestamp, Uuid } from '../modules/common/schemas.ts';

const NullableString = Type.Union([Type.String(), Type.Null()]);
const DeliveryJson = Type.Object({
  id: Uuid,
  received_at: Timestamp,
  forge: Type.String(),
  event: NullableString,
  delivery_id: NullableString,
  signature_valid: Type.Boolean(),
  status_code: Type.Integer(),
  decision: Type.String({
    description: 'deployed, ignored, duplicate, rejected (signature) or invalid (body)',
  }),
  reason: Type.String({ description: 'The answer the forge got' }),
  deployment_id: Type.Union([Uuid, Type.Null()]),
  redelivery_of: Type.Union([Uuid, Type.Null()]),
  headers: Type.Record(Type.String(), Type.String()),
});

export default async function deliveryRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const webhooks = app.services.webhooks;
  acceptForms(instance);

  app.get(
    '/projects/:id/deliveries',
    {
      schema: {
        tags: ['webhook'],
        params: Type.Object({ id: Type.String() }),
        querystring: Type.Object({ limit: Type.Integer({ minimum: 1, maximum: 200, default: 50 }) }),
        response: { 200: Ok({ deliveries: Type.Array(DeliveryJson) }), ...errors(401, 404) },
      },
    },
    async (request) => ({
      success: true as const,
      deliveries: await webhooks.listDeliveries(request.params.id, request.query.limit),
    }),
  );

  app.post(
    '/projects/:id/deliveries/:deliveryId/redeliver',
    {
      config: { auth: 'admin', form: true },
      schema: {
        tags: ['webhook'],
        params: Type.Object({ id: Type.String(), deliveryId: Type.String() }),
        response: {
          200: Ok({
            status_code: Type.Integer(),
            reason: Type.String(),
            deployment_id: Type.Union([Uuid, Type.Null()]),
          }),
          ...errors(401, 403, 404, 409),
        },
      },
    },
    async (request, reply) => {
      const result = await webhooks.redeliver(
        request.params.id,
        request.params.deliveryId,
        requireActor(request),
      );
      if (isBrowserForm(request)) {
        const note = `Redelivered: ${result.body}`;
        return formDone(request, reply, `/projects/${request.params.id}#deliveries`, note);
      }
      return {
        success: true as const,
        status_code: result.status,
        reason: result.body,
        deployment_id: result.deploymentId ?? null,
      };
    },
  );
}
