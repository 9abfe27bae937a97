// The outgoing-webhook channel: the payload recorded when the state was noticed, signed the
// Standard Webhooks way with the hook's secret (outgoing-http.ts).
import type { ChannelSender } from './delivery.ts';
import { postJson, signWebhook } from './outgoing-http.ts';

export const sendWebhook: ChannelSender = async (ctx, delivery) => {
  const [hook] = await ctx.orm.em
    .fork()
    .execute<Array<{ url: string; secret_encrypted: string }>>(
      'select url, secret_encrypted from project_hooks where id = ?',
      [delivery.hook_id],
    );
  if (!hook || !delivery.payload) return { kind: 'skipped', error: 'The webhook was deleted' };
  const body = JSON.stringify(delivery.payload);
  const timestamp = Math.floor(Date.now() / 1000);
  const secret = ctx.box.decrypt(hook.secret_encrypted);
  const result = await postJson(
    hook.url,
    {
      'content-type': 'application/json',
      'user-agent': 'Deckhand-Webhooks',
      'webhook-id': delivery.id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signWebhook(secret, delivery.id, timestamp, body),
    },
    body,
    ctx.httpTimeoutMs,
  );
  if (result.ok) return { kind: 'delivered', statusCode: result.statusCode, durationMs: result.durationMs };
  return {
    kind: 'retry',
    statusCode: result.statusCode,
    error: result.error ?? 'failed',
    durationMs: result.durationMs,
  };
};
