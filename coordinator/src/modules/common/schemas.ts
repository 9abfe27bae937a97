// TypeBox building blocks shared by route schemas: the response envelope and common fields.
import Type, { type TSchema } from 'typebox';

export const Uuid = Type.String({ format: 'uuid' });

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** An id as the database keeps them; anything else cannot name a row (a 404, not a query error). */
export const isUuid = (v: unknown): v is string => typeof v === 'string' && UUID.test(v);
export const Timestamp = Type.String({ format: 'date-time', description: 'ISO 8601, UTC, milliseconds, Z' });
export const NullableTimestamp = Type.Union([Timestamp, Type.Null()]);

export const ErrorBody = Type.Object({ success: Type.Literal(false), error: Type.String() });

/** `{success: true, ...fields}` */
export function Ok<T extends Record<string, TSchema>>(fields: T) {
  return Type.Object({ success: Type.Literal(true), ...fields });
}

/** The usual error statuses a route can answer, all with the error envelope. */
export function errors(...codes: number[]): Record<number, typeof ErrorBody> {
  return Object.fromEntries(codes.map((c) => [c, ErrorBody]));
}

export const iso = (d: Date): string => d.toISOString();
export const isoOrNull = (d: Date | null | undefined): string | null => (d ? d.toISOString() : null);
