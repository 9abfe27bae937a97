import { describe, expect, it } from 'vitest';
import {
  decidePush,
  type HeaderBag,
  parseWebhookBody,
  readDeliveryMeta,
  type WebhookDecision,
  webhookReply,
} from '../../coordinator/src/modules/webhook/push-event.ts';
import {
  branchPush,
  issues,
  type Payload,
  ping,
  tagDelete,
  tagPush,
  webhookFixture,
} from '../helpers/github-examples.ts';

/** A real branch push turned into the deletion of another branch, as GitHub sends it. */
function deletionOf(branch: string): Payload {
  return {
    ...branchPush,
    ref: `refs/heads/${branch}`,
    before: branchPush.after,
    after: '0000000000000000000000000000000000000000',
    created: false,
    deleted: true,
    commits: [],
    head_commit: null,
  };
}

describe('the GitHub examples used here', () => {
  it('are the ones expected', () => {
    expect(branchPush).toBeDefined();
    expect(tagPush).toBeDefined();
    expect(tagDelete).toBeDefined();
    expect(branchPush.after).toBe('6113728f27ae82c7b1a177c8d03f9e96e0adf246');
    expect(ping.zen).toBeTypeOf('string');
    expect(issues.action).toBeTypeOf('string');
  });
});

describe('readDeliveryMeta', () => {
  it('reads a GitHub delivery', () => {
    expect(
      readDeliveryMeta({
        'x-github-event': 'push',
        'x-github-delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958',
        'x-github-hook-id': '292430182',
        'x-hub-signature-256': 'sha256=00',
      }),
    ).toEqual({ forge: 'github', event: 'push', deliveryId: '72d3162e-cc78-11e3-81ab-4c9367dc0958' });
  });

  it('calls a Gitea delivery gitea although it also sends the GitHub and Gogs headers', () => {
    const headers: HeaderBag = {
      'x-github-event': 'push',
      'x-github-delivery': 'a1b2',
      'x-gitea-event': 'push',
      'x-gitea-delivery': 'a1b2',
      'x-gogs-event': 'push',
      'x-gogs-delivery': 'a1b2',
    };
    expect(readDeliveryMeta(headers)).toEqual({ forge: 'gitea', event: 'push', deliveryId: 'a1b2' });
  });

  it('calls a Forgejo delivery forgejo', () => {
    const headers: HeaderBag = {
      'x-forgejo-event': 'push',
      'x-forgejo-delivery': 'f-1',
      'x-gitea-event': 'push',
      'x-gitea-delivery': 'f-1',
      'x-gogs-event': 'push',
      'x-github-event': 'push',
    };
    expect(readDeliveryMeta(headers)).toEqual({ forge: 'forgejo', event: 'push', deliveryId: 'f-1' });
  });

  it('reads a Gogs delivery', () => {
    expect(readDeliveryMeta({ 'x-gogs-event': 'create', 'x-gogs-delivery': 'g-7' })).toEqual({
      forge: 'gogs',
      event: 'create',
      deliveryId: 'g-7',
    });
  });

  it("maps GitLab's Push Hook to push and reads its event UUID", () => {
    expect(
      readDeliveryMeta({
        'x-gitlab-event': 'Push Hook',
        'x-gitlab-event-uuid': '13792a34-cac6-4fda-95a8-c58e00a3954e',
        'x-gitlab-webhook-uuid': 'ignored-hook-uuid',
      }),
    ).toEqual({ forge: 'gitlab', event: 'push', deliveryId: '13792a34-cac6-4fda-95a8-c58e00a3954e' });
    expect(readDeliveryMeta({ 'x-gitlab-event': 'Tag Push Hook' }).event).toBe('Tag Push Hook');
  });

  it('reads the generic X-Forge-* headers as an unknown forge', () => {
    expect(readDeliveryMeta({ 'x-forge-event': 'push', 'x-forge-delivery': 'd-9' })).toEqual({
      forge: 'unknown',
      event: 'push',
      deliveryId: 'd-9',
    });
  });

  it('takes the first present header in order', () => {
    expect(readDeliveryMeta({ 'x-forge-event': 'ping', 'x-gogs-event': 'push' }).event).toBe('push');
    expect(readDeliveryMeta({ 'x-forge-delivery': 'last', 'x-gitea-delivery': 'first' }).deliveryId).toBe(
      'first',
    );
  });

  it('has nothing when no header is present', () => {
    expect(readDeliveryMeta({ 'content-type': 'application/json' })).toEqual({
      forge: 'unknown',
      event: null,
      deliveryId: null,
    });
  });

  it('skips blank values, trims, and takes the first value of a repeated header', () => {
    expect(readDeliveryMeta({ 'x-github-event': '  ', 'x-gitea-event': ' push ' })).toEqual({
      forge: 'gitea',
      event: 'push',
      deliveryId: null,
    });
    expect(
      readDeliveryMeta({ 'x-github-event': ['', 'ping', 'push'], 'x-github-delivery': ['d1', 'd2'] }),
    ).toEqual({ forge: 'github', event: 'ping', deliveryId: 'd1' });
    expect(readDeliveryMeta({ 'x-github-event': undefined, 'x-github-delivery': [] })).toEqual({
      forge: 'unknown',
      event: null,
      deliveryId: null,
    });
  });

  it('bounds what it takes from headers', () => {
    const meta = readDeliveryMeta({
      'x-github-event': 'e'.repeat(5000),
      'x-github-delivery': 'd'.repeat(201),
    });
    expect(meta.event).toBe('e'.repeat(100));
    expect(meta.deliveryId).toBeNull();
    expect(readDeliveryMeta({ 'x-github-delivery': 'd'.repeat(200) }).deliveryId).toBe('d'.repeat(200));
  });
});

