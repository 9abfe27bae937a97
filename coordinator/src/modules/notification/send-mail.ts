// The mail channel: a deployment's outcome to its project's addresses, with the tail of the
// failing command's output (deployment-mail.ts renders it).
import type { EntityManager } from '@mikro-orm/postgresql';
import { BadRequestError } from '../common/errors.ts';
import { SmtpNotConfiguredError } from '../mail/mailer.ts';
import { type FailingCommand, outputTail, renderDeploymentMail } from './deployment-mail.ts';
import { type ChannelSender, readNoticedDeployment } from './delivery.ts';

/** Bytes of a failing command's output read for the mail's tail. */
const TAIL_BYTES = 16 * 1024;

export const sendMail: ChannelSender = async (ctx, delivery) => {
  const em = ctx.orm.em.fork();
  const d = await readNoticedDeployment(em, delivery.deployment_id);
  const settings = d?.notifications;
  if (!d || !settings || settings.on === 'never' || settings.emails.length === 0) {
    return { kind: 'skipped', error: 'Mail notifications were turned off' };
  }
  const mail = renderDeploymentMail({
    projectName: d.project_name,
    deploymentId: d.id,
    status: d.status,
    reason: d.reason,
    commit: d.commit,
    branch: d.branch,
    trigger: d.trigger,
    triggeredBy: d.triggered_by,
    startedAt: new Date(d.started_at),
    finishedAt: d.finished_at ? new Date(d.finished_at) : null,
    failing: await failingCommand(em, d.id),
    url: ctx.deploymentUrl(d.id),
  });
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  try {
    await ctx.mailer.send({ to: settings.emails.join(', '), ...mail });
    return { kind: 'delivered', statusCode: null, durationMs: elapsed() };
  } catch (err) {
    if (err instanceof SmtpNotConfiguredError) return { kind: 'skipped', error: 'SMTP not configured' };
    const message = err instanceof Error ? err.message : String(err);
    // Refused addresses will be refused again; a server that is down may come back.
    const kind = err instanceof BadRequestError ? 'failed' : 'retry';
    return { kind, statusCode: null, error: message, durationMs: elapsed() };
  }
};

/** The first command that did not succeed (not one skipped after it), with its output's tail. */
async function failingCommand(em: EntityManager, deploymentId: string): Promise<FailingCommand | null> {
  const [entry] = await em.execute<
    Array<{
      id: string;
      host: string;
      cmd: string;
      status: string;
      exit_code: number | null;
      size: string | number | null;
      tail: Buffer | null;
    }>
  >(
    `select id, host, cmd, status, exit_code, octet_length(output) as size,
            substring(output from greatest(octet_length(output) - ${TAIL_BYTES - 1}, 1)) as tail
       from log_entries
      where deployment_id = ? and success = false and status <> 'skipped'
      order by started_at, seq
      limit 1`,
    [deploymentId],
  );
  if (!entry) return null;
  let bytes: Buffer;
  let cut: boolean;
  if (entry.tail) {
    bytes = entry.tail;
    cut = Number(entry.size) > TAIL_BYTES;
  } else {
    // Output kept in its chunks (every entry since protocol 3): the newest chunks hold the tail.
    const chunks = await em.execute<Array<{ data: Buffer; offset: string | number }>>(
      `select data, "offset" from log_chunks where log_entry_id = ? order by "offset" desc limit 64`,
      [entry.id],
    );
    const joined = Buffer.concat(chunks.reverse().map((c) => c.data));
    bytes = joined.subarray(Math.max(0, joined.length - TAIL_BYTES));
    cut = bytes.length < joined.length || (chunks.length > 0 && Number(chunks[0]!.offset) > 0);
  }
  const { tail, truncated } = outputTail(bytes, cut);
  return {
    host: entry.host,
    cmd: entry.cmd,
    status: entry.status,
    exitCode: entry.exit_code,
    tail,
    truncated,
  };
}
