-- Tool catalogs, approval gates and per-tool rate limits (issue 13).
--
-- tool_catalogs: one immutable row per version of a tenant's tool document
-- (tools, strict mode, approval rules, default decision, approver DIDs). The
-- current version is the highest; a change is a new row, never an update.
--
-- approvals: one human decision about one call (bound by a digest of the
-- chain, tool server and args). At most one live (pending or approved)
-- approval per call, so retries while waiting find the same one.
--
-- grant_approvals: delegations whose tools together form the lethal trifecta,
-- stored pending a human; unusable until approved.
--
-- tool_rate_windows: calls allowed per tenant, tool and minute of the database
-- clock (one clock for every node), counted in the verify statement.
--
-- baton_tool_gate runs inside baton_verify_count, after the replay insert and
-- before the counters: it re-checks every mutable fact the service decided
-- on (catalog version still current, no grant of the chain pending, the
-- approval still approved, unused and unexpired, the tool's rate) and only
-- then writes (rate counter, approval used). A refusal undoes the invocation
-- insert and writes nothing.
CREATE TABLE "tool_catalogs" (
	"tenant_id" text NOT NULL,
	"version" integer NOT NULL,
	"document" jsonb NOT NULL,
	"hash" text NOT NULL,
	"created_by" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "tool_catalogs_tenant_id_version_pk" PRIMARY KEY("tenant_id","version"),
	CONSTRAINT "tool_catalogs_version_positive" CHECK ("tool_catalogs"."version" >= 1)
);
--> statement-breakpoint
ALTER TABLE "tool_catalogs" ADD CONSTRAINT "tool_catalogs_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;
--> statement-breakpoint
CREATE FUNCTION "tool_catalogs_refuse_change"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'tool catalog versions are immutable: % refused', TG_OP
    USING ERRCODE = 'raise_exception', HINT = 'publish a new version instead';
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "tool_catalogs_immutable"
BEFORE UPDATE OR DELETE OR TRUNCATE ON "tool_catalogs"
FOR EACH STATEMENT EXECUTE FUNCTION "tool_catalogs_refuse_change"();
--> statement-breakpoint
CREATE TABLE "approvals" (
	"tenant_id" text NOT NULL,
	"id" text NOT NULL,
	"binding" text NOT NULL,
	"status" text NOT NULL,
	"requested_by" text NOT NULL,
	"invocation_jti" text NOT NULL,
	"dr_chain" text[] NOT NULL,
	"tool" text,
	"tool_server" text NOT NULL,
	"catalog_version" integer NOT NULL,
	"rule" text NOT NULL,
	"explanation" text NOT NULL,
	"created_at" bigint NOT NULL,
	"expires_at" bigint NOT NULL,
	"decided_by" text,
	"actor" text,
	"reason" text,
	"decided_at" bigint,
	"used_at" bigint,
	"used_jti" text,
	CONSTRAINT "approvals_tenant_id_id_pk" PRIMARY KEY("tenant_id","id"),
	CONSTRAINT "approvals_status_known" CHECK ("approvals"."status" in ('pending','approved','rejected','expired','used')),
	CONSTRAINT "approvals_deadline_after_creation" CHECK ("approvals"."expires_at" > "approvals"."created_at"),
	CONSTRAINT "approvals_decided_complete" CHECK (("approvals"."status" in ('pending','expired')) or ("approvals"."decided_by" is not null and "approvals"."actor" is not null and "approvals"."reason" is not null and "approvals"."decided_at" is not null)),
	CONSTRAINT "approvals_used_complete" CHECK ("approvals"."status" <> 'used' or ("approvals"."used_at" is not null and "approvals"."used_jti" is not null))
);
--> statement-breakpoint
ALTER TABLE "approvals" ADD CONSTRAINT "approvals_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;
--> statement-breakpoint
CREATE UNIQUE INDEX "approvals_one_live_per_call" ON "approvals" USING btree ("tenant_id","binding") WHERE "approvals"."status" in ('pending','approved');
--> statement-breakpoint
CREATE INDEX "approvals_tenant_status_idx" ON "approvals" USING btree ("tenant_id","status","created_at");
--> statement-breakpoint
CREATE TABLE "grant_approvals" (
	"tenant_id" text NOT NULL,
	"dr_hash" text NOT NULL,
	"status" text NOT NULL,
	"explanation" text NOT NULL,
	"catalog_version" integer NOT NULL,
	"decided_by" text,
	"actor" text,
	"reason" text,
	"decided_at" bigint,
	CONSTRAINT "grant_approvals_tenant_id_dr_hash_pk" PRIMARY KEY("tenant_id","dr_hash"),
	CONSTRAINT "grant_approvals_status_known" CHECK ("grant_approvals"."status" in ('pending','approved','rejected'))
);
--> statement-breakpoint
ALTER TABLE "grant_approvals" ADD CONSTRAINT "grant_approvals_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;
--> statement-breakpoint
CREATE TABLE "tool_rate_windows" (
	"tenant_id" text NOT NULL,
	"tool" text NOT NULL,
	"window_start" bigint NOT NULL,
	"calls" integer NOT NULL,
	CONSTRAINT "tool_rate_windows_tenant_id_tool_window_start_pk" PRIMARY KEY("tenant_id","tool","window_start"),
	CONSTRAINT "tool_rate_windows_calls_positive" CHECK ("tool_rate_windows"."calls" >= 1)
);
--> statement-breakpoint
ALTER TABLE "tool_rate_windows" ADD CONSTRAINT "tool_rate_windows_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;
--> statement-breakpoint
ALTER TABLE "api_keys" DROP CONSTRAINT "api_keys_scopes_known";
--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_scopes_known" CHECK ("api_keys"."scopes" <@ array['admin','issue','verify','report','audit','approve']::text[]);
--> statement-breakpoint
ALTER TABLE "receipts" DROP CONSTRAINT "receipts_kind_known";
--> statement-breakpoint
ALTER TABLE "receipts" ADD CONSTRAINT "receipts_kind_known" CHECK ("receipts"."kind" in ('delegation.accepted','invocation.allowed','invocation.denied','actual.recorded','delegation.revoked','tools.catalog.published','approval.requested','approval.approved','approval.rejected','grant.pending','grant.approved','grant.rejected'));
--> statement-breakpoint
-- The in-statement half of the tool gate. p_gate is null for a tenant that
-- has never published a catalog (nothing to enforce); otherwise
--   v  catalog version the service decided with (re-checked: it is mutable),
--   n  the service clock (unix seconds), which approval deadlines are set on,
--   t  the tool name, rl its rate_limit_per_minute (null: none),
--   a  the approval this call spends (null: none needed), b the call's binding.
-- Returns null to go on, or {o: refusal code, ...}; raises nothing.
CREATE FUNCTION "baton_tool_gate"("p_tenant" text, "p_chain" text[], "p_jti" text, "p_gate" jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  current_ integer;
  pending_ text;
  appr record;
  refusal jsonb;
  rl integer := (p_gate->>'rl')::integer;
  now_ bigint := (p_gate->>'n')::bigint;
BEGIN
  IF p_gate IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT coalesce(max(version), 0) INTO current_ FROM tool_catalogs WHERE tenant_id = p_tenant;
  IF current_ <> (p_gate->>'v')::integer THEN
    refusal := jsonb_build_object('o', 'CATALOG_CHANGED', 'v', current_);
  END IF;
  IF refusal IS NULL THEN
    SELECT dr_hash INTO pending_ FROM grant_approvals
     WHERE tenant_id = p_tenant AND dr_hash = ANY (p_chain) AND status <> 'approved' LIMIT 1;
    IF FOUND THEN
      refusal := jsonb_build_object('o', 'GRANT_PENDING_APPROVAL', 'h', pending_);
    END IF;
  END IF;
  IF refusal IS NULL AND p_gate->>'a' IS NOT NULL THEN
    -- Locked: an approve, reject or a concurrent use of the same approval waits for us.
    SELECT status, binding, expires_at INTO appr FROM approvals
     WHERE tenant_id = p_tenant AND id = p_gate->>'a' FOR UPDATE;
    IF NOT FOUND THEN
      refusal := jsonb_build_object('o', 'APPROVAL_MISMATCH', 'a', p_gate->>'a');
    ELSIF appr.status IN ('pending', 'approved') AND now_ >= appr.expires_at OR appr.status = 'expired' THEN
      refusal := jsonb_build_object('o', 'APPROVAL_EXPIRED', 'a', p_gate->>'a');
    ELSIF appr.status <> 'approved' THEN
      refusal := jsonb_build_object('o', CASE appr.status WHEN 'pending' THEN 'APPROVAL_REQUIRED'
        WHEN 'rejected' THEN 'APPROVAL_REJECTED' ELSE 'APPROVAL_USED' END, 'a', p_gate->>'a');
    ELSIF appr.binding IS DISTINCT FROM p_gate->>'b' THEN
      refusal := jsonb_build_object('o', 'APPROVAL_MISMATCH', 'a', p_gate->>'a');
    END IF;
  END IF;
  IF refusal IS NULL AND rl IS NOT NULL THEN
    -- Fixed one-minute windows of the database clock; the conditional upsert is exact under concurrency.
    INSERT INTO tool_rate_windows AS w (tenant_id, tool, window_start, calls)
    VALUES (p_tenant, p_gate->>'t', floor(extract(epoch FROM clock_timestamp()) / 60)::bigint * 60, 1)
    ON CONFLICT (tenant_id, tool, window_start) DO UPDATE SET calls = w.calls + 1 WHERE w.calls < rl;
    IF NOT FOUND THEN
      refusal := jsonb_build_object('o', 'TOOL_RATE_LIMITED', 't', p_gate->>'t', 'rl', rl);
    END IF;
  END IF;
  IF refusal IS NOT NULL THEN
    -- Nothing of this call may stay: it was inserted just before the gate ran.
    DELETE FROM invocations WHERE tenant_id = p_tenant AND jti = p_jti;
    RETURN refusal;
  END IF;
  IF p_gate->>'a' IS NOT NULL THEN
    UPDATE approvals SET status = 'used', used_at = now_, used_jti = p_jti WHERE tenant_id = p_tenant AND id = p_gate->>'a';
  END IF;
  RETURN NULL;
END;
$$;
