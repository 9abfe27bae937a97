// Webhook payloads for the tests: GitHub's real examples, read from @octokit/webhooks-examples
// (never copied here), and the other forges' push payloads kept in test/fixtures/webhooks.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

export type Payload = Record<string, unknown>;
type ExampleGroup = { name: string; examples: Payload[] };

let groups: ExampleGroup[] | undefined;

/** GitHub's real example payloads for the event `name` (push, ping, issues, ...). */
export function githubExamples(name: string): Payload[] {
  if (!groups) {
    const file = createRequire(import.meta.url).resolve('@octokit/webhooks-examples');
    groups = JSON.parse(readFileSync(file, 'utf8')) as ExampleGroup[];
  }
  const group = groups.find((candidate) => candidate.name === name);
  if (!group || group.examples.length === 0) {
    throw new Error(`no ${name} examples in @octokit/webhooks-examples`);
  }
  return group.examples;
}

/** Every push example. */
export const pushes = githubExamples('push');
/** A push to the branch master (the commit below). */
export const branchPush = pushes.find((p) => p.ref === 'refs/heads/master' && p.deleted === false)!;
/** The creation of the tag simple-tag. */
export const tagPush = pushes.find((p) => p.ref === 'refs/tags/simple-tag' && p.created === true)!;
/** The deletion of the tag simple-tag. */
export const tagDelete = pushes.find((p) => p.ref === 'refs/tags/simple-tag' && p.deleted === true)!;
/** The commit `branchPush` pushes. */
export const PUSHED = '6113728f27ae82c7b1a177c8d03f9e96e0adf246';
export const ping = githubExamples('ping')[0]!;
export const issues = githubExamples('issues')[0]!;

/** A payload from test/fixtures/webhooks: each forge's documented example, its source in a sibling .md. */
export function webhookFixture(name: string): Payload {
  return JSON.parse(
    readFileSync(new URL(`../fixtures/webhooks/${name}`, import.meta.url), 'utf8'),
  ) as Payload;
}
