-- The verify item folds its chain in SQL, and counts it by address.
--
-- 0017's item read its chain's rows in a PL/pgSQL loop: per DR a handful of
-- interpreted statements, and a JSON array and a text array grown one element
-- at a time. Each lock pass is now one query: the rows are locked in the same
-- (depth, hash) order, in a materialized CTE, and plain aggregates fold them
-- into the item's state, the addresses of its metered rows, and whether any
-- DR is revoked or past a ceiling. Only then (a refusal) does a second query
-- name the DR the loop would have named: ordered aggregates would have paid
-- for a sort on every allow. The rows are locked, so that query finds what the
-- pass folded; should it not, the item raises rather than allow.
--
-- The counter UPDATE then finds each metered row by the address (ctid) of the
-- version the pass locked, not by a second index lookup per DR. A row this
-- transaction holds locked keeps that version until this UPDATE writes the
-- next one (each item of a batch reads its addresses afresh, after the items
-- before it). Should an update still not land on every locked row, the item
-- raises an error: it never allows a call it did not count.
--
-- Measured (bench:profile, 32 in flight, fsync off, 0017's function swapped
-- back in with --sql, alternated): depth 16, 513 verifies/s against 466 and
-- PostgreSQL CPU per verify 1,344 us against 1,553 (an earlier form of this
-- function: 502 and 571 against 443 and 419); depth 2, 654 and 769 against
-- 611 and 577, with PostgreSQL CPU per verify 970 and 862 us against 977 and
-- 1,047.
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
  -- one query: the rows are locked in (depth, hash) order below the aggregates. The state's
  -- order does not matter (the service orders it by depth). Whether a DR is revoked, or past a
  -- ceiling, is folded in too; which one is named is looked up only then (below).
  IF p_metered IS DISTINCT FROM 'all' THEN
    WITH locked AS MATERIALIZED (
      SELECT hash, depth, revoked_at IS NOT NULL AS revoked, calls_used, spend_reserved_micros FROM delegations
       WHERE tenant_id = p_tenant AND hash = ANY (p_chain) AND max_calls IS NULL AND max_spend_micros IS NULL
       ORDER BY depth, hash
         FOR SHARE)
    SELECT count(*), coalesce(jsonb_agg(jsonb_build_array(hash, calls_used, spend_reserved_micros)), '[]'), coalesce(bool_or(revoked), false)
      INTO found_, state, any_revoked
      FROM locked;
  END IF;
  IF p_metered IS DISTINCT FROM 'none' THEN
    WITH locked AS MATERIALIZED (
      SELECT ctid AS row_id, hash, depth, revoked_at IS NOT NULL AS revoked, calls_used, max_calls, spend_reserved_micros, max_spend_micros
        FROM delegations
       WHERE tenant_id = p_tenant AND hash = ANY (p_chain) AND (max_calls IS NOT NULL OR max_spend_micros IS NOT NULL)
       ORDER BY depth, hash
         FOR NO KEY UPDATE)
    SELECT count(*),
           coalesce(array_agg(row_id), '{}'),
           -- The counters as they will be after this allow (the UPDATE below applies the same increments).
           coalesce(jsonb_agg(jsonb_build_array(hash,
             calls_used + CASE WHEN max_calls IS NULL THEN 0 ELSE 1 END,
             spend_reserved_micros + CASE WHEN max_spend_micros IS NULL THEN 0 ELSE p_estimated END)), '[]'),
           coalesce(bool_or(revoked), false),
           coalesce(bool_or((max_calls IS NOT NULL AND calls_used >= max_calls)
                         OR (max_spend_micros IS NOT NULL AND spend_reserved_micros + p_estimated > max_spend_micros)), false)
      INTO n, metered, metered_state, any_metered_revoked, any_blocked
      FROM locked;
    found_ := found_ + n;
    state := state || metered_state;
    any_revoked := any_revoked OR any_metered_revoked;
  END IF;
  -- A refusal names the DR 0017's loop named: the first in lock order (the unmetered pass's DRs
  -- before the metered pass's, each by depth); past a ceiling, its calls before its spend. The
  -- rows are locked by this transaction, so this reads what the passes read.
  IF any_revoked THEN
    revoked_ := (SELECT hash FROM delegations
                  WHERE tenant_id = p_tenant AND hash = ANY (p_chain) AND revoked_at IS NOT NULL
                  ORDER BY (max_calls IS NOT NULL OR max_spend_micros IS NOT NULL), depth, hash
                  LIMIT 1);
  ELSIF any_blocked THEN
    blocked := (SELECT jsonb_build_object(
                  'o', CASE WHEN max_calls IS NOT NULL AND calls_used >= max_calls THEN 'CALLS_EXHAUSTED' ELSE 'BUDGET_EXHAUSTED' END,
                  'h', hash, 'c', calls_used, 'sp', spend_reserved_micros)
                  FROM delegations
                 WHERE tenant_id = p_tenant AND hash = ANY (p_chain)
                   AND ((max_calls IS NOT NULL AND calls_used >= max_calls)
                     OR (max_spend_micros IS NOT NULL AND spend_reserved_micros + p_estimated > max_spend_micros))
                 ORDER BY depth, hash
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
    UPDATE delegations d
       SET calls_used = d.calls_used + CASE WHEN d.max_calls IS NULL THEN 0 ELSE 1 END,
           spend_reserved_micros = d.spend_reserved_micros + CASE WHEN d.max_spend_micros IS NULL THEN 0 ELSE p_estimated END
     WHERE d.ctid = ANY (metered) AND d.tenant_id = p_tenant;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> cardinality(metered) THEN
      RAISE EXCEPTION 'counted % of the % metered DRs locked for this call', n, cardinality(metered);
    END IF;
  END IF;
  INSERT INTO receipts (tenant_id, kind, subject, jws, kid)
  VALUES (p_tenant, 'invocation.allowed', p_jti, p_receipt_jws, p_receipt_kid)
  RETURNING id INTO receipt_id;
  RETURN jsonb_build_object('o', 'ALLOWED', 'rid', receipt_id, 's', state);
END;
$$;
