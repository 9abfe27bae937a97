// The agent's configuration: flags over environment, and no token in the clear beyond loopback.
import { describe, expect, it } from 'vitest';
import { AgentConfigError, loadAgentConfig } from '../../agent/src/config.ts';

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
});
