// Webhook signatures: `X-Hub-Signature-256: sha256=<hex>`, an HMAC-SHA256 of the raw request body
// keyed with the project's webhook secret (GitHub, Gitea, Forgejo and Gogs all send this form).
// Verification runs on the exact bytes received, before anything parses the body.

import { createHmac, timingSafeEqual } from 'node:crypto';

const PREFIX = 'sha256=';
const HEADER_PATTERN = /^sha256=[0-9a-fA-F]{64}$/;

function hmacSha256(secret: string, rawBody: Buffer): Buffer {
  return createHmac('sha256', secret).update(rawBody).digest();
}

/** The `X-Hub-Signature-256` value for `rawBody`: `sha256=` and 64 lower-case hex digits. */
export function signHubSignature256(secret: string, rawBody: Buffer): string {
  return PREFIX + hmacSha256(secret, rawBody).toString('hex');
}

/**
 * Whether `header` is a valid `X-Hub-Signature-256` of `rawBody` under `secret`. Anything other
 * than exactly `sha256=` + 64 hex digits (either case) is false; never throws.
 */
export function verifyHubSignature256(secret: string, rawBody: Buffer, header: string | undefined): boolean {
  if (typeof header !== 'string' || !HEADER_PATTERN.test(header)) return false;
  try {
    const given = Buffer.from(header.slice(PREFIX.length), 'hex');
    const expected = hmacSha256(secret, rawBody);
    // Both are 32 bytes once the pattern matched; checked anyway since timingSafeEqual throws otherwise.
    if (given.length !== expected.length) return false;
    return timingSafeEqual(given, expected);
  } catch {
    return false;
  }
}

/** Which header carried the credential a delivery was checked against. */
export type SignatureScheme =
  'x-hub-signature-256' | 'x-gitea-signature' | 'x-gogs-signature' | 'x-gitlab-token';

const HEX_64 = /^[0-9a-fA-F]{64}$/;

function verifyPlainHex(secret: string, rawBody: Buffer, header: string): boolean {
  if (!HEX_64.test(header)) return false;
  return timingSafeEqual(Buffer.from(header, 'hex'), hmacSha256(secret, rawBody));
}

/** Constant-time comparison of two strings of any length (hashed to equal lengths first). */
function sameSecret(given: string, secret: string): boolean {
  const a = createHmac('sha256', 'deckhand').update(given).digest();
  const b = createHmac('sha256', 'deckhand').update(secret).digest();
  return timingSafeEqual(a, b);
}

/**
 * Verifies a delivery by the first credential header present, in the order forges send them:
 * `X-Hub-Signature-256` (GitHub, Gitea, Forgejo, Gogs), `X-Gitea-Signature` and
 * `X-Gogs-Signature` (HMAC-SHA256 hex without a prefix), `X-Gitlab-Token` (the secret itself,
 * compared in constant time). No credential, or a wrong one: not verified. Never throws.
 */
export function verifyDelivery(
  secret: string,
  rawBody: Buffer,
  headers: Record<string, string | string[] | undefined>,
): { ok: boolean; scheme: SignatureScheme | null } {
  const first = (name: SignatureScheme) => {
    const v = headers[name];
    return typeof v === 'string' ? v.trim() : Array.isArray(v) ? (v[0] ?? '').trim() : undefined;
  };
  const hub = first('x-hub-signature-256');
  if (hub !== undefined)
    return { ok: verifyHubSignature256(secret, rawBody, hub), scheme: 'x-hub-signature-256' };
  for (const scheme of ['x-gitea-signature', 'x-gogs-signature'] as const) {
    const value = first(scheme);
    if (value !== undefined) return { ok: verifyPlainHex(secret, rawBody, value), scheme };
  }
  const gitlab = first('x-gitlab-token');
  if (gitlab !== undefined)
    return { ok: gitlab.length > 0 && sameSecret(gitlab, secret), scheme: 'x-gitlab-token' };
  return { ok: false, scheme: null };
}
