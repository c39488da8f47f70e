-- A stored denial is never decided by a node's stale cache.
--
-- A node's hot-path cache holds a chain's records as live and the tenant's roots
-- as trusted: facts the allow statement (baton_verify_item) re-checks, but a
-- denial the service decided (the tool gate, a policy, binding, time, the
-- tool server) was stored by baton_denial_item, which re-checked only the API
-- key. So a chain revoked, or its root DID removed, since a node cached it was
-- refused, and stored, for another reason (TOOL_UNDECLARED, say) while a dry
-- run, which reads fresh, said RECEIPT_REVOKED or UNTRUSTED_ROOT.
--
-- baton_denial_item now re-checks, for a denial whose chain verified, the facts
-- it was decided on: every record of p_chain not revoked, unless a violation
-- names it RECEIPT_REVOKED already, and the root record's issuer still trusted
-- by the tenant, unless a violation says UNTRUSTED_ROOT already. When one no
-- longer holds it stores nothing and answers {o: 'STALE', revoked: [hashes],
-- untrusted: bool}; the node forgets those facts and decides the verify again
-- on fresh reads. One probe by primary key per record and one for the root's
-- trust (a chain is at most 16 deep: 17, as the allow statement makes), in the
-- same statement. A denial of blocks A-C made by verifyChain is stored with no
-- chain (its claims are unverified): nothing is probed, as before. So is one
-- whose chain's root record is not stored (the node read the roots fresh).
-- baton_verify_batch (0038) returns the item's answer unchanged. Otherwise the
-- function is 0040's (0004's).
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
  revoked_ text[];
  root_iss text;
  untrusted_ boolean := false;
  named jsonb;
BEGIN
  -- Revoked or expired (expires_at: 0008): refused here, whatever a node's auth cache holds.
  IF NOT EXISTS (SELECT 1 FROM api_keys WHERE id = p_key_id AND tenant_id = p_tenant AND revoked_at IS NULL
                   AND (expires_at IS NULL OR expires_at > now())) THEN
    RETURN jsonb_build_object('o', 'KEY_REVOKED');
  END IF;
  IF cardinality(p_chain) > 0 THEN
    -- Each record found by its key, root first (p_chain[1] is the root record).
    SELECT coalesce(array_agg(d.hash ORDER BY c.pos) FILTER (WHERE d.revoked_at IS NOT NULL), '{}'),
           (array_agg(d.iss) FILTER (WHERE c.pos = 1))[1]
      INTO revoked_, root_iss
      FROM unnest(p_chain) WITH ORDINALITY AS c(hash, pos)
     CROSS JOIN LATERAL (SELECT hash, iss, revoked_at FROM delegations
                          WHERE tenant_id = p_tenant AND hash = c.hash OFFSET 0) d;
    named := CASE jsonb_typeof(p_violations) WHEN 'array' THEN p_violations ELSE '[]' END;
    IF cardinality(revoked_) > 0 THEN
      revoked_ := ARRAY(SELECT r.h FROM unnest(revoked_) WITH ORDINALITY AS r(h, n)
                         WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(named) v
                                            WHERE v->>'code' = 'RECEIPT_REVOKED' AND v->>'dr_hash' = r.h)
                         ORDER BY r.n);
    END IF;
    IF root_iss IS NOT NULL AND NOT EXISTS (SELECT 1 FROM trusted_roots WHERE tenant_id = p_tenant AND did = root_iss) THEN
      untrusted_ := NOT EXISTS (SELECT 1 FROM jsonb_array_elements(named) v WHERE v->>'code' = 'UNTRUSTED_ROOT');
    END IF;
    IF cardinality(revoked_) > 0 OR untrusted_ THEN
      RETURN jsonb_build_object('o', 'STALE', 'revoked', to_jsonb(revoked_), 'untrusted', untrusted_);
    END IF;
  END IF;
  INSERT INTO denials (tenant_id, jti, invocation_hash, code, block, dr_chain, caller_key_id, violations)
  VALUES (p_tenant, p_jti, p_invocation_hash, p_code, p_block, p_chain, p_key_id, p_violations);
  INSERT INTO receipts (tenant_id, kind, subject, jws, kid)
  VALUES (p_tenant, 'invocation.denied', p_subject, p_receipt_jws, p_receipt_kid)
  RETURNING id INTO receipt_id;
  RETURN jsonb_build_object('o', 'DENIED', 'rid', receipt_id);
END;
$$;
