-- Every database main's history migrated ends with this build's schema.
--
-- Some migrations were edited after they shipped on main: 0004, 0017-0020, 0027,
-- 0033, 0036 and 0037. Drizzle applies a migration once, so a database migrated
-- by the commit that shipped one kept its first version: opened by a later build
-- it missed baton_lock_waits_until (0036 at bf85092 and 2322edf: every verify
-- failed), api_keys_rotated_from_idx (0033 at b40db4a), and kept older bodies of
-- baton_tool_gate (0027 at 47d1909), baton_tool_gate_checks (0037 at 2322edf)
-- and log_queue_receipt (0019 at 7bb496c). Each object whose final definition
-- comes from an edited migration is defined again here, copied unchanged from
-- the latest migration that defines it, each with its number; no later
-- migration replaces any of them, so none goes back to an older version.
-- Objects of the edited migrations that later ones replace (baton_verify_item:
-- 0025, baton_verify_batch: 0038, baton_key_lineage: 0039) are already final.
-- On a database with this build's schema nothing changes; no data is touched.
-- test/store/migration-history.test.ts migrates a database with each such
-- commit's migrations, opens it with this build and compares the schemas.
--
-- 0004 as it first shipped (1be8fd0) lacked the tool gate: 0017 cannot drop its
-- baton_verify_item, so such a database stops there and never reaches this one.
-- Its drops below are 0004's, for such a database repaired by hand.
DROP FUNCTION IF EXISTS "baton_verify_count"(timestamptz, text, text, text, text[], text, text, text, text, bigint, text, text);
--> statement-breakpoint
DROP FUNCTION IF EXISTS "baton_record_denial"(timestamptz, text, text, text, text, text, text, text[], jsonb, text, text, text);
--> statement-breakpoint
-- 0004's.
CREATE OR REPLACE FUNCTION "baton_denial_item"(
  "p_tenant" text,
  "p_key_id" text,
  "p_jti" text,
  "p_invocation_hash" text,
  "p_code" text,
  "p_block" text,
  "p_chain" text[],
  "p_violations" jsonb,
  "p_subject" text,
  "p_receipt_jws" text,
  "p_receipt_kid" text
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  receipt_id bigint;
BEGIN
  -- Revoked or expired (expires_at: 0008): refused here, whatever a node's auth cache holds.
  IF NOT EXISTS (SELECT 1 FROM api_keys WHERE id = p_key_id AND tenant_id = p_tenant AND revoked_at IS NULL
                   AND (expires_at IS NULL OR expires_at > now())) THEN
    RETURN jsonb_build_object('o', 'KEY_REVOKED');
  END IF;
  INSERT INTO denials (tenant_id, jti, invocation_hash, code, block, dr_chain, caller_key_id, violations)
  VALUES (p_tenant, p_jti, p_invocation_hash, p_code, p_block, p_chain, p_key_id, p_violations);
  INSERT INTO receipts (tenant_id, kind, subject, jws, kid)
  VALUES (p_tenant, 'invocation.denied', p_subject, p_receipt_jws, p_receipt_kid)
  RETURNING id INTO receipt_id;
  RETURN jsonb_build_object('o', 'DENIED', 'rid', receipt_id);
END;
$$;
--> statement-breakpoint
-- 0019's.
CREATE OR REPLACE FUNCTION "log_queue_receipt"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW."kind" NOT IN ('delegation.accepted','invocation.allowed','invocation.denied','actual.recorded',
      'delegation.revoked','tools.catalog.published','approval.requested','approval.approved','approval.rejected',
      'grant.pending','grant.approved','grant.rejected') THEN
    RAISE EXCEPTION 'new row for relation "receipts" violates check constraint "receipts_kind_known"'
      USING ERRCODE = 'check_violation', CONSTRAINT = 'receipts_kind_known', TABLE = 'receipts', SCHEMA = TG_TABLE_SCHEMA;
  END IF;
  INSERT INTO "log_pending" ("receipt_id", "tenant_id", "created_at")
  VALUES (NEW."id", NEW."tenant_id", clock_timestamp());
  RETURN NULL;
END;
$$;
--> statement-breakpoint
-- 0027's: it hands a gate to baton_tool_gate_checks.
CREATE OR REPLACE FUNCTION "baton_tool_gate"("p_tenant" text, "p_chain" text[], "p_jti" text, "p_gate" jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  current_ integer;
BEGIN
  IF p_gate IS NOT NULL THEN
    RETURN baton_tool_gate_checks(p_tenant, p_chain, p_jti, p_gate);
  END IF;
  -- The node decided with no catalog (its cache held none). One published since, on any node,
  -- decides instead: the node forgets its cache and decides again, as for a newer version.
  SELECT max(version) INTO current_ FROM tool_catalogs WHERE tenant_id = p_tenant;
  IF current_ IS NOT NULL THEN
    DELETE FROM invocations WHERE tenant_id = p_tenant AND jti = p_jti;
    RETURN jsonb_build_object('o', 'CATALOG_CHANGED', 'v', current_);
  END IF;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
-- 0033's.
CREATE INDEX IF NOT EXISTS "api_keys_rotated_from_idx" ON "api_keys" ("rotated_from") WHERE "rotated_from" IS NOT NULL;
--> statement-breakpoint
-- 0036's.
CREATE OR REPLACE FUNCTION "baton_lock_waits_until"("p_deadline" timestamptz, "p_where" text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('lock_timeout',
    greatest(1, ceil(extract(epoch FROM baton_deadline_check(p_deadline, p_where)) * 1000))::bigint::text, true);
END;
$$;
--> statement-breakpoint
-- 0037's.
CREATE OR REPLACE FUNCTION "baton_tool_gate_checks"("p_tenant" text, "p_chain" text[], "p_jti" text, "p_gate" jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  current_ integer;
  pending_ text;
  flagged_ text;
  appr record;
  win record;
  used_ integer;
  refusal jsonb;
  rl integer := (p_gate->>'rl')::integer;
  now_ bigint := (p_gate->>'n')::bigint;
  cc jsonb := p_gate->'cc';
  dry boolean := coalesce((p_gate->>'d')::boolean, false);
BEGIN
  IF p_gate IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT coalesce(max(version), 0) INTO current_ FROM tool_catalogs WHERE tenant_id = p_tenant;
  IF current_ <> (p_gate->>'v')::integer THEN
    refusal := jsonb_build_object('o', 'CATALOG_CHANGED', 'v', current_);
  END IF;
  IF refusal IS NULL THEN
    SELECT g.dr_hash INTO pending_ FROM unnest(p_chain) AS c(hash)
     CROSS JOIN LATERAL (SELECT dr_hash FROM grant_approvals
                          WHERE tenant_id = p_tenant AND dr_hash = c.hash AND status <> 'approved' OFFSET 0) g
     LIMIT 1;
    IF FOUND THEN
      refusal := jsonb_build_object('o', 'GRANT_PENDING_APPROVAL', 'h', pending_);
    END IF;
  END IF;
  IF refusal IS NULL AND jsonb_typeof(cc) = 'object' THEN
    SELECT k.dr_hash INTO flagged_ FROM unnest(p_chain) AS c(hash)
     CROSS JOIN LATERAL (SELECT dr_hash FROM dr_cost_calibration
                          WHERE tenant_id = p_tenant AND dr_hash = c.hash
                            AND metered_invocations >= (cc->>'m')::integer
                            AND metered_micros > (cc->>'r')::numeric * declared_micros
                         OFFSET 0) k
     LIMIT 1;
    IF FOUND THEN
      refusal := jsonb_build_object('o', 'COST_CALIBRATION_FLAGGED', 'h', flagged_);
    END IF;
  END IF;
  IF refusal IS NULL AND p_gate->>'a' IS NOT NULL THEN
    IF dry THEN
      SELECT status, binding, expires_at, decided_by INTO appr FROM approvals
       WHERE tenant_id = p_tenant AND id = p_gate->>'a';
    ELSE
      -- Locked: an approve, reject or a concurrent use of the same approval waits for us.
      SELECT status, binding, expires_at, decided_by INTO appr FROM approvals
       WHERE tenant_id = p_tenant AND id = p_gate->>'a' FOR UPDATE;
    END IF;
    -- Its deadline is judged now: the node read its clock (n) before the statement waited (for this
    -- row, the chain's, a batch's keys), and an approval it judged live then may have expired
    -- since. n is moved on by the time the statement has run, on the database's clock.
    now_ := now_ + floor(extract(epoch FROM clock_timestamp() - now()))::bigint;
    IF NOT FOUND OR appr.binding IS DISTINCT FROM p_gate->>'b' THEN
      -- Another call learns only that: never whether the approval waits, was used, rejected or expired.
      refusal := jsonb_build_object('o', 'APPROVAL_MISMATCH', 'a', p_gate->>'a');
    ELSIF appr.status IN ('pending', 'approved') AND now_ >= appr.expires_at OR appr.status = 'expired' THEN
      refusal := jsonb_build_object('o', 'APPROVAL_EXPIRED', 'a', p_gate->>'a');
    ELSIF appr.status <> 'approved' THEN
      refusal := jsonb_build_object('o', CASE appr.status WHEN 'pending' THEN 'APPROVAL_REQUIRED'
        WHEN 'rejected' THEN 'APPROVAL_REJECTED' ELSE 'APPROVAL_USED' END, 'a', p_gate->>'a');
    ELSIF p_gate->>'k' IS NOT NULL AND appr.decided_by = ANY (baton_key_lineage(p_gate->>'k')) THEN
      -- The key that decided it, or one of its rotation lineage, is the caller: approving and running
      -- a call are separate duties, as asking and approving are (SELF_APPROVAL).
      refusal := jsonb_build_object('o', 'APPROVAL_DECIDED_BY_CALLER', 'a', p_gate->>'a');
    END IF;
  END IF;
  IF refusal IS NULL AND rl IS NOT NULL AND dry THEN
    -- The window the real call would count in, read: full when it holds rl calls.
    SELECT calls INTO used_ FROM tool_rate_windows
     WHERE tenant_id = p_tenant AND tool = p_gate->>'t'
       AND window_start = floor(extract(epoch FROM clock_timestamp()) / 60)::bigint * 60;
    IF coalesce(used_, 0) >= rl THEN
      refusal := jsonb_build_object('o', 'TOOL_RATE_LIMITED', 't', p_gate->>'t', 'rl', rl);
    END IF;
  ELSIF refusal IS NULL AND rl IS NOT NULL THEN
    -- Fixed one-minute windows of the database clock; the conditional upsert is exact under concurrency.
    INSERT INTO tool_rate_windows AS w (tenant_id, tool, window_start, calls)
    VALUES (p_tenant, p_gate->>'t', floor(extract(epoch FROM clock_timestamp()) / 60)::bigint * 60, 1)
    ON CONFLICT (tenant_id, tool, window_start) DO UPDATE SET calls = w.calls + 1 WHERE w.calls < rl
    RETURNING w.calls, w.window_start INTO win;
    IF NOT FOUND THEN
      refusal := jsonb_build_object('o', 'TOOL_RATE_LIMITED', 't', p_gate->>'t', 'rl', rl);
    ELSIF win.calls = 1 THEN
      -- This call opened a window: drop the tenant's windows older than the previous one.
      -- SKIP LOCKED: a row another transaction holds is left for a later prune, never waited on.
      DELETE FROM tool_rate_windows w
       USING (SELECT tool, window_start FROM tool_rate_windows
               WHERE tenant_id = p_tenant AND window_start < win.window_start - 60
               FOR UPDATE SKIP LOCKED) old
       WHERE w.tenant_id = p_tenant AND w.tool = old.tool AND w.window_start = old.window_start;
    END IF;
  END IF;
  IF dry THEN
    RETURN refusal; -- a dry run stored no invocation and spends no approval
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
