// Ad-hoc SQL against a test coordinator's database, through the coordinator's own ORM connection.
import type { TestCoordinator } from './coordinator.ts';

/** The rows `query` returns (`?` placeholders bound to `params`), on a fresh entity manager. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- rows of ad-hoc SQL
export async function sql(coord: TestCoordinator, query: string, params: unknown[] = []): Promise<any[]> {
  return coord.orm.em.fork().execute(query, params);
}
