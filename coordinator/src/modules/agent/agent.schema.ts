// What an agent's name and labels may be: one rule for the API's bodies (routes/agents.ts) and the
// server-side `npm run agent:create` (cli/agent-create.ts), which must not loosen it.
import Type from 'typebox';

export const AGENT_NAME = { pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$', maxLength: 100 } as const;
export const AGENT_LABEL = { pattern: '^[A-Za-z0-9][A-Za-z0-9_.:-]*$', maxLength: 63 } as const;
export const AGENT_LABELS_MAX = 50;

export const AgentName = Type.String({ minLength: 1, ...AGENT_NAME });
export const AgentLabels = Type.Array(Type.String({ minLength: 1, ...AGENT_LABEL }), {
  maxItems: AGENT_LABELS_MAX,
});