describe('parseWebhookBody', () => {
  const json = 'application/json';

  it('parses a JSON object', () => {
    const text = JSON.stringify(branchPush);
    expect(parseWebhookBody(Buffer.from(text), json)).toEqual(branchPush);
    expect(parseWebhookBody(Buffer.from(text), 'application/json; charset=utf-8')).toEqual(branchPush);
    expect(parseWebhookBody(Buffer.from(text), undefined)).toEqual(branchPush);
    expect(parseWebhookBody(Buffer.from(`\uFEFF  ${text}\n`), json)).toEqual(branchPush);
  });

  it.each([
    ['empty', ''],
    ['whitespace', ' \n\t '],
    ['null', 'null'],
    ['an array', '[]'],
    ['an array of objects', '[{"ref":"refs/heads/main"}]'],
    ['a number', '42'],
    ['a string', '"push"'],
    ['true', 'true'],
    ['invalid JSON', '{"ref": "refs/heads/main",'],
    ['not JSON at all', 'hello'],
  ])('is null for %s', (_name, text) => {
    expect(parseWebhookBody(Buffer.from(text), json)).toBeNull();
    expect(parseWebhookBody(Buffer.from(text), undefined)).toBeNull();
  });

  it("parses GitHub's form-encoded variant", () => {
    const body = new URLSearchParams({ payload: JSON.stringify(branchPush) }).toString();
    expect(body.startsWith('payload=%7B')).toBe(true);
    expect(parseWebhookBody(Buffer.from(body), 'application/x-www-form-urlencoded')).toEqual(branchPush);
    expect(parseWebhookBody(Buffer.from(body), 'Application/X-WWW-Form-Urlencoded; charset=utf-8')).toEqual(
      branchPush,
    );
  });

  it('parses a form body sent without its content type', () => {
    const body = new URLSearchParams({ payload: '{"ref":"refs/heads/main","after":"abc1234"}' }).toString();
    expect(parseWebhookBody(Buffer.from(body), undefined)).toEqual({
      ref: 'refs/heads/main',
      after: 'abc1234',
    });
    expect(parseWebhookBody(Buffer.from(body), 'text/plain')).toEqual({
      ref: 'refs/heads/main',
      after: 'abc1234',
    });
  });

  it('decodes + and percent escapes in the form payload', () => {
    const body = 'payload=%7B%22message%22%3A%22a+b%C3%A9%22%7D';
    expect(parseWebhookBody(Buffer.from(body), 'application/x-www-form-urlencoded')).toEqual({
      message: 'a bé',
    });
  });

  it.each([
    ['no payload field', 'other=1'],
    ['an empty payload', 'payload='],
    ['a payload that is not JSON', 'payload=hello'],
    ['a payload that is an array', 'payload=%5B%5D'],
    ['a payload that is null', 'payload=null'],
  ])('is null for a form with %s', (_name, body) => {
    expect(parseWebhookBody(Buffer.from(body), 'application/x-www-form-urlencoded')).toBeNull();
  });

  it('reads a JSON body mislabelled as a form (as `curl -d` sends it)', () => {
    const body = Buffer.from('{"ref":"refs/heads/main"}');
    expect(parseWebhookBody(body, 'application/x-www-form-urlencoded')).toEqual({ ref: 'refs/heads/main' });
  });
});

