// POST /email/test (the spec): a test message to the signed-in user's address, or to `to` —
// another address only for admins, so the endpoint cannot be used to send mail to strangers.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { hasRole } from '../modules/common/actor.ts';
import { ForbiddenError } from '../modules/common/errors.ts';
import { errors, Ok } from '../modules/common/schemas.ts';
import { requireActor } from '../plugins/auth.ts';
import { acceptForms, field, formDone, isBrowserForm } from '../plugins/forms.ts';

export default async function emailRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  acceptForms(instance);
  app.post(
    '/email/test',
    {
      // The settings page's "Send test email" (an empty address: the user's own).
      config: { form: (f) => (field(f, 'to').trim() ? { to: field(f, 'to').trim() } : {}) },
      schema: {
        tags: ['mail'],
        body: Type.Object({ to: Type.Optional(Type.String({ format: 'email', maxLength: 320 })) }),
        response: { 200: Ok({ message: Type.String() }), ...errors(400, 401, 403, 502) },
      },
    },
    async (request, reply) => {
      const actor = requireActor(request);
      const own = (await app.services.users.get(actor.userId!)).email;
      const to = request.body.to?.trim().toLowerCase() ?? own;
      if (to !== own && !hasRole(actor, 'admin')) {
        throw new ForbiddenError('Only admins can send the test email to another address');
      }
      await app.services.mailer.sendTestMail(to);
      if (isBrowserForm(request))
        return formDone(request, reply, '/settings#smtp', `Test email sent to ${to}`);
      return { success: true as const, message: 'Test email sent' };
    },
  );
}
