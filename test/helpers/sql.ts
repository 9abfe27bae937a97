// Ad-hoc SQL against a test coordinator's database, through the coordinator's own ORM connection.
import type { TestCoordinator } from './coordinator.ts';

/**
 * A log entry's whole output as SQL (entry alias `e`): its chunks in order, or the one value
 * entries without chunks hold (skipped ones).
 */
export const ENTRY_OUTPUT = `coalesce(e.output, (select string_agg(c.data, ''::bytea order by c."offset")
                                     from log_chunks c where c.log_entry_id = e.id), ''::bytea)`;

/** The rows `query` returns (`?` placeholders bound to `params`), on a fresh entity manager. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- rows of ad-hoc SQL
export async function sql(coord: TestCoordinator, query: string, params: unknown[] = []): Promise<any[]> {
  return coord.orm.em.fork().execute(query, params);
}
