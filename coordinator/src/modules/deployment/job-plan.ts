// A running deployment's row as the job code reads it, the step plan of its jobs — the same plan
// the agents follow (protocol/src/step-plan.ts), derived from the deployment's snapshot — and how
// its hosts' jobs decide its end.
import { planSteps } from '@deckhand/protocol';
import type { DeploymentSnapshot, DeploymentStatus, JobStatus } from './deployment.entity.ts';

export interface DeploymentRow {
  id: string;
  project_id: string;
  commit: string;
  branch: string;
  kind: 'deploy' | 'rollback';
  rollback_to: string | null;
  snapshot: DeploymentSnapshot;
}

export const DEPLOYMENT_COLUMNS = 'id, project_id, commit, branch, kind, rollback_to, snapshot';

export function planOf(d: DeploymentRow) {
  const releases = d.snapshot.policies?.releases ?? null;
  return planSteps({
    commit: d.commit,
    commands: d.snapshot.commands,
    kind: d.kind,
    release: d.kind === 'rollback' ? d.rollback_to : d.id,
    releases: releases ? { keep: releases.keep, healthCheck: releases.health_check } : null,
  });
}

/**
 * The deployment's end from its hosts' jobs: success only when every host succeeded; a cancel or
 * deadline that was asked for decides otherwise, with its reason.
 */
export function deploymentOutcome(
  jobs: Array<{ host: string; status: JobStatus; reason: string | null }>,
  commit: string,
  cancel: { as: 'cancelled' | 'timed_out'; reason: string } | null = null,
): { status: DeploymentStatus; reason: string } {
  const hosts = jobs.map((j) => j.host).join(', ');
  if (jobs.every((j) => j.status === 'success')) {
    return { status: 'success', reason: `Deployed ${commit.slice(0, 12)} to ${hosts}` };
  }
  const bad = jobs.filter((j) => j.status !== 'success');
  const detail = bad.map((j) => `${j.host}: ${j.reason ?? j.status}`).join('; ');
  if (cancel) return { status: cancel.as, reason: cancel.reason };
  const status: DeploymentStatus = bad.some((j) => j.status === 'timed_out')
    ? 'timed_out'
    : bad.every((j) => j.status === 'cancelled')
      ? 'cancelled'
      : 'failed';
  return { status, reason: detail };
}

/** A PostgreSQL array literal of uuids (MikroORM spreads JS arrays into separate parameters). */
export function uuidArray(ids: string[]): string {
  if (!ids.every((id) => /^[0-9a-f-]{36}$/i.test(id))) throw new Error('not a uuid list');
  return `{${ids.join(',')}}`;
}
