import { createHmac } from 'node:crypto';
import { sign, verify } from '@octokit/webhooks-methods';
import { describe, expect, it } from 'vitest';
import {
  signHubSignature256,
  verifyHubSignature256,
} from '../../coordinator/src/modules/webhook/signature.ts';
import { pushes } from '../helpers/github-examples.ts';

// GitHub's published test vector (docs: "Validating webhook deliveries").
const VECTOR_SECRET = "It's a Secret to Everybody";
const VECTOR_PAYLOAD = 'Hello, World!';
const VECTOR_SIGNATURE = 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17';

const pushBodies = pushes.map((example) => JSON.stringify(example));

describe('signHubSignature256', () => {
  it("matches GitHub's published test vector", () => {
    expect(signHubSignature256(VECTOR_SECRET, Buffer.from(VECTOR_PAYLOAD))).toBe(VECTOR_SIGNATURE);
  });

  it('is sha256= and 64 lower-case hex digits', () => {
    expect(signHubSignature256('s', Buffer.from('x'))).toMatch(/^sha256=[0-9a-f]{64}$/);
  });

  it('signs bytes, not text: non-UTF-8 bodies are signed as received', () => {
    const latin1 = Buffer.from([0x63, 0x61, 0x66, 0xe9]); // "café" in Latin-1, invalid UTF-8
    const utf8Replacement = Buffer.from(latin1.toString('utf8'));
    expect(signHubSignature256('s', latin1)).not.toBe(signHubSignature256('s', utf8Replacement));
    expect(verifyHubSignature256('s', latin1, signHubSignature256('s', latin1))).toBe(true);
    expect(verifyHubSignature256('s', utf8Replacement, signHubSignature256('s', latin1))).toBe(false);
  });
});

