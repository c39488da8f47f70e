-- API keys gain expiry, a coarse last-used time, and rotation.
--
-- expires_at: after it the key is refused (auth, and inside the verify
-- statements below). Rotation sets the old key's expires_at to the end of
-- its grace period and mints a new key with rotated_from naming the old one,
-- so both work during the window.
-- last_used_at: written at most about once a minute per key and node, off
-- the request's path (see src/service/auth.ts), never per verify.
ALTER TABLE "api_keys" ADD COLUMN "expires_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "last_used_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "rotated_from" text;--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_rotated_from_fk" FOREIGN KEY ("rotated_from") REFERENCES "api_keys"("id");--> statement-breakpoint
-- baton_verify_count and baton_record_denial as in 0003, with one added condition each (marked).
CREATE OR REPLACE FUNCTION "baton_verify_count"(
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

  -- API-key expiry (0008): an expired key is refused like a revoked one, here in the statement, so
  -- every node refuses it the moment it expires whatever its auth cache holds. THIS CONDITION ONLY
  -- differs from 0003.
  IF NOT EXISTS (SELECT 1 FROM api_keys WHERE id = p_key_id AND tenant_id = p_tenant AND revoked_at IS NULL
                   AND (expires_at IS NULL OR expires_at > now())) THEN
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
CREATE OR REPLACE FUNCTION "baton_record_denial"(
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
  -- API-key expiry (0008): an expired key is refused like a revoked one, here in the statement, so
  -- every node refuses it the moment it expires whatever its auth cache holds. THIS CONDITION ONLY
  -- differs from 0003.
  IF NOT EXISTS (SELECT 1 FROM api_keys WHERE id = p_key_id AND tenant_id = p_tenant AND revoked_at IS NULL
                   AND (expires_at IS NULL OR expires_at > now())) THEN
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
