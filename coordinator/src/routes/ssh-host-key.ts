// POST /projects/host-key (admin): the "fetch host key" action for SSH targets. It shows the key
// a host presents, for the admin to compare with the host's own `ssh-keygen -lf` before pinning
// it as target.ssh.host_key_fingerprint; nothing is stored or trusted here.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import Type from 'typebox';
import { UpstreamError } from '../modules/common/errors.ts';
import { errors, Ok } from '../modules/common/schemas.ts';
import { SshHost, SshPort } from '../modules/project/project.schema.ts';
import { fetchHostKeys, HostKeyFetchError } from '../modules/ssh/host-key.ts';

const HostKeyBody = Type.Object(
  { host: SshHost, port: Type.Optional(SshPort) },
  { additionalProperties: false },
);

export default async function sshHostKeyRoutes(instance: FastifyInstance) {
  const app = instance.withTypeProvider<TypeBoxTypeProvider>();
  app.post(
    '/projects/host-key',
    {
      config: { auth: 'admin' },
      schema: {
        tags: ['projects'],
        summary: "Show an SSH host's key fingerprint, to confirm before pinning it in a project's target",
        body: HostKeyBody,
        response: {
          200: Ok({
            host: Type.String(),
            port: Type.Integer(),
            fingerprint: Type.String({ description: 'SHA256:<base64>, as OpenSSH prints it' }),
            algorithm: Type.String({ description: 'e.g. ssh-ed25519' }),
            keys: Type.Array(Type.Object({ fingerprint: Type.String(), algorithm: Type.String() }), {
              description:
                'Every host key the host holds (the first is the one above); any of them may be pinned',
            }),
          }),
          ...errors(400, 401, 403, 502),
        },
      },
    },
    async (request) => {
      const { host } = request.body;
      const port = request.body.port ?? 22;
      try {
        const keys = await fetchHostKeys(host.replace(/^\[(.*)\]$/, '$1'), port);
        return { success: true as const, host, port, ...keys[0]!, keys };
      } catch (err) {
        if (err instanceof HostKeyFetchError) throw new UpstreamError(err.message);
        throw err;
      }
    },
  );
}
