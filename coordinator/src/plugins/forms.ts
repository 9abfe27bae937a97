// HTML form posts from the pages, beside the JSON API at the same URLs. A route opts in with
// `config: { form: true }` (or a function turning the form's fields into the route's JSON body);
// every other route keeps answering 415 to a form, as before. A form post must carry the
// session's CSRF token (`_csrf`, on top of the same-origin check every cookie-authenticated write
// gets), and is answered the browser way: a 303 redirect on success, and on failure a 303 back to
// the page it came from with the error shown beside the form and what was typed filled in again.
// A form post from a non-browser (no text/html in Accept) gets the JSON errors, as the API does.
import { timingSafeEqual } from 'node:crypto';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { errorMessage } from './errors.ts';
import { sameSitePath, setFlash, wantsHtml } from './negotiation.ts';

export type FormFields = Record<string, string | string[]>;

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Accept application/x-www-form-urlencoded; a function maps the fields to the JSON body. */
    form?: true | ((fields: FormFields) => unknown);
  }
  interface FastifyRequest {
    /** The fields of a form post (without `_csrf`), once parsed. */
    formFields?: FormFields;
  }
}

const FORM_TYPE = /^application\/x-www-form-urlencoded(\s*;.*)?$/i;
/** Fields never kept to fill a form in again. */
const SECRET_FIELD = /password|secret|token|private_key|_csrf/i;
const MAX_KEPT_VALUES = 2000;

export function isFormPost(request: FastifyRequest): boolean {
  const type = request.headers['content-type'];
  return request.method === 'POST' && typeof type === 'string' && FORM_TYPE.test(type);
}

/** A form post from a browser: answered with pages and redirects rather than JSON. */
export function isBrowserForm(request: FastifyRequest): boolean {
  return isFormPost(request) && wantsHtml(request);
}

export function parseForm(body: string): FormFields {
  const fields: FormFields = {};
  for (const [key, value] of new URLSearchParams(body)) {
    const had = fields[key];
    if (had === undefined) fields[key] = value;
    else fields[key] = Array.isArray(had) ? [...had, value] : [had, value];
  }
  return fields;
}

/** A field as one string ('' when absent; the first when repeated). */
export function field(fields: FormFields, name: string): string {
  const v = fields[name];
  return (Array.isArray(v) ? v[0] : v) ?? '';
}

/** A repeated field as a list (also from one value), trimmed, without empty entries. */
export function fieldList(fields: FormFields, name: string): string[] {
  const v = fields[name];
  const list = v === undefined ? [] : Array.isArray(v) ? v : [v];
  return list.map((s) => s.trim()).filter((s) => s !== '');
}

function sameToken(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The page a form was posted from (Referer, this site only), to go back to with an error. */
export function backTo(request: FastifyRequest, fallback = '/'): string {
  const referer = request.headers.referer;
  if (typeof referer !== 'string') return fallback;
  try {
    const url = new URL(referer);
    if (url.host !== request.host) return fallback;
    return sameSitePath(url.pathname + url.search);
  } catch {
    return fallback;
  }
}

/** Redirect after a successful form post, with an optional notice for the next page. */
export function formDone(request: FastifyRequest, reply: FastifyReply, to: string, notice?: string) {
  if (notice) setFlash(request, { kind: 'notice', message: notice });
  return reply.redirect(to, 303);
}

/**
 * Lets the routes of `instance` (one route plugin) accept form posts: the form body parser and an
 * error handler that answers browsers' form posts with a redirect and JSON callers as before.
 */
export function acceptForms(instance: FastifyInstance): void {
  instance.addContentTypeParser(FORM_TYPE, { parseAs: 'string' }, (request, body, done) => {
    const form = request.routeOptions.config.form;
    if (!form) {
      const err = new Error('Unsupported content type') as Error & { statusCode: number; code: string };
      err.statusCode = 415;
      err.code = 'FST_ERR_CTP_INVALID_MEDIA_TYPE';
      return done(err, undefined);
    }
    const fields = parseForm(body as string);
    const sent = field(fields, '_csrf');
    const expected = request.session.get('csrf');
    delete fields._csrf;
    request.formFields = fields;
    if (!expected || !sameToken(sent, expected)) {
      const err = new Error('This form has expired: reload the page and try again') as Error & {
        statusCode: number;
      };
      err.statusCode = 403;
      return done(err, undefined);
    }
    const data = { ...fields };
    delete data._form;
    try {
      done(null, form === true ? data : form(data));
    } catch (e) {
      const err = e as Error & { statusCode?: number };
      err.statusCode ??= 400;
      done(err, undefined);
    }
  });

  const parent = instance.errorHandler;
  instance.setErrorHandler(function (this: FastifyInstance, error: FastifyError, request, reply) {
    if (!isBrowserForm(request)) return parent.call(this, error, request, reply);
    const { status, message } = errorMessage(error);
    if (status >= 500) request.log.error({ err: error }, 'form post failed');
    else request.log.info({ status, error: message }, 'form post refused');
    // Signed out meanwhile (on the sign-in forms themselves a 401 is a wrong password instead).
    if (status === 401 && request.routeOptions.config.auth !== 'public') {
      return reply.redirect(`/login?next=${encodeURIComponent(backTo(request))}`, 303);
    }
    const fields = request.formFields ?? {};
    const values: FormFields = {};
    for (const [k, v] of Object.entries(fields)) if (!SECRET_FIELD.test(k)) values[k] = v;
    const keep = JSON.stringify(values).length <= MAX_KEPT_VALUES;
    setFlash(request, {
      kind: 'error',
      message,
      form: typeof fields._form === 'string' ? fields._form : undefined,
      values: keep ? values : undefined,
    });
    return reply.redirect(backTo(request), 303);
  });
}
