-- A key's rotation lineage is its whole rotation family.
--
-- 0033's baton_key_lineage walked a key's straight ancestors and straight
-- descendants. A key rotated twice had two successors (rotation refused a second
-- one only while the direct successor was live: K1 -> K2 -> K3 with K2 retired at
-- once left K1 in its grace, and rotating K1 again minted K4 beside K3). K3 and K4
-- are one holder's, yet neither was in the other's lineage, so one asked for an
-- approval and the other decided it (found by an outside probe). Rotation now
-- refuses while any descendant is live (store/api-keys.ts), and the lineage is the
-- family: every key descended from any of its ancestors (so from its oldest), which covers the
-- siblings a documented recovery leaves (revoke the successor, rotate again).
CREATE OR REPLACE FUNCTION "baton_key_lineage"("p_key" text) RETURNS text[]
LANGUAGE sql STABLE AS $$
  WITH RECURSIVE older(id, rotated_from) AS (
    SELECT id, rotated_from FROM api_keys WHERE id = p_key
    UNION SELECT k.id, k.rotated_from FROM api_keys k JOIN older ON k.id = older.rotated_from
  ), family(id) AS (
    SELECT id FROM older
    UNION SELECT k.id FROM api_keys k JOIN family ON k.rotated_from = family.id
  )
  SELECT array_agg(id) FROM (SELECT p_key UNION SELECT id FROM older UNION SELECT id FROM family) AS lineage(id)
$$;
