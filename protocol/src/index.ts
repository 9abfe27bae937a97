// @deckhand/protocol — the contract between coordinator and agents: the version, one schema per
// message (messages/), the codec, close codes, the lifecycle (lifecycle.ts) and the step plan.
// It imports nothing of ours.
export { PROTOCOL_VERSION } from './version.ts';
export * from './close-codes.ts';
export * from './codec.ts';
export * from './lifecycle.ts';
export * from './masking.ts';
export * from './messages/agent.ts';
export * from './messages/coordinator.ts';
export * from './step-plan.ts';
