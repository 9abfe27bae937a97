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
