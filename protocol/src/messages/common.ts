// Field types the messages share.
import Type from 'typebox';

export const Id = Type.String({ format: 'uuid' });
/** A step's index in the job's plan: 0 is the checkout, 1..n the commands. */
export const StepIndex = Type.Integer({ minimum: 0, maximum: 10_000 });
/** A byte offset into a step's output. */
export const ByteOffset = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