describe('decidePush on GitHub examples', () => {
  it('deploys a push to the project branch with its sha, pusher and head commit message', () => {
    expect(decidePush('push', branchPush, 'master')).toEqual({
      kind: 'deploy',
      branch: 'master',
      commit: '6113728f27ae82c7b1a177c8d03f9e96e0adf246',
      pusher: 'Codertocat',
      message: 'Initial commit',
    });
  });

  it('accepts the project branch written as a full ref', () => {
    expect(decidePush('push', branchPush, 'refs/heads/master')).toMatchObject({
      kind: 'deploy',
      branch: 'master',
    });
  });

  it('ignores a push to another branch', () => {
    expect(decidePush('push', branchPush, 'main')).toEqual({
      kind: 'ignored',
      reason: 'branch master is not deployed',
    });
    expect(decidePush('push', branchPush, 'Master')).toEqual({
      kind: 'ignored',
      reason: 'branch master is not deployed',
    });
  });

  it('ignores tag pushes, created or deleted', () => {
    expect(decidePush('push', tagPush, 'master')).toEqual({
      kind: 'ignored',
      reason: 'tag push refs/tags/simple-tag',
    });
    expect(decidePush('push', tagDelete, 'master')).toEqual({
      kind: 'ignored',
      reason: 'tag push refs/tags/simple-tag',
    });
  });

  it('ignores the deletion of the project branch', () => {
    expect(decidePush('push', deletionOf('master'), 'master')).toEqual({
      kind: 'ignored',
      reason: 'branch master was deleted',
    });
  });

  it('takes an all-zero after as a deletion even without deleted: true', () => {
    const { deleted: _deleted, ...withoutFlag } = deletionOf('main');
    expect(decidePush('push', withoutFlag, 'main')).toEqual({
      kind: 'ignored',
      reason: 'branch main was deleted',
    });
    expect(decidePush('push', { ...branchPush, ref: 'refs/heads/main', deleted: true }, 'main')).toEqual({
      kind: 'ignored',
      reason: 'branch main was deleted',
    });
  });

  it('answers ping with pong', () => {
    expect(decidePush('ping', ping, 'master')).toEqual({ kind: 'pong' });
  });

  it('ignores other events', () => {
    expect(decidePush('issues', issues, 'master')).toEqual({ kind: 'ignored-event', event: 'issues' });
    expect(decidePush('create', branchPush, 'master')).toEqual({ kind: 'ignored-event', event: 'create' });
  });

  it('without an event header, deploys a payload that looks like a push', () => {
    expect(decidePush(null, branchPush, 'master')).toEqual({
      kind: 'deploy',
      branch: 'master',
      commit: '6113728f27ae82c7b1a177c8d03f9e96e0adf246',
      pusher: 'Codertocat',
      message: 'Initial commit',
    });
    expect(decidePush(null, tagPush, 'master')).toEqual({
      kind: 'ignored',
      reason: 'tag push refs/tags/simple-tag',
    });
  });

  it('without an event header, ignores a payload that does not look like a push as event unknown', () => {
    expect(decidePush(null, issues, 'master')).toEqual({ kind: 'ignored-event', event: 'unknown' });
    expect(decidePush(null, ping, 'master')).toEqual({ kind: 'ignored-event', event: 'unknown' });
    expect(decidePush(null, {}, 'master')).toEqual({ kind: 'ignored-event', event: 'unknown' });
  });

  it('looks at ref, after or commits alone to recognise a push', () => {
    expect(decidePush(null, { after: 'ABCDEF1' }, 'main')).toEqual({
      kind: 'deploy',
      branch: 'main',
      commit: null,
      pusher: null,
      message: null,
    });
    expect(decidePush(null, { commits: [] }, 'main')).toMatchObject({ kind: 'deploy', branch: 'main' });
    expect(decidePush(null, { ref: 'refs/heads/dev' }, 'main')).toEqual({
      kind: 'ignored',
      reason: 'branch dev is not deployed',
    });
  });
});

