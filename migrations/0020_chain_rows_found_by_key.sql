-- The verify statement finds a chain's DRs by key, whatever the tables held
-- when its plans were made.
--
-- baton_verify_batch runs with generic plans (0013), made once per connection,
-- usually while delegations is small, and kept for the connection's life
-- (postgres.js renews connections every 30-60 minutes). For `tenant_id = $1
-- AND hash = ANY ($2)` a generic plan cannot know the array's length
-- (PostgreSQL assumes 10 elements), while a small or unanalyzed table makes
-- the tenant look like a handful of rows: the plan read the primary key by
-- tenant_id alone and filtered every DR of the tenant by hash. The item's two
-- lock passes, its refusal lookups and its counter UPDATE (by ctid, with the
-- tenant beside it in the WHERE clause) all did so: each verify read every DR
-- its tenant held, twice, comparing each with every hash of its chain. The
-- batch's lock passes, a join, could hash-join a scan of the whole primary
-- key. 0014's test of this lookup looked for the primary key's name in the
-- plan, which such a plan also shows. In bench:profile (32 in flight, 2-hop
-- chains, a tenant of about a hundred DRs) the lock pass and the UPDATE took
-- 57 and 59 us per verify, and grew with the tenant (198 and 161 us at 128
-- chains).
--
-- Now each DR is one probe on the primary key, (tenant_id, hash) = (p_tenant,
-- c.hash), in a LATERAL subquery per element of the chain: with both key
-- columns equal, no plan prefers a range of the tenant. Subqueries that lock
-- are never pulled up into a join (the locking clause keeps them apart); the
-- others carry OFFSET 0 for the same reason. Rows are locked as they are
-- probed, so the probes run in the global lock order: an item's in its
-- chain's order from the root, which is depth order (each pass checks that
-- every DR's depth is its place in the chain, and raises otherwise); the
-- batch's in (depth, hash, tenant) order, the depth taken from the same
-- place. The UPDATE finds its rows by address alone (a TID scan, the only
-- plan without a sequential scan) and checks the tenant of what it returns.
-- The tool gate's grant approvals and cost calibrations, keyed (tenant_id,
-- dr_hash) too, are probed the same way.
--
-- test/store/verify-statement-tuning.test.ts makes the plans on a small
-- table, stores thousands more DRs in the tenant, and counts the buffers one
-- batch touches (32,852 before this migration, 218 after, against 166 with
-- the small table).
CREATE OR REPLACE FUNCTION "baton_verify_item"(
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
  "p_gate" jsonb,
  "p_metered" text
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  gate jsonb;
  found_ int := 0;
  n int;
  revoked_ text;
  any_revoked boolean := false;
  any_metered_revoked boolean;
  any_blocked boolean := false;
  blocked jsonb;
  metered tid[] := '{}';
  prior record;
  state jsonb := '[]';
  metered_state jsonb;
  receipt_id bigint;
  missing text;
  root_first boolean := true;
  metered_root_first boolean;
  same_tenant boolean;
BEGIN
  -- Revoked or expired (expires_at: 0008): refused here, whatever a node's auth cache holds.
  IF NOT EXISTS (SELECT 1 FROM api_keys WHERE id = p_key_id AND tenant_id = p_tenant AND revoked_at IS NULL
                   AND (expires_at IS NULL OR expires_at > now())) THEN
    RETURN jsonb_build_object('o', 'KEY_REVOKED');
  END IF;
  IF NOT EXISTS (SELECT 1 FROM trusted_roots WHERE tenant_id = p_tenant AND did = p_root_did) THEN
    RETURN jsonb_build_object('o', 'UNTRUSTED_ROOT');
  END IF;

  -- The same lock order as the batch (a no-op when the batch holds them already). Each pass is
  -- one query: each link is found by its key, one probe per DR in the chain's order, from the
  -- root, which is depth order (a DR's depth is its place in its chain; checked). The state's
  -- order does not matter (the service orders it by depth). Whether a DR is revoked, or past a
  -- ceiling, is folded in too; which one is named is looked up only then (below).
  IF p_metered IS DISTINCT FROM 'all' THEN
    WITH locked AS MATERIALIZED (
      SELECT c.pos, d.* FROM unnest(p_chain) WITH ORDINALITY AS c(hash, pos)
       CROSS JOIN LATERAL (
         SELECT hash, depth, revoked_at IS NOT NULL AS revoked, calls_used, spend_reserved_micros FROM delegations
          WHERE tenant_id = p_tenant AND hash = c.hash AND max_calls IS NULL AND max_spend_micros IS NULL
            FOR SHARE) d)
    SELECT count(*), coalesce(jsonb_agg(jsonb_build_array(hash, calls_used, spend_reserved_micros)), '[]'), coalesce(bool_or(revoked), false),
           coalesce(bool_and(depth = pos - 1), true)
      INTO found_, state, any_revoked, root_first
      FROM locked;
  END IF;
  IF p_metered IS DISTINCT FROM 'none' THEN
    WITH locked AS MATERIALIZED (
      SELECT c.pos, d.* FROM unnest(p_chain) WITH ORDINALITY AS c(hash, pos)
       CROSS JOIN LATERAL (
         SELECT ctid AS row_id, hash, depth, revoked_at IS NOT NULL AS revoked, calls_used, max_calls, spend_reserved_micros, max_spend_micros
           FROM delegations
          WHERE tenant_id = p_tenant AND hash = c.hash AND (max_calls IS NOT NULL OR max_spend_micros IS NOT NULL)
            FOR NO KEY UPDATE) d)
    SELECT count(*),
           coalesce(array_agg(row_id), '{}'),
           -- The counters as they will be after this allow (the UPDATE below applies the same increments).
           coalesce(jsonb_agg(jsonb_build_array(hash,
             calls_used + CASE WHEN max_calls IS NULL THEN 0 ELSE 1 END,
             spend_reserved_micros + CASE WHEN max_spend_micros IS NULL THEN 0 ELSE p_estimated END)), '[]'),
           coalesce(bool_or(revoked), false),
           coalesce(bool_or((max_calls IS NOT NULL AND calls_used >= max_calls)
                         OR (max_spend_micros IS NOT NULL AND spend_reserved_micros + p_estimated > max_spend_micros)), false),
           coalesce(bool_and(depth = pos - 1), true)
      INTO n, metered, metered_state, any_metered_revoked, any_blocked, metered_root_first
      FROM locked;
    found_ := found_ + n;
    state := state || metered_state;
    any_revoked := any_revoked OR any_metered_revoked;
    root_first := root_first AND metered_root_first;
  END IF;
  IF NOT root_first THEN
    -- Locks taken out of depth order could deadlock with another batch. The service sends every
    -- chain from its root; anything else is a bug, never a decision: nothing is written.
    RAISE EXCEPTION 'the chain was not sent root first (each DR at its depth), so its DRs were not locked in depth order';
  END IF;
  -- A refusal names the DR 0017's loop named: the first in lock order (the unmetered pass's DRs
  -- before the metered pass's, each by depth); past a ceiling, its calls before its spend. The
  -- rows are locked by this transaction, so this reads what the passes read.
  IF any_revoked THEN
    revoked_ := (SELECT d.hash FROM unnest(p_chain) AS c(hash)
                  CROSS JOIN LATERAL (SELECT hash, depth, max_calls, max_spend_micros FROM delegations
                                       WHERE tenant_id = p_tenant AND hash = c.hash AND revoked_at IS NOT NULL OFFSET 0) d
                  ORDER BY (d.max_calls IS NOT NULL OR d.max_spend_micros IS NOT NULL), d.depth, d.hash
                  LIMIT 1);
  ELSIF any_blocked THEN
    blocked := (SELECT jsonb_build_object(
                  'o', CASE WHEN d.max_calls IS NOT NULL AND d.calls_used >= d.max_calls THEN 'CALLS_EXHAUSTED' ELSE 'BUDGET_EXHAUSTED' END,
                  'h', d.hash, 'c', d.calls_used, 'sp', d.spend_reserved_micros)
                  FROM unnest(p_chain) AS c(hash)
                 CROSS JOIN LATERAL (SELECT hash, depth, calls_used, max_calls, spend_reserved_micros FROM delegations
                                      WHERE tenant_id = p_tenant AND hash = c.hash
                                        AND ((max_calls IS NOT NULL AND calls_used >= max_calls)
                                          OR (max_spend_micros IS NOT NULL AND spend_reserved_micros + p_estimated > max_spend_micros))
                                     OFFSET 0) d
                 ORDER BY d.depth, d.hash
                 LIMIT 1);
  END IF;
  IF (any_revoked AND revoked_ IS NULL) OR (any_blocked AND NOT any_revoked AND blocked IS NULL) THEN
    -- The locks make this impossible; should it happen, fail closed rather than allow.
    RAISE EXCEPTION 'a refusal folded from the locked chain was not found again';
  END IF;
  IF found_ < cardinality(p_chain) THEN
    missing := (SELECT c FROM unnest(p_chain) c WHERE NOT EXISTS (SELECT 1 FROM delegations d WHERE d.tenant_id = p_tenant AND d.hash = c) LIMIT 1);
    IF missing IS NULL THEN
      -- Every DR is stored, so a lock query was skipped wrongly: the caller's metering disagrees
      -- with the stored ceilings. A bug, never a decision: nothing is written.
      RAISE EXCEPTION 'the chain''s metering (%) disagrees with its stored DRs', p_metered;
    END IF;
    RETURN jsonb_build_object('o', 'BUNDLE_INCOMPLETE', 'h', missing);
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

  IF p_receipt_jws IS NULL THEN
    -- The caller predicted a refusal and signed no allow receipt: it signs one and asks again.
    RETURN jsonb_build_object('o', 'UNPREDICTED');
  END IF;
  INSERT INTO invocations (tenant_id, jti, hash, jws, leaf_hash, dr_chain, tool, estimated_micros, caller_key_id)
  VALUES (p_tenant, p_jti, p_hash, p_jws, p_chain[cardinality(p_chain)], p_chain, p_tool, p_estimated, p_key_id)
  ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    -- Another transaction stored the jti after our first look (and we waited for its commit).
    SELECT hash, caller_key_id INTO prior FROM invocations WHERE tenant_id = p_tenant AND jti = p_jti;
    RETURN baton_prior_use(p_tenant, p_key_id, p_chain, p_jti, p_hash, prior.hash, prior.caller_key_id);
  END IF;

  -- The tool gate (0005): catalog version, held grants, one-time approval, rate limit. A refusal
  -- has undone its own writes and deleted the invocation inserted above, so it changes no other
  -- item of the batch.
  gate := baton_tool_gate(p_tenant, p_chain, p_jti, p_gate);
  IF gate IS NOT NULL THEN RETURN gate; END IF;

  IF cardinality(metered) > 0 THEN
    -- The rows are locked and their ceilings were checked above under the lock. Locked by this
    -- transaction, a row keeps the version read above until this UPDATE writes the next one, so
    -- it is found by that version's address, without an index lookup per DR. Should a row ever
    -- not be found that way, the item fails rather than allow a call it did not count.
    -- The tenant is checked on what the UPDATE returns, not in its WHERE clause, where a plan
    -- made while the table was small could read the tenant's rows instead of these addresses.
    WITH counted AS (
      UPDATE delegations d
         SET calls_used = d.calls_used + CASE WHEN d.max_calls IS NULL THEN 0 ELSE 1 END,
             spend_reserved_micros = d.spend_reserved_micros + CASE WHEN d.max_spend_micros IS NULL THEN 0 ELSE p_estimated END
       WHERE d.ctid = ANY (metered)
      RETURNING d.tenant_id)
    SELECT count(*), coalesce(bool_and(tenant_id = p_tenant), true) INTO n, same_tenant FROM counted;
    IF n <> cardinality(metered) OR NOT same_tenant THEN
      RAISE EXCEPTION 'counted % of the % metered DRs locked for this call, or a DR of another tenant', n, cardinality(metered);
    END IF;
  END IF;
  INSERT INTO receipts (tenant_id, kind, subject, jws, kid)
  VALUES (p_tenant, 'invocation.allowed', p_jti, p_receipt_jws, p_receipt_kid)
  RETURNING id INTO receipt_id;
  RETURN jsonb_build_object('o', 'ALLOWED', 'rid', receipt_id, 's', state);
END;
$$;
--> statement-breakpoint
-- As 0017's, but each DR is locked by a key probe in the global order; the SET clauses of 0013
-- and 0014 are kept (a CREATE OR REPLACE would otherwise drop them).
CREATE OR REPLACE FUNCTION "baton_verify_batch"("p_deadline" timestamptz, "p_items" jsonb) RETURNS jsonb
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
  left_ interval;
  item jsonb;
  answer jsonb;
  answers jsonb := '[]';
BEGIN
  left_ := baton_deadline_check(p_deadline, 'before the statement ran');
  -- Lock waits end at the deadline too (55P03, also a 503).
  PERFORM set_config('lock_timeout', greatest(1, ceil(extract(epoch FROM left_) * 1000))::bigint::text, true);

  -- Every DR any allow of the batch names, locked in the one global order (see above), one key
  -- probe each in that order: a DR's depth is its place in its chain (the items check it). A
  -- lone item locks its own chain in that order itself, so it skips these two queries.
  IF jsonb_array_length(p_items) > 1 THEN
    -- A pass no allow of the batch needs is skipped: it would lock nothing (0017's hint).
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_items) i WHERE i->>'k' = 'a' AND i->>'mt' IS DISTINCT FROM 'all') THEN
      PERFORM 1 FROM (SELECT DISTINCT c.pos - 1 AS depth, c.hash, i->>'t' AS tenant
                        FROM jsonb_array_elements(p_items) i, jsonb_array_elements_text(i->'chain') WITH ORDINALITY c(hash, pos)
                       WHERE i->>'k' = 'a'
                       ORDER BY 1, 2, 3) w
       CROSS JOIN LATERAL (SELECT 1 FROM delegations d
                            WHERE d.tenant_id = w.tenant AND d.hash = w.hash AND (d.max_calls IS NULL AND d.max_spend_micros IS NULL)
                              FOR SHARE) l;
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_items) i WHERE i->>'k' = 'a' AND i->>'mt' IS DISTINCT FROM 'none') THEN
      PERFORM 1 FROM (SELECT DISTINCT c.pos - 1 AS depth, c.hash, i->>'t' AS tenant
                        FROM jsonb_array_elements(p_items) i, jsonb_array_elements_text(i->'chain') WITH ORDINALITY c(hash, pos)
                       WHERE i->>'k' = 'a'
                       ORDER BY 1, 2, 3) w
       CROSS JOIN LATERAL (SELECT 1 FROM delegations d
                            WHERE d.tenant_id = w.tenant AND d.hash = w.hash AND (d.max_calls IS NOT NULL OR d.max_spend_micros IS NOT NULL)
                              FOR NO KEY UPDATE) l;
    END IF;
  END IF;

  FOR item IN SELECT value FROM jsonb_array_elements(p_items)
  LOOP
    IF item->>'k' = 'a' THEN
      answer := baton_verify_item(item->>'t', item->>'key', item->>'root',
        ARRAY(SELECT jsonb_array_elements_text(item->'chain')), item->>'jti', item->>'hash', item->>'jws',
        item->>'tool', (item->>'est')::bigint, item->>'rjws', item->>'rkid', item->'gate', item->>'mt');
      IF item ? 'deny' AND answer->>'o' = item->'deny'->>'code' AND answer->>'h' = item->'deny'->>'h' THEN
        answer := answer || jsonb_build_object('denied', baton_denial_item(item->>'t', item->>'key', item->>'jti', item->>'hash',
          answer->>'o', 'G', ARRAY(SELECT jsonb_array_elements_text(item->'chain')),
          jsonb_set(item->'deny'->'v', '{0,actual}', answer->'c'), item->>'jti', item->'deny'->>'rjws', item->'deny'->>'rkid'));
      END IF;
    ELSE
      answer := baton_denial_item(item->>'t', item->>'key', item->>'jti', item->>'ih', item->>'code', item->>'block',
        ARRAY(SELECT jsonb_array_elements_text(item->'chain')), item->'v', item->>'subj', item->>'rjws', item->>'rkid');
    END IF;
    answers := answers || jsonb_build_array(answer);
  END LOOP;

  PERFORM baton_deadline_check(p_deadline, 'before commit');
  RETURN answers;
END;
$$;
--> statement-breakpoint
-- As 0010's, but a chain's grant approvals and cost calibrations (both keyed (tenant_id, dr_hash))
-- are found by one key probe per DR, for the same reason.
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
