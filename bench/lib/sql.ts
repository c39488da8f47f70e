/** The database side of the bench: bulk DR rows made in SQL, and how many are stored. */
import type postgres from 'postgres';

type Sql = postgres.Sql;

/**
 * Adds `count` DR rows to a tenant in SQL (3-level trees: root, child,
 * grandchild, with real-looking hashes, ancestors arrays and a 700-byte
 * JWS), split over `parallel` connections. FK triggers are skipped
 * (session_replication_role = replica, superuser only): the rows are
 * consistent by construction and checking 10^6 parent keys one by one
 * would only slow the load. Every index is maintained as usual. The time
 * includes VACUUM (ANALYZE), so autovacuum stays out of the measurement.
 */
export async function bulkLoadDelegations(sql: Sql, tenantId: string, from: number, count: number, parallel: number): Promise<number> {
  const t0 = performance.now();
  const h = (expr: string) => `'sha256:' || encode(sha256(('bulk:' || ${expr})::bytea), 'hex')`;
  await Promise.all(
    Array.from({ length: parallel }, (_, k) =>
      sql.begin(async (tx) => {
        await tx`set local session_replication_role = replica`;
        await tx.unsafe(
          `insert into delegations (tenant_id, hash, jws, jti, iss, sub, aud, cmd, policy, nbf, exp, iat,
                                    parent_hash, root_hash, depth, ancestors, max_calls)
           select $1, ${h('g')}, repeat('x', 700), 'dr:bulk-' || g,
                  'did:key:zBulkIssuer', 'did:key:zBulkIssuer', 'did:key:zBulkAudience', '/mcp/tools/call',
                  '{"max_calls":1000}'::jsonb, 0, null, 0,
                  case when g % 3 = 0 then null else ${h('(g - 1)')} end,
                  ${h('(g - g % 3)')},
                  g % 3,
                  case g % 3 when 0 then '{}'::text[]
                             when 1 then array[${h('(g - 1)')}]
                             else array[${h('(g - 2)')}, ${h('(g - 1)')}] end,
                  1000
             from generate_series($2::bigint + $3::bigint, $2::bigint + $4::bigint - 1, $5::bigint) g`,
          [tenantId, from, k, count, parallel],
        );
      }),
    ),
  );
  // Vacuum now, so that autovacuum of the new rows does not run during the measurement.
  await sql`vacuum (analyze) delegations`;
  return (performance.now() - t0) / 1000;
}

/**
 * Puts the database in the state the bulk load leaves the DR table in:
 * every table vacuumed (the dead versions every counted verify leaves behind
 * pruned, the visibility maps of the invocations and receipts every phase
 * appended set, statistics fresh) and checkpointed (no checkpoint from
 * earlier phases' writes still running). The two stored-DR phases both start
 * from it, so their ratio compares store sizes, not a settled database
 * against one whose autovacuum still owed pgbench's rows (the 10^3 phase,
 * which came right after pgbench, ran 15% slower than the 10^6 one).
 */
export async function settleDatabase(sql: Sql): Promise<void> {
  await sql`vacuum (analyze)`;
  await sql`checkpoint`;
}

export async function delegationCount(sql: Sql, tenantId: string): Promise<number> {
  const [r] = await sql<{ n: number }[]>`select count(*)::int as n from delegations where tenant_id = ${tenantId}`;
  return r!.n;
}

/**
 * Waits until the service's log integrator has emptied the queue of service
 * receipts (every phase's leaves, and pgbench's: they join the log through the
 * same trigger). `onWait` hears the queue's length about every 5 s. Returns
 * how many were pending when it started.
 */
export async function waitForLogDrained(sql: Sql, withinMs: number, onWait: (pending: number) => void = () => {}): Promise<number> {
  const deadline = Date.now() + withinMs;
  let first = 0;
  for (let polls = 0; ; polls++) {
    const [row] = await sql<{ n: number }[]>`select count(*)::int as n from log_pending`;
    const pending = Number(row?.n ?? 0);
    if (polls === 0) first = pending;
    if (pending === 0) return first;
    if (Date.now() > deadline)
      throw new Error(`the log integrator did not drain the queue within ${withinMs / 1000} s (${pending} pending)`);
    if (polls % 50 === 49) onWait(pending);
    await new Promise((r) => setTimeout(r, 100));
  }
}
