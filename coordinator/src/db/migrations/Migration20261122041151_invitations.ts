import { Migration } from '@mikro-orm/migrations';

export class Migration20261122041151_invitations extends Migration {

  override name = 'Migration20261122041151_invitations';

  override up(): void | Promise<void> {
    this.addSql(`create table "invitations" ("id" uuid not null, "created_at" timestamptz(3) not null, "email" varchar(320) not null, "role" varchar(16) not null, "token_hash" varchar(64) not null, "invited_by" varchar(320) not null, "expires_at" timestamptz(3) not null, "accepted_at" timestamptz(3) null, "revoked_at" timestamptz(3) null, primary key ("id"));`);
    this.addSql(`create index "invitations_email_index" on "invitations" ("email");`);
    this.addSql(`alter table "invitations" add constraint "invitations_token_hash_unique" unique ("token_hash");`);
  }

  override down(): void | Promise<void> {
    this.addSql(`drop table if exists "invitations" cascade;`);
  }

}
