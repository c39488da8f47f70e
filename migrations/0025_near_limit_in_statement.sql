-- A near_limit rule decides on the counters the statement locks, not on a read
-- made before it.
--
-- Tenant rules may send a call to a human (or deny it) once its chain is past
-- 80% of a calls or budget ceiling (near_limit). The node read the counters
-- before the statement, so verifies arriving together, in one batch or in
-- concurrent ones, each saw the chain below 80% and all ran to max_calls with
-- no human asked (30 parallel calls under max_calls 30: every one allowed;
-- sent one at a time, calls 25 to 30 asked). When near_limit would change the
-- node's decision, it now sends nl; the metered pass, which holds the rows,
-- folds in whether this call takes one past 80%, and if so the item refuses
-- NEAR_LIMIT_REACHED before writing anything, and the node decides again with
-- near_limit true (as COST_CALIBRATION_FLAGGED does, 0010). Unmetered DRs have
-- no ceiling to be near. Otherwise the function is 0020's.
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
  near_ boolean := false;
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
           coalesce(bool_and(depth = pos - 1), true),
           -- Past 80% of a ceiling once this call counts, as the node's NEAR_LIMIT reads it (x/max > 0.8).
           coalesce(bool_or((max_calls > 0 AND (calls_used + 1) * 5 > max_calls * 4)
                         OR (max_spend_micros > 0 AND (spend_reserved_micros + p_estimated) * 5 > max_spend_micros * 4)), false)
      INTO n, metered, metered_state, any_metered_revoked, any_blocked, metered_root_first, near_
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
  -- The node decided on counters read before this transaction (nl: a near_limit rule would decide
  -- otherwise). Verifies of one batch, or of concurrent batches, each read the chain below 80% and
  -- all ran past it unasked; the locked counters decide instead, and the node decides again.
  IF near_ AND (p_gate->>'nl')::boolean IS TRUE THEN
    RETURN jsonb_build_object('o', 'NEAR_LIMIT_REACHED');
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
