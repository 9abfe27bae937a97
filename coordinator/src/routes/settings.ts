// Instance settings an admin stores (today: SMTP). The environment wins over stored settings;
// the answer says which are in effect. `POST /email/test` tries them.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { errors, Ok } from '../modules/common/schemas.ts';
import { requireActor } from '../plugins/auth.ts';

const NullableString = Type.Union([Type.String(), Type.Null()]);
const SmtpSettingsJson = {
  source: Type.Enum(['environment', 'stored', 'none']),
  settings: Type.Union([
    Type.Object({
      host: NullableString,
      port: Type.Union([Type.Integer(), Type.Null()]),
      secure: Type.Boolean(),
      user: NullableString,
      from: Type.String(),
      has_password: Type.Boolean(),
    }),
    Type.Null(),
  ]),
  stored: Type.Boolean(),
};

export default async function settingsRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  const smtp = () => app.services.smtpSettings;

  app.get(
    '/settings/smtp',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['settings'],
        response: { 200: Ok({ smtp: Type.Object(SmtpSettingsJson) }), ...errors(401, 403) },
      },
    },
    async () => ({ success: true as const, smtp: await smtp().describe() }),
  );

  app.put(
    '/settings/smtp',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['settings'],
        body: Type.Object(
          {
            host: Type.String({ minLength: 1, maxLength: 255, pattern: '^[^\\s/:]+$' }),
            port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
            secure: Type.Optional(
              Type.Boolean({ description: 'Implicit TLS (465); otherwise STARTTLS when offered' }),
            ),
            user: Type.Optional(Type.Union([Type.String({ maxLength: 255 }), Type.Null()])),
            password: Type.Optional(
              Type.Union([Type.String({ maxLength: 1024 }), Type.Null()], {
                description: 'Write-only; omit to keep the stored one, null to remove it',
              }),
            ),
            from: Type.String({ minLength: 3, maxLength: 320 }),
          },
          { additionalProperties: false },
        ),
        response: { 200: Ok({ smtp: Type.Object(SmtpSettingsJson) }), ...errors(400, 401, 403) },
      },
    },
    async (request) => ({
      success: true as const,
      smtp: await smtp().save(request.body, requireActor(request)),
    }),
  );

  app.delete(
    '/settings/smtp',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['settings'],
        response: { 200: Ok({ smtp: Type.Object(SmtpSettingsJson) }), ...errors(401, 403) },
      },
    },
    async (request) => ({ success: true as const, smtp: await smtp().clear(requireActor(request)) }),
  );
}
