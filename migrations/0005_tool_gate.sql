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
--> statement-breakpoint
-- baton_verify_count of 0003 with one more parameter (p_gate) and one call to
-- baton_tool_gate; the rest is unchanged.
DROP FUNCTION "baton_verify_count"(timestamptz, text, text, text, text[], text, text, text, text, bigint, text, text);
--> statement-breakpoint
CREATE FUNCTION "baton_verify_count"(
  "p_deadline" timestamptz,
  "p_tenant" text,
  "p_key_id" text,
  "p_root_did" text,
  "p_chain" text[],
  "p_jti" text,
  "p_hash" text,
  "p_jws" text,
  "p_tool" text,
  "p_estimated" bigint,
  "p_receipt_jws" text,
  "p_receipt_kid" text,
  "p_gate" jsonb
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  left_ interval;
  r record;
  found_ int := 0;
  revoked_ text;
  blocked jsonb;
  metered text[] := '{}';
  prior record;
  state jsonb := '[]';
  receipt_id bigint;
  gate jsonb;
BEGIN
  left_ := baton_deadline_check(p_deadline, 'before the statement ran');
  -- Lock waits end at the deadline too (55P03, also a 503).
  PERFORM set_config('lock_timeout', greatest(1, ceil(extract(epoch FROM left_) * 1000))::bigint::text, true);

  IF NOT EXISTS (SELECT 1 FROM api_keys WHERE id = p_key_id AND tenant_id = p_tenant AND revoked_at IS NULL) THEN
    RETURN jsonb_build_object('o', 'KEY_REVOKED');
  END IF;
  IF NOT EXISTS (SELECT 1 FROM trusted_roots WHERE tenant_id = p_tenant AND did = p_root_did) THEN
    RETURN jsonb_build_object('o', 'UNTRUSTED_ROOT');
  END IF;

  FOR r IN
    SELECT hash, revoked_at IS NOT NULL AS revoked, calls_used, spend_reserved_micros FROM delegations
     WHERE tenant_id = p_tenant AND hash = ANY (p_chain) AND max_calls IS NULL AND max_spend_micros IS NULL
     ORDER BY depth
       FOR SHARE
  LOOP
    found_ := found_ + 1;
    state := state || jsonb_build_array(jsonb_build_array(r.hash, r.calls_used, r.spend_reserved_micros));
    IF r.revoked AND revoked_ IS NULL THEN revoked_ := r.hash; END IF;
  END LOOP;
  FOR r IN
    SELECT hash, depth, revoked_at IS NOT NULL AS revoked, calls_used, max_calls, spend_reserved_micros, max_spend_micros
      FROM delegations
     WHERE tenant_id = p_tenant AND hash = ANY (p_chain) AND (max_calls IS NOT NULL OR max_spend_micros IS NOT NULL)
     ORDER BY depth
       FOR NO KEY UPDATE
  LOOP
    found_ := found_ + 1;
    metered := metered || r.hash;
    -- The counters as they will be after this allow (the UPDATE below applies the same increments).
    state := state || jsonb_build_array(jsonb_build_array(r.hash,
      r.calls_used + CASE WHEN r.max_calls IS NULL THEN 0 ELSE 1 END,
      r.spend_reserved_micros + CASE WHEN r.max_spend_micros IS NULL THEN 0 ELSE p_estimated END));
    IF r.revoked AND revoked_ IS NULL THEN revoked_ := r.hash; END IF;
    IF blocked IS NULL AND r.max_calls IS NOT NULL AND r.calls_used >= r.max_calls THEN
      blocked := jsonb_build_object('o', 'CALLS_EXHAUSTED', 'h', r.hash, 'c', r.calls_used, 'sp', r.spend_reserved_micros);
    ELSIF blocked IS NULL AND r.max_spend_micros IS NOT NULL AND r.spend_reserved_micros + p_estimated > r.max_spend_micros THEN
      blocked := jsonb_build_object('o', 'BUDGET_EXHAUSTED', 'h', r.hash, 'c', r.calls_used, 'sp', r.spend_reserved_micros);
    END IF;
  END LOOP;
  IF found_ < cardinality(p_chain) THEN
    RETURN jsonb_build_object('o', 'BUNDLE_INCOMPLETE',
      'h', (SELECT c FROM unnest(p_chain) c WHERE NOT EXISTS (SELECT 1 FROM delegations d WHERE d.tenant_id = p_tenant AND d.hash = c) LIMIT 1));
  END IF;
  IF revoked_ IS NOT NULL THEN
    RETURN jsonb_build_object('o', 'RECEIPT_REVOKED', 'h', revoked_);
  END IF;

  SELECT hash, caller_key_id INTO prior FROM invocations WHERE tenant_id = p_tenant AND jti = p_jti;
  IF FOUND THEN
    RETURN baton_prior_use(p_tenant, p_key_id, p_chain, p_jti, p_hash, prior.hash, prior.caller_key_id);
  END IF;
  IF blocked IS NOT NULL THEN
    RETURN blocked;
  END IF;

  INSERT INTO invocations (tenant_id, jti, hash, jws, leaf_hash, dr_chain, tool, estimated_micros, caller_key_id)
  VALUES (p_tenant, p_jti, p_hash, p_jws, p_chain[cardinality(p_chain)], p_chain, p_tool, p_estimated, p_key_id)
  ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    -- Another transaction stored the jti after our first look (and we waited for its commit).
    SELECT hash, caller_key_id INTO prior FROM invocations WHERE tenant_id = p_tenant AND jti = p_jti;
    RETURN baton_prior_use(p_tenant, p_key_id, p_chain, p_jti, p_hash, prior.hash, prior.caller_key_id);
  END IF;

  -- >>> tool gate (issue 13): catalog version, pending grants, approval, rate limit.
  -- On a refusal it has undone its own writes and the invocation insert above.
  gate := baton_tool_gate(p_tenant, p_chain, p_jti, p_gate);
  IF gate IS NOT NULL THEN RETURN gate; END IF;
  -- <<< tool gate

  IF cardinality(metered) > 0 THEN
    -- The rows are locked and their ceilings were checked above under the lock.
    UPDATE delegations d
       SET calls_used = d.calls_used + CASE WHEN d.max_calls IS NULL THEN 0 ELSE 1 END,
           spend_reserved_micros = d.spend_reserved_micros + CASE WHEN d.max_spend_micros IS NULL THEN 0 ELSE p_estimated END
     WHERE d.tenant_id = p_tenant AND d.hash = ANY (metered);
  END IF;
  INSERT INTO receipts (tenant_id, kind, subject, jws, kid)
  VALUES (p_tenant, 'invocation.allowed', p_jti, p_receipt_jws, p_receipt_kid)
  RETURNING id INTO receipt_id;

  PERFORM baton_deadline_check(p_deadline, 'before commit');
  RETURN jsonb_build_object('o', 'ALLOWED', 'rid', receipt_id, 's', state);
END;
$$;
