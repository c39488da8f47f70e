-- API keys gain expiry, a coarse last-used time, and rotation.
--
-- expires_at: after it the key is refused (auth, and inside the verify
-- statement: baton_verify_item and baton_denial_item of 0004 read it). Rotation sets the old key's expires_at to the end of
-- its grace period and mints a new key with rotated_from naming the old one,
-- so both work during the window.
-- last_used_at: written at most about once a minute per key and node, off
-- the request's path (see src/service/auth.ts), never per verify.
ALTER TABLE "api_keys" ADD COLUMN "expires_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "last_used_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "rotated_from" text;--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_rotated_from_fk" FOREIGN KEY ("rotated_from") REFERENCES "api_keys"("id");
