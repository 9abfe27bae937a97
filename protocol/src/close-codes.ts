// WebSocket close codes of the agent connection. 1000/1001 are the standard ones; the 44xx codes
// mirror the HTTP status with the same meaning so they read at a glance.
export const CloseCode = {
  /** Normal closure (the agent is stopping). */
  NORMAL: 1000,
  /** The coordinator is shutting down: reconnect (to it or another replica). */
  GOING_AWAY: 1001,
  /** A frame was not valid JSON, not a known message, or broke its schema or the lifecycle. */
  BAD_FRAME: 4400,
  /** The token is unknown or was revoked: do not retry with it. */
  UNAUTHORIZED: 4401,
  /** Another connection of the same agent replaced this one. */
  REPLACED: 4409,
  /** A frame exceeded MAX_FRAME_BYTES. */
  TOO_LARGE: 4413,
  /** The protocol versions differ: upgrade the agent (or the coordinator), as the reason says. */
  VERSION_MISMATCH: 4426,
} as const;
export type CloseCode = (typeof CloseCode)[keyof typeof CloseCode];

/** Close codes after which reconnecting with the same token and version is pointless. */
export const FATAL_CLOSE_CODES: ReadonlySet<number> = new Set([
  CloseCode.UNAUTHORIZED,
  CloseCode.VERSION_MISMATCH,
]);

/** The largest frame either side accepts. */
export const MAX_FRAME_BYTES = 1024 * 1024;