describe('verifyHubSignature256', () => {
  const body = Buffer.from(VECTOR_PAYLOAD);

  it("accepts GitHub's published test vector", () => {
    expect(verifyHubSignature256(VECTOR_SECRET, body, VECTOR_SIGNATURE)).toBe(true);
  });

  it('accepts upper-case hex', () => {
    const upper = `sha256=${VECTOR_SIGNATURE.slice('sha256='.length).toUpperCase()}`;
    expect(upper).not.toBe(VECTOR_SIGNATURE);
    expect(verifyHubSignature256(VECTOR_SECRET, body, upper)).toBe(true);
  });

  it('rejects the wrong secret', () => {
    expect(verifyHubSignature256("It's a Secret to Nobody", body, VECTOR_SIGNATURE)).toBe(false);
    expect(verifyHubSignature256('', body, VECTOR_SIGNATURE)).toBe(false);
  });

  it('rejects a body with one byte changed', () => {
    const tampered = Buffer.from(body);
    tampered[0] = tampered[0]! ^ 0x01;
    expect(verifyHubSignature256(VECTOR_SECRET, tampered, VECTOR_SIGNATURE)).toBe(false);
    expect(
      verifyHubSignature256(VECTOR_SECRET, Buffer.concat([body, Buffer.from('\n')]), VECTOR_SIGNATURE),
    ).toBe(false);
  });

  it('rejects a signature with one hex digit changed', () => {
    const last = VECTOR_SIGNATURE.at(-1) === '7' ? '8' : '7';
    expect(verifyHubSignature256(VECTOR_SECRET, body, VECTOR_SIGNATURE.slice(0, -1) + last)).toBe(false);
  });

  it('rejects a missing or empty header', () => {
    expect(verifyHubSignature256(VECTOR_SECRET, body, undefined)).toBe(false);
    expect(verifyHubSignature256(VECTOR_SECRET, body, '')).toBe(false);
    expect(verifyHubSignature256(VECTOR_SECRET, body, 'sha256=')).toBe(false);
  });

  it('rejects a sha1= header, even one that is a correct SHA-1 HMAC', () => {
    const sha1 = `sha1=${createHmac('sha1', VECTOR_SECRET).update(body).digest('hex')}`;
    expect(verifyHubSignature256(VECTOR_SECRET, body, sha1)).toBe(false);
    // The right SHA-256 digest under the wrong algorithm name is not accepted either.
    expect(verifyHubSignature256(VECTOR_SECRET, body, VECTOR_SIGNATURE.replace('sha256=', 'sha1='))).toBe(
      false,
    );
  });

  it('rejects truncated and over-long hex', () => {
    expect(verifyHubSignature256(VECTOR_SECRET, body, VECTOR_SIGNATURE.slice(0, -1))).toBe(false);
    expect(verifyHubSignature256(VECTOR_SECRET, body, VECTOR_SIGNATURE.slice(0, -2))).toBe(false);
    expect(verifyHubSignature256(VECTOR_SECRET, body, VECTOR_SIGNATURE.slice(0, 'sha256='.length + 32))).toBe(
      false,
    );
    expect(verifyHubSignature256(VECTOR_SECRET, body, `${VECTOR_SIGNATURE}00`)).toBe(false);
  });

  it('rejects non-hex digits without throwing', () => {
    const nonHex = `${VECTOR_SIGNATURE.slice(0, -1)}g`;
    expect(() => verifyHubSignature256(VECTOR_SECRET, body, nonHex)).not.toThrow();
    expect(verifyHubSignature256(VECTOR_SECRET, body, nonHex)).toBe(false);
    expect(verifyHubSignature256(VECTOR_SECRET, body, `sha256=${'z'.repeat(64)}`)).toBe(false);
  });

  it('rejects other garbled headers', () => {
    const hex = VECTOR_SIGNATURE.slice('sha256='.length);
    for (const header of [
      hex, // no prefix (the form Gogs puts in X-Gogs-Signature)
      `SHA256=${hex}`,
      `sha256:${hex}`,
      ` ${VECTOR_SIGNATURE}`,
      `${VECTOR_SIGNATURE} `,
      `${VECTOR_SIGNATURE}\n`,
      `sha256= ${hex.slice(1)}`,
      `sha256=${Buffer.from(hex, 'hex').toString('base64')}`,
      `${VECTOR_SIGNATURE},${VECTOR_SIGNATURE}`,
    ]) {
      expect(verifyHubSignature256(VECTOR_SECRET, body, header), header).toBe(false);
    }
  });

  it('handles an empty body', () => {
    const empty = Buffer.alloc(0);
    expect(verifyHubSignature256('s', empty, signHubSignature256('s', empty))).toBe(true);
    expect(verifyHubSignature256('s', empty, signHubSignature256('s', Buffer.from(' ')))).toBe(false);
  });
});

describe("interoperability with @octokit/webhooks-methods on GitHub's push examples", () => {
  const secret = 'deckhand webhook secret \u2603';

  it('found the push examples', () => {
    expect(pushBodies.length).toBe(7);
  });

  it.each(pushBodies.map((text, index) => [index, text] as const))(
    'example %i: octokit sign() verifies here, our sign verifies with octokit verify()',
    async (_index, text) => {
      const raw = Buffer.from(text, 'utf8');
      const theirs = await sign(secret, text);
      const ours = signHubSignature256(secret, raw);
      expect(ours).toBe(theirs);
      expect(verifyHubSignature256(secret, raw, theirs)).toBe(true);
      expect(await verify(secret, text, ours)).toBe(true);

      // Both sides reject the other's signature over a different body or secret.
      const altered = Buffer.from(`${text} `, 'utf8');
      expect(verifyHubSignature256(secret, altered, theirs)).toBe(false);
      expect(await verify(secret, altered.toString('utf8'), ours)).toBe(false);
      expect(verifyHubSignature256(`${secret}!`, raw, theirs)).toBe(false);
      expect(await verify(`${secret}!`, text, ours)).toBe(false);
    },
  );
});
