-- An approval's deadline is judged when the approval is read, the statement's waits counted.
--
-- The gate compared an approval's expires_at with the node's clock as read
-- before the statement ran (the gate's n). A statement that waited (for the
-- approval's row, a chain's, a batch's keys) could spend an approval seconds
-- after its deadline, with used_at before it, while a listing already showed it
-- expired (an outside probe: allowed at E+1.99 s, used_at E-2). Once the
-- approval is read (locked, on a real call) the gate moves n on by the time the
-- statement has run, for the deadline and for used_at: the node's clock stays
-- the one deadlines are set and judged on, the wait is counted. The function is
-- 0035's otherwise unchanged.
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