describe('decidePush on other forges', () => {
  it('deploys a Gitea push (pusher.login)', () => {
    expect(decidePush('push', webhookFixture('gitea-push.json'), 'develop')).toEqual({
      kind: 'deploy',
      branch: 'develop',
      commit: 'bffeb74224043ba2feb48d137756c8a9331c449a',
      pusher: 'gitea',
      message: 'Webhooks Yay!',
    });
  });

  it('deploys a GitLab push (user_username, message of the pushed commit)', () => {
    const meta = readDeliveryMeta({ 'x-gitlab-event': 'Push Hook' });
    expect(decidePush(meta.event, webhookFixture('gitlab-push.json'), 'master')).toEqual({
      kind: 'deploy',
      branch: 'master',
      commit: 'da1560886d4f094c3e6c9ef40349f7d38b5d27d7',
      pusher: 'jsmith',
      message: 'fixed readme',
    });
    expect(decidePush('Push Hook', webhookFixture('gitlab-push.json'), 'master')).toMatchObject({
      kind: 'deploy',
    });
  });

  it("falls back to GitLab's checkout_sha and user_name", () => {
    const { after: _after, user_username: _username, ...payload } = webhookFixture('gitlab-push.json');
    expect(decidePush('push', payload, 'master')).toEqual({
      kind: 'deploy',
      branch: 'master',
      commit: 'da1560886d4f094c3e6c9ef40349f7d38b5d27d7',
      pusher: 'John Smith',
      message: 'fixed readme',
    });
  });

  it('ignores a GitLab branch deletion (after all zeros, checkout_sha null)', () => {
    const payload = {
      ...webhookFixture('gitlab-push.json'),
      after: '0000000000000000000000000000000000000000',
      checkout_sha: null,
      commits: [],
    };
    expect(decidePush('push', payload, 'master')).toEqual({
      kind: 'ignored',
      reason: 'branch master was deleted',
    });
  });

  it('ignores a GitLab tag push event as an event', () => {
    const meta = readDeliveryMeta({ 'x-gitlab-event': 'Tag Push Hook' });
    expect(
      decidePush(meta.event, { ...webhookFixture('gitlab-push.json'), ref: 'refs/tags/v1.0' }, 'master'),
    ).toEqual({
      kind: 'ignored-event',
      event: 'Tag Push Hook',
    });
  });
});

