// The CLI's command line: commands, options, what each command accepts, and where the URL and
// token come from (and when they are refused) — every mistake a UsageError, exit 64.
import { describe, expect, it } from 'vitest';
import { helpText, parseCommandLine, resolveConnection } from '../../cli/src/args.ts';
import { EXIT, exitCodeForStatus, UsageError } from '../../cli/src/exit-codes.ts';

const ID = '3f2b8a9e-1c4d-4e5f-8a6b-7c8d9e0f1a2b';

function usageError(fn: () => unknown): UsageError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    expect((err as UsageError).exitCode).toBe(64);
    return err as UsageError;
  }
  throw new Error('expected a UsageError');
}

describe('parseCommandLine', () => {
  it('reads deploy with its options, short and long, global options anywhere', () => {
    expect(
      parseCommandLine(['--url', 'https://d.example', 'deploy', '-p', 'web', '--commit', 'ABCDEF1', '-w']),
    ).toMatchObject({
      command: 'deploy',
      url: 'https://d.example',
      project: 'web',
      commit: 'ABCDEF1',
      branch: null,
      wait: true,
      json: false,
      cancelOnInterrupt: false,
    });
    expect(
      parseCommandLine([
        'deploy',
        '--project=web',
        '--branch',
        'release/1',
        '--wait',
        '--cancel-on-interrupt',
        '--json',
      ]),
    ).toMatchObject({ branch: 'release/1', wait: true, cancelOnInterrupt: true, json: true });
  });

  it('takes a deployment id for status, logs and cancel (lower-cased)', () => {
    expect(parseCommandLine(['status', ID.toUpperCase()])).toMatchObject({ command: 'status', target: ID });
    expect(parseCommandLine(['logs', ID, '-f'])).toMatchObject({ command: 'logs', target: ID, follow: true });
    expect(parseCommandLine(['cancel', ID, '--json'])).toMatchObject({ command: 'cancel', json: true });
    expect(parseCommandLine(['projects'])).toMatchObject({ command: 'projects', target: null });
  });

  it('asks for help with no arguments, -h, --help and help <command>', () => {
    expect(parseCommandLine([])).toMatchObject({ command: 'help', help: true, target: null });
    expect(parseCommandLine(['-h'])).toMatchObject({ help: true });
    expect(parseCommandLine(['deploy', '--help'])).toMatchObject({ command: 'deploy', help: true });
    expect(parseCommandLine(['help', 'logs'])).toMatchObject({ command: 'help', help: true, target: 'logs' });
    expect(parseCommandLine(['--version'])).toMatchObject({ version: true });
    // Help needs nothing else to be right: not even the required options.
    expect(parseCommandLine(['deploy', '-h']).help).toBe(true);
  });

  it('refuses mistakes with a message saying what to do', () => {
    expect(usageError(() => parseCommandLine(['deploi'])).message).toMatch(
      /Unknown command 'deploi'\. Commands: deploy,/,
    );
    expect(usageError(() => parseCommandLine(['deploy', '--frob'])).message).toMatch(
      /Unknown option '--frob'/,
    );
    expect(usageError(() => parseCommandLine(['deploy'])).message).toContain('needs --project');
    expect(usageError(() => parseCommandLine(['deploy', '-p'])).message).toMatch(/argument missing/);
    expect(usageError(() => parseCommandLine(['deploy', '-p', 'web', '--commit', 'main'])).message).toContain(
      '--commit must be a commit sha',
    );
    expect(
      usageError(() => parseCommandLine(['deploy', '-p', 'web', '--cancel-on-interrupt'])).message,
    ).toContain('only applies with --wait');
    expect(usageError(() => parseCommandLine(['logs', ID, '--cancel-on-interrupt'])).message).toContain(
      'only applies with --follow',
    );
    expect(usageError(() => parseCommandLine(['status'])).message).toContain('needs <deployment id>');
    expect(usageError(() => parseCommandLine(['status', 'abc'])).message).toContain(
      "Not a deployment id: 'abc'",
    );
    expect(usageError(() => parseCommandLine(['status', ID, ID])).message).toContain('Unexpected argument');
    expect(usageError(() => parseCommandLine(['projects', '--wait'])).message).toContain(
      "'deckhand projects' does not take --wait",
    );
    expect(usageError(() => parseCommandLine(['status', ID, '--follow'])).message).toContain(
      'does not take --follow',
    );
    expect(usageError(() => helpText('nope')).message).toContain("Unknown command 'nope'");
  });
});

