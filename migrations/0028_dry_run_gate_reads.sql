-- A dry run asks the tool gate without taking its locks.
--
-- Since stop 34 a dry run ran the gate's own checks in a transaction it always
-- rolled back. It consumed nothing, but it still took the named approval's row
-- lock (FOR UPDATE) and the tool's rate-window row (the conditional upsert) for
-- the length of its transaction, so a flood of dry runs could slow the real
-- verifies of that tool, and a dry run waited behind a verify holding them.
--
-- The checks now take a mode: a gate with d = true reads instead of locking.
-- The approval is read as it is committed; the rate window's calls are
-- compared with the limit without taking a slot; nothing is deleted or marked
-- used. Every other check is the same statement as the real call's (0020's
-- function, renamed in 0027), in the same function, so a dry run and the real
-- gate cannot drift apart. A dry run reads a moment's state: a call racing it
-- may still fill the window or spend the approval.
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
      SELECT status, binding, expires_at INTO appr FROM approvals
       WHERE tenant_id = p_tenant AND id = p_gate->>'a';
    ELSE
      -- Locked: an approve, reject or a concurrent use of the same approval waits for us.
      SELECT status, binding, expires_at INTO appr FROM approvals
       WHERE tenant_id = p_tenant AND id = p_gate->>'a' FOR UPDATE;
    END IF;
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
