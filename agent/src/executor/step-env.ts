// The environments steps run with. Commands get the agent's own environment, the deployment's
// (secrets included), then the DECKHAND_* variables, which the deployment cannot override. The
// agent's token is never passed on, nor where its file is: a deploy command has no business
// holding it.
import type { JobAssign } from '@deckhand/protocol';

function agentEnv(base: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env = { ...base };
  delete env.DECKHAND_TOKEN;
  delete env.DECKHAND_TOKEN_FILE;
  return env;
}

export function commandEnv(base: NodeJS.ProcessEnv, job: JobAssign): NodeJS.ProcessEnv {
  return {
    ...agentEnv(base),
    ...job.env,
    DECKHAND_DEPLOYMENT_ID: job.deploymentId,
    DECKHAND_JOB_ID: job.jobId,
    DECKHAND_COMMIT: job.repository.commit,
    DECKHAND_BRANCH: job.repository.branch,
    DECKHAND_PROJECT: job.project.name,
    DECKHAND_PROJECT_ID: job.project.id,
  };
}

/** git gets the agent's environment only (not the deployment's), and never prompts for a password. */
export function gitEnv(base: NodeJS.ProcessEnv, sshCommand: string | undefined): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...agentEnv(base), GIT_TERMINAL_PROMPT: '0' };
  if (sshCommand !== undefined) env.GIT_SSH_COMMAND = sshCommand;
  return env;
}
