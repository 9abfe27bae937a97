// `deckhand-agent`: the daemon on a deploy target. This milestone ships its configuration (flags,
// environment, the no-plaintext rule); connecting and running jobs come with the agents milestone.
import { PROTOCOL_VERSION } from '@deckhand/protocol';
import { AgentConfigError, loadAgentConfig } from './config.ts';

try {
  const config = loadAgentConfig(process.argv.slice(2), process.env);
  console.log(
    `deckhand-agent (protocol ${PROTOCOL_VERSION}) configured for ${config.url.origin}; this release cannot connect yet — agents arrive with the next milestone.`,
  );
  process.exit(1);
} catch (err) {
  if (err instanceof AgentConfigError || (err instanceof Error && 'code' in err)) {
    console.error(err.message);
    process.exit(2);
  }
  throw err;
}
