-- The name of the transparency logs, fixed by the first checkpoint.
--
-- A log's name (BATON_TLOG_NAME) is the first line of every checkpoint and
-- names its verifier keys. A start refuses a name other than the one the
-- stored checkpoints carry, but on a database with none yet every node
-- passed that check: two nodes started with different names each signed
-- checkpoints under their own, and one tenant's log alternated between two
-- names (an outside probe: 20 under one, 7 under the other), which no
-- auditor pinning either could follow. The first integration round that
-- signs a checkpoint now writes its name here, in the same transaction;
-- a round under another name finds this one and signs nothing.
CREATE TABLE IF NOT EXISTS "log_name" (
  "singleton" boolean PRIMARY KEY DEFAULT true,
  "name" text NOT NULL,
  "created_at" timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT "log_name_singleton" CHECK ("singleton")
);
--> statement-breakpoint
CREATE TRIGGER "log_name_append_only" BEFORE UPDATE OR DELETE OR TRUNCATE ON "log_name"
FOR EACH STATEMENT EXECUTE FUNCTION "log_refuse_change"();
