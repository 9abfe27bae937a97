// The agent⇄coordinator protocol version: one integer, bumped on every incompatible change to
// the messages in this package. The handshake compares it before anything else.
export const PROTOCOL_VERSION = 3;
