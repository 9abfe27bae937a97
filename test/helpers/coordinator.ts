// A real coordinator for tests: a fresh PostgreSQL database, every migration applied, the app
// listening on a free loopback port. Build one per test file (beforeAll) and close it after.
import { randomBytes } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, expect } from 'vitest';
import { type App, type AppDeps, buildApp } from '../../coordinator/src/app.ts';
import { loadConfig } from '../../coordinator/src/config.ts';
import { migrate, openDatabase } from '../../coordinator/src/db/orm.ts';
import type { SmtpSettings } from '../../coordinator/src/modules/mail/mailer.ts';
import { createTestDatabase } from './database.ts';

export interface TestCoordinator {
  url: string;
  app: App;
  orm: MikroORM;
  rootSecret: string;
  close(): Promise<void>;
}

export async function startCoordinator(
  env: Record<string, string> = {},
  opts: { smtpSettings?: () => Promise<SmtpSettings | null>; logger?: AppDeps['logger'] } = {},
): Promise<TestCoordinator> {
  const db = await createTestDatabase();
  const rootSecret = randomBytes(32).toString('base64url');
  const config = loadConfig({
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    DATABASE_URL: db.url,
    DECKHAND_SECRET: rootSecret,
    ...env,
  });
  // A small pool unless the test asks for another size (DATABASE_POOL_MAX).
  const orm = await openDatabase({
    url: db.url,
    poolMax: env.DATABASE_POOL_MAX ? config.databasePoolMax : 5,
  });
  await migrate(orm);
  const app = await buildApp({
    config,
    orm,
    rootSecret,
    smtpSettings: opts.smtpSettings,
    logger: opts.logger,
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    app,
    orm,
    rootSecret,
    async close() {
      await app.close();
      await orm.close();
      await db.drop();
    },
  };
}

export interface HttpResponse {
  status: number;
  headers: Headers;
  text: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- test assertions read arbitrary JSON
  json: any;
}

/** An HTTP client with a cookie jar, like a browser or `curl -c/-b`. */
/** The Accept header a browser sends when it navigates to a page. */
export const BROWSER_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';

export class Client {
  readonly base: string;
  cookie: string | null = null;

  constructor(base: string) {
    this.base = base;
  }

  async request(
    method: string,
    path: string,
    opts: {
      json?: unknown;
      body?: string | Buffer;
      headers?: Record<string, string>;
      cookie?: string | null;
    } = {},
  ): Promise<HttpResponse> {
    const headers: Record<string, string> = { ...opts.headers };
    const cookie = opts.cookie === undefined ? this.cookie : opts.cookie;
    if (cookie) headers.cookie = cookie;
    let body: string | Buffer | undefined = opts.body;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(this.base + path, { method, headers, body, redirect: 'manual' });
    const setCookie = res.headers.getSetCookie().find((c) => c.startsWith('connect.sid='));
    if (setCookie) {
      const value = setCookie.split(';')[0]!;
      this.cookie =
        /^connect\.sid=;?$/.test(value) || /Max-Age=0|Expires=Thu, 01 Jan 1970/i.test(setCookie)
          ? null
          : value;
    }
    const text = await res.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, headers: res.headers, text, json };
  }

  get(path: string, opts?: Parameters<Client['request']>[2]) {
    return this.request('GET', path, opts);
  }

  post(path: string, json?: unknown, opts: Parameters<Client['request']>[2] = {}) {
    return this.request('POST', path, json === undefined ? opts : { ...opts, json });
  }
}

/** One coordinator for the file or describe that calls this (beforeAll/afterAll), started with `env`. */
export function coordinatorFor(
  env: Record<string, string> = {},
  opts: Parameters<typeof startCoordinator>[1] = {},
): { readonly current: TestCoordinator } {
  let coord: TestCoordinator | undefined;
  beforeAll(async () => {
    coord = await startCoordinator(env, opts);
  });
  afterAll(async () => {
    await coord?.close();
  });
  return {
    get current() {
      if (!coord) throw new Error('the coordinator is not started yet (use it inside a test or hook)');
      return coord;
    },
  };
}

export interface CoordinatorWithAdmin {
  readonly coord: TestCoordinator;
  /** The first account, signed in: the coordinator's admin. */
  readonly admin: Client;
  readonly adminEmail: string;
}

/**
 * One coordinator and its admin (the first account, signed in) for the file or describe that
 * calls this (beforeAll/afterAll), started with `env`.
 */
export function coordinatorWithAdmin(env: Record<string, string> = {}): CoordinatorWithAdmin {
  const coord = coordinatorFor(env);
  let account: Awaited<ReturnType<typeof signUp>> | undefined;
  beforeAll(async () => {
    account = await signUp(coord.current.url);
  });
  const signedUp = () => {
    if (!account) throw new Error('the admin is not signed up yet (use it inside a test or hook)');
    return account;
  };
  return {
    get coord() {
      return coord.current;
    },
    get admin() {
      return signedUp().client;
    },
    get adminEmail() {
      return signedUp().email;
    },
  };
}

export function uniqueEmail(prefix = 'user') {
  return `${prefix}-${randomBytes(4).toString('hex')}@example.com`;
}

let counter = 0;
/** Registers a fresh account (the first one on a coordinator is its admin) and keeps its session. */
export async function signUp(
  url: string,
  email = `user${++counter}@example.com`,
  password = 'correct horse battery',
) {
  const client = new Client(url);
  const res = await client.post('/register', { email, password });
  if (res.status !== 201) throw new Error(`register failed: ${res.status} ${res.text}`);
  return { client, user: res.json.user as { id: string; email: string; role: string }, email, password };
}

export const sampleProject = (overrides: Record<string, unknown> = {}) => ({
  name: `web-${randomBytes(4).toString('hex')}`,
  forge_url: 'https://github.com/acme/web.git',
  branch_name: 'main',
  commands: ['npm ci', 'npm run build'],
  target: { agents: { labels: ['web'] } },
  env: { NODE_ENV: 'production' },
  secrets: { API_KEY: 'sk-live-very-secret' },
  ...overrides,
});

/** Creates a project from `sampleProject(overrides)` as `client`, expecting 201; the whole answer. */
export async function createProject(
  client: Client,
  overrides: Record<string, unknown> = {},
): Promise<HttpResponse> {
  const res = await client.post('/projects', sampleProject(overrides));
  expect(res.status, res.text).toBe(201);
  return res;
}

/** Creates an API token as `client` (POST /tokens, expecting 201): the token itself. */
export async function createApiToken(client: Client, name: string, scope: string): Promise<string> {
  const res = await client.post('/tokens', { name, scope });
  expect(res.status, res.text).toBe(201);
  return res.json.token as string;
}
