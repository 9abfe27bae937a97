// The coordinator's JSON API over fetch, with the API token as a Bearer credential. Every failure
// becomes a CliError with a one-line message and its exit code: 4xx the caller can fix (400, 401,
// 403, 404) → 64; unreachable, 5xx, 409, 429, or an answer that is not Deckhand's JSON → 69.
// Messages name the URL's path, never a header: the token is never part of one.
import type { Connection } from './args.ts';
import { CliError, EXIT } from './exit-codes.ts';

export interface Deployment {
  id: string;
  proj_id?: string;
  status: string;
  reason: string | null;
  commit: string | null;
  branch: string;
  trigger?: string;
  triggered_by?: string;
  hosts: string[];
  started_at: string;
  finished_at: string | null;
}

export interface LogEntry {
  id: string;
  host: string;
  seq?: number;
  cmd: string;
  log?: string;
  status: string;
  success?: boolean;
  exit_code: number | null;
  started_at: string;
  finished_at: string | null;
}

export interface Project {
  id: string;
  name: string;
  branch_name: string;
  forge_url?: string;
}

export interface DeploymentDetail {
  success: true;
  deployment: Deployment;
  logs: LogEntry[];
  project: Project;
}

const USER_AGENT = 'deckhand-cli';
const REQUEST_TIMEOUT_MS = 30_000;
const RETRIES = 3;

export const TOKEN_HINT = 'create one with POST /tokens';

/** The error for an HTTP answer that is not a success. */
export function httpError(status: number, body: string, contentType: string | null, path: string): CliError {
  let message: string | null = null;
  if (contentType?.includes('application/json')) {
    try {
      const json = JSON.parse(body) as { error?: unknown };
      if (typeof json.error === 'string') message = json.error;
    } catch {
      // Not JSON after all: handled below.
    }
  }
  if (message === null) {
    return new CliError(
      `Unexpected answer to ${path}: HTTP ${status}${contentType ? ` (${contentType.split(';')[0]})` : ''} — is the URL the Deckhand coordinator's base URL?`,
      EXIT.unavailable,
    );
  }
  if (status === 401) {
    return new CliError(`401: ${message} — ${TOKEN_HINT}`, EXIT.usage);
  }
  if (status === 403) {
    return new CliError(
      `403: ${message} (the token's scope, or its user's role, is too low: deploying and cancelling need a deploy-scope token)`,
      EXIT.usage,
    );
  }
  const code = status === 400 || status === 404 ? EXIT.usage : EXIT.unavailable;
  return new CliError(`${status}: ${message}`, code);
}

/** "connect ECONNREFUSED 127.0.0.1:1" rather than undici's bare "fetch failed". */
export function networkMessage(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  if (err.name === 'TimeoutError') return 'timed out';
  const cause = (err as { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const inner = (cause as { cause?: unknown }).cause;
    // AggregateError (IPv4 and IPv6 both refused) carries its parts in `errors`.
    const parts = (cause as { errors?: unknown[] }).errors;
    if (Array.isArray(parts) && parts[0] instanceof Error) return parts[0].message;
    if (cause.message) return cause.message;
    if (inner instanceof Error) return inner.message;
  }
  return err.message;
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export class Api {
  readonly baseUrl: string;
  readonly #token: string;
  readonly #fetch: typeof fetch;

  constructor(connection: Connection, fetchImpl: typeof fetch = fetch) {
    this.baseUrl = connection.baseUrl;
    this.#token = connection.token;
    this.#fetch = fetchImpl;
  }

  url(path: string): string {
    return `${this.baseUrl}${path}`;
  }

  /** The link to a deployment's page (the same URL answers JSON to the API). */
  deploymentUrl(id: string): string {
    return this.url(`/deploy/${id}`);
  }

  headers(extra: Record<string, string> = {}): Record<string, string> {
    return { authorization: `Bearer ${this.#token}`, 'user-agent': USER_AGENT, ...extra };
  }

  /** A raw request (the event stream uses it); network failures are left to the caller. */
  fetchRaw(path: string, init: RequestInit & { headers?: Record<string, string> }): Promise<Response> {
    return this.#fetch(this.url(path), { ...init, headers: this.headers(init.headers ?? {}) });
  }

  /**
   * One JSON request. GETs are retried on a network error or 502/503/504 (three tries over a
   * few seconds); POSTs only when the connection was refused, since nothing was sent then.
   */
  async request<T>(method: 'GET' | 'POST', path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const last = attempt >= RETRIES;
      let res: Response;
      try {
        const timeout = AbortSignal.timeout(REQUEST_TIMEOUT_MS);
        res = await this.fetchRaw(path, {
          method,
          headers:
            method === 'POST'
              ? { accept: 'application/json', 'content-type': 'application/json' }
              : { accept: 'application/json' },
          body: method === 'POST' ? JSON.stringify(body ?? {}) : undefined,
          signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
          redirect: 'manual',
        });
      } catch (err) {
        if (signal?.aborted) throw err;
        const message = networkMessage(err);
        const refused = /ECONNREFUSED/.test(message);
        if (!last && (method === 'GET' || refused)) {
          await sleep(500 * attempt, signal);
          continue;
        }
        throw new CliError(`Cannot reach the coordinator at ${this.baseUrl}: ${message}`, EXIT.unavailable);
      }
      const text = await res.text();
      if (res.ok) {
        try {
          return JSON.parse(text) as T;
        } catch {
          throw httpError(res.status, text, null, path);
        }
      }
      if (!last && method === 'GET' && [502, 503, 504].includes(res.status)) {
        await sleep(500 * attempt, signal);
        continue;
      }
      throw httpError(res.status, text, res.headers.get('content-type'), path);
    }
  }

  projects(): Promise<{ success: true; projects: Project[] }> {
    return this.request('GET', '/projects');
  }

  trigger(body: { projectId: string; commit?: string; branch?: string }): Promise<{ deployId: string }> {
    return this.request('POST', '/deploy', body);
  }

  deployment(id: string): Promise<DeploymentDetail> {
    return this.request('GET', `/deploy/${id}`);
  }

  cancel(
    id: string,
    signal?: AbortSignal,
  ): Promise<{ success: true; deployId: string; deployment: Deployment }> {
    return this.request('POST', `/deploy/${id}/cancel`, {}, signal);
  }
}
