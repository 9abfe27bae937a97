// Output as real commands print it: secrets masked on the host (also when a value arrives in two
// writes), in what is stored and in the live event stream; the per-entry output limit with its
// visible marker; and bytes that are not tidy text — a 1 MB line without a newline, carriage-return
// progress bars, invalid UTF-8 — stored exactly (compared as raw bytes in PostgreSQL) and shown
// with U+FFFD replacements.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { captureEvents, entryFor, expectSame, faultHarness, seqOutput } from '../helpers/fault-harness.ts';
import { ENTRY_OUTPUT, sql } from '../helpers/sql.ts';

const SECRET = 'sk-abcdef123';
const TOKEN = 'tok-98765xyz';

/** The stored bytes of an entry, straight from PostgreSQL. */
async function storedBytes(h: ReturnType<typeof faultHarness>, entryId: string): Promise<Buffer> {
  const [row] = await h.coord.orm.em
    .fork()
    .execute<Array<{ output: Buffer | null }>>(
      `select ${ENTRY_OUTPUT} as output from log_entries e where id = ?`,
      [entryId],
    );
  expect(row?.output, `entry ${entryId} has no output`).toBeInstanceOf(Buffer);
  return row!.output!;
}

/** What the live stream delivered for each entry id, concatenated in order. */
function streamedText(events: Array<{ event: string; data: unknown }>): Map<string, string> {
  const byEntry = new Map<string, string>();
  for (const e of events) {
    if (e.event !== 'output') continue;
    const data = e.data as { entry_id: string; text: string };
    byEntry.set(data.entry_id, (byEntry.get(data.entry_id) ?? '') + data.text);
  }
  return byEntry;
}

