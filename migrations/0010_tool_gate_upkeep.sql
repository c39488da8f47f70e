-- Tool gate upkeep (issue 13): rate windows are pruned, delegations can be
-- flagged for cost calibration inside the verify statement, and approvals
-- can be decided by a signed record from an approver DID.
--
-- tool_rate_windows: baton_tool_gate drops a tenant's windows that ended more
-- than a minute before the current one, when a call opens a new window. It
-- never touches the current or the previous window (the only ones a call can
-- still count in), and skips rows another transaction holds, so pruning
-- neither waits nor changes any exact per-minute count.
--
-- dr_cost_calibration: per delegation, over every invocation through it (its
-- whole subtree, as the usage view counts), the metered invocations, their
-- metered cost and what was declared for them. Kept by a trigger on actuals
-- (append-only, one per invocation), so the verify statement reads a flag
-- with one indexed lookup per delegation instead of aggregating invocations.
--
-- approvals.decision_jti / decision_jws: a signed decision's record, kept for
-- audit; its jti is unique per signer, so one signed record decides once.
CREATE TABLE "dr_cost_calibration" (
	"tenant_id" text NOT NULL,
	"dr_hash" text NOT NULL,
	"metered_invocations" integer NOT NULL,
	"metered_micros" numeric NOT NULL,
	"declared_micros" numeric NOT NULL,
	CONSTRAINT "dr_cost_calibration_tenant_id_dr_hash_pk" PRIMARY KEY("tenant_id","dr_hash")
);
--> statement-breakpoint
INSERT INTO "dr_cost_calibration" ("tenant_id", "dr_hash", "metered_invocations", "metered_micros", "declared_micros")
SELECT i.tenant_id, h, count(*), sum(a.cost_micros), sum(i.estimated_micros)
  FROM actuals a
  JOIN invocations i ON i.tenant_id = a.tenant_id AND i.jti = a.jti
 CROSS JOIN unnest(i.dr_chain) AS h
 WHERE a.cost_micros IS NOT NULL
 GROUP BY i.tenant_id, h;
--> statement-breakpoint
CREATE FUNCTION "baton_count_calibration"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.cost_micros IS NULL THEN
    RETURN NULL; -- an unavailable cost calibrates nothing
  END IF;
  -- Root first, the order every writer of a chain's rows locks in.
  INSERT INTO dr_cost_calibration AS c (tenant_id, dr_hash, metered_invocations, metered_micros, declared_micros)
  SELECT NEW.tenant_id, u.h, 1, NEW.cost_micros, i.estimated_micros
    FROM invocations i CROSS JOIN unnest(i.dr_chain) WITH ORDINALITY AS u(h, ord)
   WHERE i.tenant_id = NEW.tenant_id AND i.jti = NEW.jti
   ORDER BY u.ord
  ON CONFLICT (tenant_id, dr_hash) DO UPDATE
     SET metered_invocations = c.metered_invocations + 1,
         metered_micros = c.metered_micros + EXCLUDED.metered_micros,
         declared_micros = c.declared_micros + EXCLUDED.declared_micros;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "actuals_count_calibration"
AFTER INSERT ON "actuals"
FOR EACH ROW EXECUTE FUNCTION "baton_count_calibration"();
--> statement-breakpoint
ALTER TABLE "approvals" ADD COLUMN "decision_jti" text;
--> statement-breakpoint
ALTER TABLE "approvals" ADD COLUMN "decision_jws" text;
--> statement-breakpoint
CREATE UNIQUE INDEX "approvals_decision_jti_once" ON "approvals" USING btree ("tenant_id","decided_by","decision_jti") WHERE "approvals"."decision_jti" is not null;
--> statement-breakpoint
-- A signed decision arrives without an API key, so without a tenant: found by its random id.
CREATE INDEX "approvals_id_idx" ON "approvals" USING btree ("id");
--> statement-breakpoint
-- As in 0005, plus: cc = {r: ratio, m: min metered invocations} asks whether a
-- delegation of the chain is flagged for cost calibration (metered cost above
-- r times the declared estimates, over at least m metered invocations); the
-- service passes it only when the flag would change its decision to allow, and
-- re-decides on COST_CALIBRATION_FLAGGED. Rate windows are pruned (see above).
CREATE OR REPLACE FUNCTION "baton_tool_gate"("p_tenant" text, "p_chain" text[], "p_jti" text, "p_gate" jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  current_ integer;
  pending_ text;
  flagged_ text;
  appr record;
  win record;
  refusal jsonb;
  rl integer := (p_gate->>'rl')::integer;
  now_ bigint := (p_gate->>'n')::bigint;
  cc jsonb := p_gate->'cc';
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
  IF refusal IS NULL AND jsonb_typeof(cc) = 'object' THEN
    SELECT dr_hash INTO flagged_ FROM dr_cost_calibration
     WHERE tenant_id = p_tenant AND dr_hash = ANY (p_chain)
       AND metered_invocations >= (cc->>'m')::integer
       AND metered_micros > (cc->>'r')::numeric * declared_micros
     LIMIT 1;
    IF FOUND THEN
      refusal := jsonb_build_object('o', 'COST_CALIBRATION_FLAGGED', 'h', flagged_);
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