describe('decidePush validation', () => {
  const base = { ref: 'refs/heads/main', after: 'a'.repeat(40) };

  it('takes a push without any ref as a push to the project branch, commit resolved later', () => {
    expect(decidePush('push', { pusher: { name: 'ann' } }, 'main')).toEqual({
      kind: 'deploy',
      branch: 'main',
      commit: null,
      pusher: 'ann',
      message: null,
    });
    expect(decidePush('push', { ref: null, after: 'b'.repeat(40) }, 'release/2')).toEqual({
      kind: 'deploy',
      branch: 'release/2',
      commit: null,
      pusher: null,
      message: null,
    });
  });

  it('ignores refs that are not branches', () => {
    expect(decidePush('push', { ...base, ref: 'refs/tags/v1.0' }, 'main')).toEqual({
      kind: 'ignored',
      reason: 'tag push refs/tags/v1.0',
    });
    expect(decidePush('push', { ...base, ref: 'refs/pull/1/head' }, 'main')).toEqual({
      kind: 'ignored',
      reason: 'ref refs/pull/1/head is not a branch',
    });
    expect(decidePush('push', { ...base, ref: 'main' }, 'main')).toEqual({
      kind: 'ignored',
      reason: 'ref main is not a branch',
    });
    expect(decidePush('push', { ...base, ref: 'refs/heads/' }, 'main')).toEqual({
      kind: 'ignored',
      reason: 'ref refs/heads/ is not a branch',
    });
    expect(decidePush('push', { ...base, ref: 42 }, 'main')).toEqual({
      kind: 'ignored',
      reason: 'ref is not a string',
    });
  });

  it('keeps slashes in branch names', () => {
    expect(decidePush('push', { ...base, ref: 'refs/heads/release/2.0' }, 'release/2.0')).toMatchObject({
      kind: 'deploy',
      branch: 'release/2.0',
    });
  });

  it('accepts a commit sha of 7 to 64 hex digits, lower-cased', () => {
    expect(decidePush('push', { ...base, after: 'ABCDEF1' }, 'main')).toMatchObject({ commit: 'abcdef1' });
    expect(decidePush('push', { ...base, after: 'f'.repeat(64) }, 'main')).toMatchObject({
      commit: 'f'.repeat(64),
    });
  });

  it.each([
    ['too short', 'abcdef'],
    ['too long', 'a'.repeat(65)],
    ['not hex', 'g'.repeat(40)],
    ['with a newline', `${'a'.repeat(40)}\n`],
    ['an option', '--upload-pack=x'],
    ['a number', 1234567],
    ['null', null],
    ['an object', { id: 'a'.repeat(40) }],
  ])('takes a commit that is %s as null', (_name, after) => {
    expect(decidePush('push', { ...base, after }, 'main')).toEqual({
      kind: 'deploy',
      branch: 'main',
      commit: null,
      pusher: null,
      message: null,
    });
  });

  it('ignores a non-string or empty pusher and message', () => {
    const payload = {
      ...base,
      pusher: { name: 42, login: '' },
      sender: { login: ['x'] },
      user_username: {},
      user_name: '   ',
      head_commit: { message: 7 },
      commits: 'nope',
    };
    expect(decidePush('push', payload, 'main')).toEqual({
      kind: 'deploy',
      branch: 'main',
      commit: 'a'.repeat(40),
      pusher: null,
      message: null,
    });
  });

  it('picks the pusher in order: pusher.name, pusher.login, sender.login, user_username, user_name', () => {
    const all = {
      ...base,
      pusher: { name: 'n', login: 'l' },
      sender: { login: 's' },
      user_username: 'u',
      user_name: 'U',
    };
    expect(decidePush('push', all, 'main')).toMatchObject({ pusher: 'n' });
    expect(decidePush('push', { ...all, pusher: { login: 'l' } }, 'main')).toMatchObject({ pusher: 'l' });
    expect(decidePush('push', { ...all, pusher: null }, 'main')).toMatchObject({ pusher: 's' });
    expect(decidePush('push', { ...all, pusher: null, sender: null }, 'main')).toMatchObject({ pusher: 'u' });
    expect(decidePush('push', { ...base, user_name: 'U' }, 'main')).toMatchObject({ pusher: 'U' });
  });

  it('takes the message from head_commit, else the pushed commit in commits, else the last one', () => {
    const sha = 'a'.repeat(40);
    const commits = [
      { id: 'b'.repeat(40), message: 'first' },
      { id: sha, message: 'pushed' },
      { id: 'c'.repeat(40), message: 'last' },
    ];
    expect(decidePush('push', { ...base, head_commit: { message: 'head' }, commits }, 'main')).toMatchObject({
      message: 'head',
    });
    expect(decidePush('push', { ...base, head_commit: null, commits }, 'main')).toMatchObject({
      message: 'pushed',
    });
    expect(decidePush('push', { ...base, after: 'd'.repeat(40), commits }, 'main')).toMatchObject({
      message: 'last',
    });
    expect(decidePush('push', { ...base, commits: [] }, 'main')).toMatchObject({ message: null });
    expect(decidePush('push', { ...base, commits: [null, 'x'] }, 'main')).toMatchObject({ message: null });
  });

  it('compares event names case-insensitively but reports them as sent', () => {
    expect(decidePush('PUSH', base, 'main')).toMatchObject({ kind: 'deploy' });
    expect(decidePush('Ping', {}, 'main')).toEqual({ kind: 'pong' });
    expect(decidePush('Issues', {}, 'main')).toEqual({ kind: 'ignored-event', event: 'Issues' });
  });
});