describe('default output limit', () => {
  const h = faultHarness({});

  it('masks secrets and secret-named variables in stored output and in the live stream, also a value split across two writes', async () => {
    const a = await h.launchAgent();
    const commands = {
      whole: 'echo "whole: $API_SECRET"',
      stderr: 'echo "err: $API_SECRET" >&2',
      split: `printf 'sk-abc'; sleep 0.3; printf 'def123\\n'`,
      token: 'echo "token: $DEPLOY_TOKEN"',
      adjacent: 'echo "$API_SECRET$API_SECRET|$DEPLOY_TOKEN|"',
      unterminated: 'printf "%s" "$API_SECRET"',
    };
    const expected: Record<keyof typeof commands, string> = {
      whole: 'whole: [MASKED]\n',
      stderr: 'err: [MASKED]\n',
      split: '[MASKED]\n',
      token: 'token: [MASKED]\n',
      adjacent: '[MASKED][MASKED]|[MASKED]|\n',
      unterminated: '[MASKED]',
    };
    const { id: projectId } = await h.createProject(a, {
      commands: Object.values(commands),
      env: { DEPLOY_TOKEN: TOKEN, GREETING: 'hello' },
      secrets: { API_SECRET: SECRET },
    });
    const id = await h.deploy(projectId);
    const live = captureEvents(h.coord.url, h.admin.cookie!, id);
    const d = await h.waitForEnd(id);
    const { raw, events } = await live.done;
    expect(d.deployment.status).toBe('success');

    const streamed = streamedText(events);
    for (const [key, cmd] of Object.entries(commands) as Array<[keyof typeof commands, string]>) {
      const entry = entryFor(d, cmd);
      expect(entry.log, key).toBe(expected[key]);
      expect((await storedBytes(h, entry.id)).toString('utf8'), key).toBe(expected[key]);
      // The live stream showed exactly what is stored.
      expect(streamed.get(entry.id) ?? '', key).toBe(expected[key]);
    }
    expect(events.at(-1)?.event).toBe('end');

    const detailText = (await h.admin.get(`/deploy/${id}`)).text;
    for (const value of [SECRET, TOKEN]) {
      expect(detailText).not.toContain(value);
      expect(raw).not.toContain(value);
      const [found] = await sql(
        h.coord,
        `select (select count(*) from log_entries where position(convert_to(?, 'UTF8') in output) > 0)
              + (select count(*) from log_chunks where position(convert_to(?, 'UTF8') in data) > 0) as n`,
        [value, value],
      );
      expect(Number(found.n)).toBe(0);
    }
    expect(h.strays()).toEqual([]);
  });

  it('stores a 1 MB line without a newline, carriage-return progress bars and invalid UTF-8 byte for byte; GET shows them with U+FFFD', async () => {
    const a = await h.launchAgent();
    // 1 MB of mixed one- to four-byte characters and no newline, committed and printed with cat.
    const unit = 'abcd-é-€-😀|'; // 17 bytes: frame and event boundaries fall inside characters
    const big = Buffer.from(unit.repeat(Math.ceil(1_000_000 / Buffer.byteLength(unit))));
    expect(big.length).toBeGreaterThanOrEqual(1_000_000);
    await h.repo.commit({ 'big.txt': big.toString('utf8') }, 'a big line');

    const commands = {
      big: 'cat big.txt',
      progress: `for i in $(seq 0 5 100); do printf '\\r%d%%' $i; sleep 0.005; done; printf '\\rdone\\n'`,
      invalid: `printf 'ok \\xff\\xfe end\\n'; printf 'cut \\xe2\\x82\\n'; printf '\\xc3'`,
      splitChar: `printf 'euro \\xe2\\x82'; sleep 0.3; printf '\\xac\\n'`,
    };
    let progress = '';
    for (let i = 0; i <= 100; i += 5) progress += `\r${i}%`;
    progress += '\rdone\n';
    const expected: Record<keyof typeof commands, Buffer> = {
      big,
      progress: Buffer.from(progress),
      invalid: Buffer.concat([
        Buffer.from('ok '),
        Buffer.from([0xff, 0xfe]),
        Buffer.from(' end\ncut '),
        Buffer.from([0xe2, 0x82, 0x0a, 0xc3]),
      ]),
      splitChar: Buffer.from('euro €\n'),
    };
    const { id: projectId } = await h.createProject(a, { commands: Object.values(commands) });
    const id = await h.deploy(projectId);
    const live = captureEvents(h.coord.url, h.admin.cookie!, id);
    const d = await h.waitForEnd(id);
    const { events } = await live.done;
    expect(d.deployment.status).toBe('success');
    const streamed = streamedText(events);

    for (const [key, cmd] of Object.entries(commands) as Array<[keyof typeof commands, string]>) {
      const entry = entryFor(d, cmd);
      expect(entry.status, key).toBe('success');
      const stored = await storedBytes(h, entry.id);
      expect(stored.length, key).toBe(expected[key].length);
      expect(createHash('sha256').update(stored).digest('hex'), key).toBe(
        createHash('sha256').update(expected[key]).digest('hex'),
      );
      // Shown as UTF-8 with U+FFFD for what is not, and nothing else changed or lost …
      expectSame(entry.log, expected[key].toString('utf8'), `${key}: GET /deploy/:id`);
      // … and the live stream shows the same characters (the 1 MB line: its own test below).
      if (key !== 'big')
        expectSame(streamed.get(entry.id), expected[key].toString('utf8'), `${key}: the event stream`);
    }
    expect(entryFor(d, commands.invalid).log).toBe('ok \uFFFD\uFFFD end\ncut \uFFFD\n\uFFFD');
    expect(entryFor(d, commands.splitChar).log).toBe('euro €\n');
    expect(h.strays()).toEqual([]);
  });

  it('the event stream shows a 1 MB line of multi-byte characters without breaking any (as GET /deploy/:id does)', async () => {
    const a = await h.launchAgent();
    const unit = 'abcd-é-€-😀|'; // 17 bytes: 64 KiB boundaries fall inside characters
    const big = Buffer.from(unit.repeat(Math.ceil(1_000_000 / Buffer.byteLength(unit))));
    await h.repo.commit({ 'big.txt': big.toString('utf8') }, 'a big line');
    const { id: projectId } = await h.createProject(a, { commands: ['cat big.txt'] });
    const id = await h.deploy(projectId);
    const d = await h.waitForEnd(id);
    expect(d.deployment.status).toBe('success');
    const entry = entryFor(d, 'cat big.txt');
    expectSame(await storedBytes(h, entry.id), big, 'stored bytes');
    expectSame(entry.log, big.toString('utf8'), 'GET /deploy/:id');
    // Read from the start after the end: the whole entry comes out of the stored output.
    const { events } = await captureEvents(h.coord.url, h.admin.cookie!, id).done;
    expectSame(streamedText(events).get(entry.id), big.toString('utf8'), 'the event stream');
    expect(h.strays()).toEqual([]);
  });
});

describe('OUTPUT_LIMIT_BYTES=65536', () => {
  const h = faultHarness({ OUTPUT_LIMIT_BYTES: '65536' });

  it('keeps exactly the first 65536 bytes of a 200 KB command, then a visible truncation marker; the next entry is whole', async () => {
    const a = await h.launchAgent();
    const n = 36_000;
    const printed = Buffer.from(seqOutput(n));
    expect(printed.length).toBeGreaterThan(200_000);
    const cmd = `seq 1 ${n}`;
    const { id: projectId } = await h.createProject(a, { commands: [cmd, 'echo after'] });
    const id = await h.deploy(projectId);
    const d = await h.waitForEnd(id);
    expect(d.deployment.status).toBe('success');

    const entry = entryFor(d, cmd);
    expect(entry).toMatchObject({ status: 'success', exit_code: 0 });
    const stored = await storedBytes(h, entry.id);
    expect(stored.subarray(0, 65_536).equals(printed.subarray(0, 65_536))).toBe(true);
    const marker = stored.subarray(65_536).toString('utf8');
    expect(marker).toMatch(/^\n\[deckhand\] output truncated[^\n]*\n$/);
    expect(marker).toContain(`${printed.length - 65_536} more bytes were printed`);
    expect(entry.log).toBe(printed.subarray(0, 65_536).toString('utf8') + marker);
    const [row] = await sql(h.coord, 'select output_bytes from log_entries where id = ?', [entry.id]);
    expect(Number(row.output_bytes)).toBe(stored.length);
    expect(entryFor(d, 'echo after').log).toBe('after\n');
    expect(h.strays()).toEqual([]);
  });
});
