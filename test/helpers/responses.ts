// What the API's answers look like (API.md "Conventions"), for assertions shared by the suites.
import { expect } from 'vitest';
import type { HttpResponse } from './coordinator.ts';

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/**
 * A JSON error answer: `status`, application/json, and exactly `{success: false, error}` — with
 * that `error` when given, otherwise any non-empty string.
 */
export function expectJsonError(res: HttpResponse, status: number, error?: string) {
  expect(res.status, res.text).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  if (error !== undefined) {
    expect(res.json).toEqual({ success: false, error });
  } else {
    expect(Object.keys(res.json).sort()).toEqual(['error', 'success']);
    expect(res.json.success).toBe(false);
    expect(typeof res.json.error).toBe('string');
    expect(res.json.error.length).toBeGreaterThan(0);
  }
}

/** The Set-Cookie header for the session cookie (`connect.sid`), if the answer sets it. */
export function sessionCookieHeader(res: HttpResponse): string | undefined {
  return res.headers.getSetCookie().find((c) => c.startsWith('connect.sid='));
}

/** The attributes of a Set-Cookie header, lower-cased names → values ('' for flags). */
export function cookieAttributes(setCookie: string): Map<string, string> {
  const attrs = new Map<string, string>();
  for (const part of setCookie.split(';').slice(1)) {
    const [name, ...value] = part.trim().split('=');
    attrs.set(name!.toLowerCase(), value.join('='));
  }
  return attrs;
}