describe('webhookReply', () => {
  it.each<[WebhookDecision, number, string]>([
    [{ kind: 'pong' }, 200, 'pong'],
    [{ kind: 'ignored-event', event: 'issues' }, 202, 'Ignored: event issues'],
    [{ kind: 'ignored-event', event: 'unknown' }, 202, 'Ignored: event unknown'],
    [{ kind: 'ignored', reason: 'tag push refs/tags/v1.0' }, 200, 'Ignored: tag push refs/tags/v1.0'],
    [{ kind: 'ignored', reason: 'branch main was deleted' }, 200, 'Ignored: branch main was deleted'],
    [{ kind: 'ignored', reason: 'branch dev is not deployed' }, 200, 'Ignored: branch dev is not deployed'],
    [
      { kind: 'deploy', branch: 'main', commit: 'abcdef1', pusher: 'ann', message: 'fix' },
      200,
      'Deployment triggered',
    ],
    [
      { kind: 'deploy', branch: 'main', commit: null, pusher: null, message: null },
      200,
      'Deployment triggered',
    ],
  ])('%j → %i %s', (decision, status, body) => {
    expect(webhookReply(decision)).toEqual({ status, body });
  });

  it('answers the real examples end to end', () => {
    const reply = (event: string | null, payload: Payload, branch: string) =>
      webhookReply(decidePush(event, payload, branch));
    expect(reply('push', branchPush, 'master')).toEqual({ status: 200, body: 'Deployment triggered' });
    expect(reply('push', tagPush, 'master')).toEqual({
      status: 200,
      body: 'Ignored: tag push refs/tags/simple-tag',
    });
    expect(reply('push', deletionOf('master'), 'master')).toEqual({
      status: 200,
      body: 'Ignored: branch master was deleted',
    });
    expect(reply('push', branchPush, 'main')).toEqual({
      status: 200,
      body: 'Ignored: branch master is not deployed',
    });
    expect(reply('ping', ping, 'master')).toEqual({ status: 200, body: 'pong' });
    expect(reply('issues', issues, 'master')).toEqual({ status: 202, body: 'Ignored: event issues' });
    expect(reply(null, issues, 'master')).toEqual({ status: 202, body: 'Ignored: event unknown' });
  });
});
