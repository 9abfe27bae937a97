// The agent's configuration: flags over environment, and no token in the clear beyond loopback;
// and what of it commands never see.
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentConfigError, loadAgentConfig } from '../../agent/src/config.ts';
import { commandEnv, gitEnv } from '../../agent/src/executor/step-env.ts';
import { jobAssign } from '../helpers/fake-coordinator.ts';

describe('agent configuration', () => {
  it('reads flags, falling back to DECKHAND_* variables', () => {
    const fromFlags = loadAgentConfig(
      [
        '--url',
        'https://deploy.example.com',
        '--token',
        'dha_x',
        '--labels',
        'web, eu',
        '--work-dir',
        '/srv/dh',
      ],
      { DECKHAND_URL: 'https://other.example.com' },
    );
    expect(fromFlags.url.href).toBe('https://deploy.example.com/');
    expect(fromFlags).toMatchObject({
      token: 'dha_x',
      labels: ['web', 'eu'],
      workDir: '/srv/dh',
      insecure: false,
    });
    const fromEnv = loadAgentConfig([], { DECKHAND_URL: 'http://127.0.0.1:3000', DECKHAND_TOKEN: 'dha_y' });
    expect(fromEnv).toMatchObject({ token: 'dha_y', labels: [] });
  });

  it.each(['http://deploy.example.com', 'ws://10.0.0.5:3000'])(
    'refuses plain %s beyond loopback unless --insecure',
    (url) => {
      expect(() => loadAgentConfig(['--url', url, '--token', 't'], {})).toThrow(/unencrypted/);
      expect(loadAgentConfig(['--url', url, '--token', 't', '--insecure'], {}).insecure).toBe(true);
    },
  );

  it.each(['http://localhost:3000', 'ws://127.0.0.1:3000', 'http://[::1]:3000'])(
    'allows plain %s on loopback',
    (url) => {
      expect(loadAgentConfig(['--url', url, '--token', 't'], {}).url.protocol).toMatch(/^(http|ws):$/);
    },
  );

  it('says what is missing', () => {
    expect(() => loadAgentConfig([], {})).toThrow(AgentConfigError);
    expect(() => loadAgentConfig(['--url', 'https://x.example'], {})).toThrow(/--token/);
    expect(() => loadAgentConfig(['--url', 'ftp://x', '--token', 't'], {})).toThrow(/http\(s\)/);
  });

  it('reads the output bounds (flags over DECKHAND_* variables) with 8 MiB / 64 MiB defaults', () => {
    const base = ['--url', 'https://x.example', '--token', 't'];
    expect(loadAgentConfig(base, {})).toMatchObject({
      spoolMemoryBytes: 8 * 1024 * 1024,
      maxUnackedBytes: 64 * 1024 * 1024,
    });
    const env = { DECKHAND_SPOOL_MEMORY_BYTES: '1000', DECKHAND_MAX_UNACKED_BYTES: '9000000' };
    expect(loadAgentConfig(base, env)).toMatchObject({ spoolMemoryBytes: 1000, maxUnackedBytes: 9_000_000 });
    expect(loadAgentConfig([...base, '--spool-memory-bytes', '0'], env).spoolMemoryBytes).toBe(0);
    expect(() => loadAgentConfig([...base, '--max-unacked-bytes', '1000'], {})).toThrow(
      /--max-unacked-bytes \(or DECKHAND_MAX_UNACKED_BYTES\) must be a whole number of bytes of at least 262144/,
    );
    expect(() => loadAgentConfig([...base, '--spool-memory-bytes', '8M'], {})).toThrow(/not 8M/);
  });

  describe('the token from a file (--token-file, DECKHAND_TOKEN_FILE)', () => {
    let dir: string;
    const url = ['--url', 'https://x.example'];
    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'deckhand-agent-config-'));
    });
    afterAll(async () => {
      await rm(dir, { recursive: true, force: true });
    });

    it('reads it trimmed, from the flag or the variable', async () => {
      const file = join(dir, 'token');
      await writeFile(file, '  dha_fromfile\n\n', { mode: 0o600 });
      expect(loadAgentConfig([...url, '--token-file', file], {}).token).toBe('dha_fromfile');
      expect(loadAgentConfig(url, { DECKHAND_TOKEN_FILE: file }).token).toBe('dha_fromfile');
      // An empty DECKHAND_TOKEN (a compose file's `${VAR:-}`) counts as unset.
      expect(loadAgentConfig(url, { DECKHAND_TOKEN: '', DECKHAND_TOKEN_FILE: file }).token).toBe(
        'dha_fromfile',
      );
      expect(loadAgentConfig(url, { DECKHAND_TOKEN: 'dha_env', DECKHAND_TOKEN_FILE: '' }).token).toBe(
        'dha_env',
      );
    });

    it('takes exactly one of the token and the file', async () => {
      const file = join(dir, 'token-both');
      await writeFile(file, 'dha_fromfile\n');
      const both = /one way: --token \(DECKHAND_TOKEN\) or --token-file \(DECKHAND_TOKEN_FILE\), not both/;
      expect(() => loadAgentConfig([...url, '--token', 't', '--token-file', file], {})).toThrow(both);
      expect(() => loadAgentConfig(url, { DECKHAND_TOKEN: 't', DECKHAND_TOKEN_FILE: file })).toThrow(both);
      expect(() => loadAgentConfig([...url, '--token', 't'], { DECKHAND_TOKEN_FILE: file })).toThrow(both);
      expect(() => loadAgentConfig(url, {})).toThrow(/--token <token>.*--token-file <path>/);
    });

    it('says when the file is missing, unreadable or empty', async () => {
      const missing = join(dir, 'missing');
      expect(() => loadAgentConfig([...url, '--token-file', missing], {})).toThrow(
        new RegExp(`Cannot read the agent token file ${missing}: .*ENOENT`),
      );
      expect(() => loadAgentConfig([...url, '--token-file', dir], {})).toThrow(/EISDIR/);
      const empty = join(dir, 'empty');
      await writeFile(empty, ' \n');
      expect(() => loadAgentConfig([...url, '--token-file', empty], {})).toThrow(
        `The agent token file ${empty} is empty`,
      );
      if (process.getuid?.() !== 0) {
        const locked = join(dir, 'locked');
        await writeFile(locked, 'dha_x\n');
        await chmod(locked, 0o000);
        expect(() => loadAgentConfig([...url, '--token-file', locked], {})).toThrow(/EACCES/);
      }
    });
  });
});

describe('what the agent passes on to commands and git', () => {
  it('never its token, nor where its token file is', () => {
    const base = {
      KEEP: 'kept',
      DECKHAND_TOKEN: 'dha_secret',
      DECKHAND_TOKEN_FILE: '/run/deckhand/agent-token',
    };
    const job = jobAssign({ url: '/tmp/repo.git', commit: 'a'.repeat(40), commands: ['true'] });
    for (const env of [commandEnv(base, job), gitEnv(base, undefined)]) {
      expect(env.KEEP).toBe('kept');
      expect(env).not.toHaveProperty('DECKHAND_TOKEN');
      expect(env).not.toHaveProperty('DECKHAND_TOKEN_FILE');
    }
  });
});
