-- Block G of /v1/verify in one statement, so a verify costs one round trip.
--
-- baton_verify_count decides and records one allow: it re-checks every
-- mutable fact the service may have cached (API key active, root trusted, DRs
-- of the chain stored and not revoked), then replay, then the call and
-- budget ceilings under row locks, and only then writes: the invocation, the
-- counters and the allow's receipt. A refusal writes nothing and says why;
-- baton_record_denial then stores the denial with its receipt.
--
-- Deadline: the caller passes the time after which it no longer waits for
-- the answer. A statement that starts after it refuses to run, lock waits end
-- at it (lock_timeout), and a statement still running at it rolls back, so a
-- request whose client has given up is never counted late. Both raise SQLSTATE
-- 57014 (query_canceled), which the service answers as 503.
--
-- Locks, as before: unmetered DRs of the chain FOR SHARE (a revocation waits
-- for us, we wait for one in flight), then metered DRs FOR NO KEY UPDATE, each
-- set root to leaf by depth. Metered-ness is fixed per row and share locks
-- never conflict between verifies, so every verify locks in one global order
-- and verifies cannot deadlock. NO KEY UPDATE, not UPDATE: the invocation
-- insert holds a KEY SHARE lock on the leaf (its foreign key), which FOR
-- UPDATE would wait on.
--
-- Retry: an invocation whose jti is already stored for the tenant is a retry
-- when the same API key sends the same invocation (same hash); the function
-- returns the original allow's receipt and consumes nothing. Anything else is
-- a replay.
CREATE FUNCTION "baton_deadline_check"("p_deadline" timestamptz, "p_where" text) RETURNS interval
LANGUAGE plpgsql AS $$
DECLARE
  left_ interval := p_deadline - clock_timestamp();
BEGIN
  IF left_ <= interval '0' THEN
    RAISE EXCEPTION 'verify deadline passed %', p_where USING ERRCODE = 'query_canceled';
  END IF;
  RETURN left_;
END;
$$;
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
  "p_receipt_kid" text
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
--> statement-breakpoint
-- Counters of the chain as [hash, calls_used, spend_reserved_micros].
CREATE FUNCTION "baton_chain_state"("p_tenant" text, "p_chain" text[]) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT coalesce(jsonb_agg(jsonb_build_array(hash, calls_used, spend_reserved_micros)), '[]'::jsonb)
    FROM delegations WHERE tenant_id = p_tenant AND hash = ANY (p_chain);
$$;
--> statement-breakpoint
-- A jti already stored: the original allow when the same key re-sends the same invocation, else a replay.
CREATE FUNCTION "baton_prior_use"(
  "p_tenant" text, "p_key_id" text, "p_chain" text[], "p_jti" text, "p_hash" text, "p_prior_hash" text, "p_prior_key" text
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  original record;
BEGIN
  IF p_prior_hash IS DISTINCT FROM p_hash OR p_prior_key IS DISTINCT FROM p_key_id THEN
    RETURN jsonb_build_object('o', 'REPLAY_DETECTED');
  END IF;
  SELECT id, kid, jws INTO original FROM receipts
   WHERE tenant_id = p_tenant AND subject = p_jti AND kind = 'invocation.allowed'
   ORDER BY id LIMIT 1;
  IF NOT FOUND THEN
    RETURN jsonb_build_object('o', 'REPLAY_DETECTED');
  END IF;
  RETURN jsonb_build_object('o', 'RETRY', 'rid', original.id, 'kid', original.kid, 'jws', original.jws,
                            's', baton_chain_state(p_tenant, p_chain));
END;
$$;
--> statement-breakpoint
-- A refusal and its receipt, in one statement; nothing when the API key was
-- revoked meanwhile (the caller answers 401) or the deadline passed.
CREATE FUNCTION "baton_record_denial"(
  "p_deadline" timestamptz,
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
  PERFORM baton_deadline_check(p_deadline, 'before the statement ran');
  IF NOT EXISTS (SELECT 1 FROM api_keys WHERE id = p_key_id AND tenant_id = p_tenant AND revoked_at IS NULL) THEN
    RETURN jsonb_build_object('o', 'KEY_REVOKED');
  END IF;
  INSERT INTO denials (tenant_id, jti, invocation_hash, code, block, dr_chain, caller_key_id, violations)
  VALUES (p_tenant, p_jti, p_invocation_hash, p_code, p_block, p_chain, p_key_id, p_violations);
  INSERT INTO receipts (tenant_id, kind, subject, jws, kid)
  VALUES (p_tenant, 'invocation.denied', p_subject, p_receipt_jws, p_receipt_kid)
  RETURNING id INTO receipt_id;
  PERFORM baton_deadline_check(p_deadline, 'before commit');
  RETURN jsonb_build_object('o', 'DENIED', 'rid', receipt_id);
END;
$$;
