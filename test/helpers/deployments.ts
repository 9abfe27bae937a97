// Manual deployments for the deployment suites, as the admin of a test coordinator.
import { expect } from 'vitest';
import { type CoordinatorWithAdmin, createProject } from './coordinator.ts';

/** Project and deployment helpers bound to `api`'s admin (use them inside tests and hooks). */
export function deploymentTools(api: CoordinatorWithAdmin) {
  return {
    /** Creates a project from `sampleProject(overrides)`: the project as answered. */
    async createProject(overrides: Record<string, unknown> = {}) {
      return (await createProject(api.admin, overrides)).json.project as {
        id: string;
        name: string;
        forge_url: string;
        branch_name: string;
      };
    },

    /** POST /deploy of the project, expecting 200: the deployment id. */
    async deploy(projectId: string, extra: Record<string, unknown> = {}): Promise<string> {
      const res = await api.admin.post('/deploy', { projectId, ...extra });
      expect(res.status, res.text).toBe(200);
      return res.json.deployId as string;
    },
  };
}
