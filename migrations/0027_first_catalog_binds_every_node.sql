-- A tenant's first tool catalog binds every node at once.
--
-- A node that cached "this tenant has no catalog" sent no gate (NULL), and the
-- gate then checked nothing, so for up to the cache's 2 s another node went on
-- allowing calls a catalog just published on one node denied (its rules,
-- approvals, near-limit and requirements). Caches may save work, never decide:
-- a NULL gate now means "decided with no catalog", and when the tenant has one
-- the item refuses CATALOG_CHANGED (undoing its invocation insert, as every
-- gate refusal does), after which the node decides again on the catalog, as it
-- does for a newer version (0005).
--
-- 0020's function keeps its checks under a new name; baton_tool_gate, which
-- baton_verify_item calls, decides the NULL case and hands any other gate to it.
ALTER FUNCTION "baton_tool_gate"(text, text[], text, jsonb) RENAME TO "baton_tool_gate_checks";
--> statement-breakpoint
CREATE FUNCTION "baton_tool_gate"("p_tenant" text, "p_chain" text[], "p_jti" text, "p_gate" jsonb) RETURNS jsonb
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