describe('resolveConnection', () => {
  const args = (over: Record<string, unknown> = {}) => ({ ...parseCommandLine(['projects']), ...over });

  it('takes the flags first, then DECKHAND_URL and DECKHAND_TOKEN; keeps a path prefix', () => {
    expect(
      resolveConnection(args(), { DECKHAND_URL: 'https://d.example/', DECKHAND_TOKEN: 'dht_env' }),
    ).toEqual({
      baseUrl: 'https://d.example',
      token: 'dht_env',
    });
    expect(
      resolveConnection(args({ url: 'https://other.example/deckhand/', token: 'dht_flag' }), {
        DECKHAND_URL: 'https://d.example',
        DECKHAND_TOKEN: 'dht_env',
      }),
    ).toEqual({ baseUrl: 'https://other.example/deckhand', token: 'dht_flag' });
    expect(
      resolveConnection(args(), { DECKHAND_URL: 'http://localhost:3000', DECKHAND_TOKEN: 'dht_x' }).baseUrl,
    ).toBe('http://localhost:3000');
  });

  it('refuses a missing or odd URL, plain http beyond loopback (unless --insecure), a missing or agent token', () => {
    const token = 'dht_secret-value';
    const cases: Array<[Record<string, unknown>, NodeJS.ProcessEnv, string]> = [
      [{}, { DECKHAND_TOKEN: token }, 'No coordinator URL'],
      [{}, { DECKHAND_URL: 'not a url', DECKHAND_TOKEN: token }, 'is not a URL'],
      [{}, { DECKHAND_URL: 'ftp://d.example', DECKHAND_TOKEN: token }, 'must be http:// or https://'],
      [{}, { DECKHAND_URL: 'https://u:p@d.example', DECKHAND_TOKEN: token }, 'must not carry a user name'],
      [
        {},
        { DECKHAND_URL: 'http://d.example', DECKHAND_TOKEN: token },
        'Refusing to send the API token unencrypted',
      ],
      [{}, { DECKHAND_URL: 'https://d.example' }, 'No API token'],
      [{}, { DECKHAND_URL: 'https://d.example', DECKHAND_TOKEN: 'dha_agent' }, 'That is an agent token'],
    ];
    for (const [over, env, message] of cases) {
      const err = usageError(() => resolveConnection(args(over), env));
      expect(err.message).toContain(message);
      expect(err.message).not.toContain(token);
    }
    expect(
      resolveConnection(args({ insecure: true }), {
        DECKHAND_URL: 'http://d.example',
        DECKHAND_TOKEN: token,
      }),
    ).toEqual({
      baseUrl: 'http://d.example',
      token,
    });
    expect(
      resolveConnection(args(), {
        DECKHAND_URL: 'http://d.example',
        DECKHAND_TOKEN: token,
        DECKHAND_INSECURE: 'true',
      }).baseUrl,
    ).toBe('http://d.example');
  });
});

describe('exit codes', () => {
  it('map how a deployment ended; queued and running are 0', () => {
    expect(
      ['success', 'failed', 'cancelled', 'timed_out', 'queued', 'running', 'something-new'].map(
        exitCodeForStatus,
      ),
    ).toEqual([0, 1, 2, 3, 0, 0, 1]);
    expect(EXIT).toMatchObject({ usage: 64, unavailable: 69, interrupted: 130 });
  });

  it('are documented in every help text', () => {
    for (const topic of [null, 'deploy', 'status', 'logs', 'cancel', 'projects']) {
      const text = helpText(topic);
      for (const code of ['0 ', '1 ', '2 ', '3 ', '64', '69', '130']) expect(text).toContain(`\n  ${code}`);
    }
  });
});
