// The committed migrations, in order. `npm run db:migration:create` writes new ones; list them here.
import { Migration20261122002648_initial } from './Migration20261122002648_initial.ts';
import { Migration20261122004509_agents } from './Migration20261122004509_agents.ts';
import { Migration20261122010514_reliability } from './Migration20261122010514_reliability.ts';
import { Migration20261122013714_api_tokens } from './Migration20261122013714_api_tokens.ts';
import { Migration20261122014059_forges } from './Migration20261122014059_forges.ts';
import { Migration20261122031541_notifications } from './Migration20261122031541_notifications.ts';
import { Migration20261122040000_rate_limits } from './Migration20261122040000_rate_limits.ts';
import { Migration20261122041000_audit_origin } from './Migration20261122041000_audit_origin.ts';
import { Migration20261122041151_invitations } from './Migration20261122041151_invitations.ts';
import { Migration20261122041625_settings } from './Migration20261122041625_settings.ts';
import { Migration20261122073005_agent_installs } from './Migration20261122073005_agent_installs.ts';

export const migrations = [
  { name: 'Migration20261122002648_initial', class: Migration20261122002648_initial },
  { name: 'Migration20261122004509_agents', class: Migration20261122004509_agents },
  { name: 'Migration20261122010514_reliability', class: Migration20261122010514_reliability },
  { name: 'Migration20261122013714_api_tokens', class: Migration20261122013714_api_tokens },
  { name: 'Migration20261122014059_forges', class: Migration20261122014059_forges },
  { name: 'Migration20261122031541_notifications', class: Migration20261122031541_notifications },
  { name: 'Migration20261122040000_rate_limits', class: Migration20261122040000_rate_limits },
  { name: 'Migration20261122041000_audit_origin', class: Migration20261122041000_audit_origin },
  { name: 'Migration20261122041151_invitations', class: Migration20261122041151_invitations },
  { name: 'Migration20261122041625_settings', class: Migration20261122041625_settings },
  { name: 'Migration20261122073005_agent_installs', class: Migration20261122073005_agent_installs },
];
