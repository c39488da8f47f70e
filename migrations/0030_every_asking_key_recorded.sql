-- Every API key whose verify asked for a pending approval, not only the first.
--
-- requested_by_key (0021) kept the key that opened the approval. The same call
-- sent again while the approval waited found it and returned it, but that
-- second asker was not recorded: a key holding both the verify and the approve
-- scope, asking second, could approve the call it had itself asked about,
-- which SELF_APPROVAL exists to refuse. asked_by_keys lists each key that
-- asked while the approval was pending; none of them may decide it. Older rows
-- start with the key they recorded.
ALTER TABLE "approvals" ADD COLUMN "asked_by_keys" text[] DEFAULT '{}' NOT NULL;
--> statement-breakpoint
UPDATE "approvals" SET "asked_by_keys" = ARRAY["requested_by_key"] WHERE "requested_by_key" IS NOT NULL;
