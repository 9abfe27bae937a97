// Who is calling, decided before anything reads the body (`onRequest`): a `connect.sid` session
// cookie naming a live server-side session. Each route declares in its config what it needs —
// `auth: 'public'` or a minimum role (default `viewer`) — and this hook enforces it: 401 when
// credentials are missing or dead, 403 when the role is too low. Browsers navigating to a page
// without a session are sent to the sign-in page instead.
// Cookie-authenticated writes must also come from our own origin (Origin / Sec-Fetch-Site).
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { type Actor, hasRole } from '../modules/common/actor.ts';
import { ForbiddenError, UnauthorizedError } from '../modules/common/errors.ts';
import type { Role } from '../modules/user/user.entity.ts';
import { userActor } from '../modules/user/user.service.ts';
import { wantsHtml } from './negotiation.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** 'public', or the lowest role allowed (default 'viewer'). */
    auth?: 'public' | Role;
    /** false for routes authenticated otherwise (webhook HMAC, agent token). */
    csrf?: boolean;
  }
  interface FastifyRequest {
    actor: Actor | null;
  }
}

declare module '@fastify/secure-session' {
  interface SessionData {
    sid: string;
  }
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export function requireActor(request: FastifyRequest): Actor {
  if (!request.actor) throw new UnauthorizedError();
  return request.actor;
}

function bearerToken(request: FastifyRequest): string | null {
  const header = request.headers.authorization;
  if (typeof header !== 'string') return null;
  // Other schemes (e.g. Basic from a proxy in front) are not ours to judge.
  if (!/^Bearer\b/i.test(header)) return null;
  return /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1] ?? '';
}

function checkSameOrigin(request: FastifyRequest, publicOrigin: string | null): void {
  const site = request.headers['sec-fetch-site'];
  if (typeof site === 'string' && site !== 'same-origin' && site !== 'none') {
    throw new ForbiddenError('Cross-site request refused');
  }
  const origin = request.headers.origin;
  if (typeof origin === 'string' && origin !== 'null') {
    const own = publicOrigin ?? `${request.protocol}://${request.host}`;
    if (origin !== own) throw new ForbiddenError('Cross-site request refused');
  }
}

export default fp(
  async (app: FastifyInstance, opts: { publicOrigin: string | null }) => {
    app.decorateRequest('actor', null);

    app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
      const config = request.routeOptions.config;
      const bearer = bearerToken(request);
      if (bearer !== null && config.csrf !== false) {
        // An API token (not an agent token: those only open /agent/ws). A bad one is refused
        // at once, whatever else the request carries.
        request.actor = await app.services.tokens.authenticate(bearer);
        if (!request.actor) throw new UnauthorizedError('Invalid, expired or revoked API token');
      } else {
        const sid = request.session?.get('sid');
        if (sid) {
          try {
            const user = await app.services.users.authenticateSession(sid);
            if (user) request.actor = userActor(user);
            else request.session.delete();
          } catch (err) {
            // A public route (liveness, the sign-in page) answers without knowing who asks when
            // the sessions cannot be read, e.g. while the database is away.
            if (config.auth !== 'public') throw err;
            request.log.debug({ err }, 'session not checked on a public route');
          }
        }
        if (!SAFE_METHODS.has(request.method) && config.csrf !== false && request.headers.cookie) {
          checkSameOrigin(request, opts.publicOrigin);
        }
      }
      // Recorded with whatever this actor changes (the audit log says from where).
      if (request.actor) request.actor = { ...request.actor, ip: request.ip };
      const needed = config.auth ?? 'viewer';
      if (needed === 'public' || !request.routeOptions.url) return;
      if (!request.actor) {
        if (request.method === 'GET' && wantsHtml(request)) {
          return reply.redirect(`/login?next=${encodeURIComponent(request.url)}`);
        }
        throw new UnauthorizedError();
      }
      if (!hasRole(request.actor, needed)) throw new ForbiddenError();
    });
  },
  { name: 'auth', dependencies: ['services', 'secure-session-setup'] },
);
