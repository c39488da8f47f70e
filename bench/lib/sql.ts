/**
 * The database side of the bench: bulk DR rows made in SQL, the SQL
 * ceiling (the verify statement, countCallsAtomically, driven directly: no
 * HTTP, no crypto), the
 * lock-wait sampler, and the bench-only "counter slices" experiment for
 * a shared root counter.
 */
import { randomUUID } from 'node:crypto';
import { sql as dsql } from 'drizzle-orm';
import type postgres from 'postgres';
import type { Db, Store } from '../../src/store/db.js';
import { insertReceipt } from '../../src/store/receipts.js';
import { rows } from '../../src/store/rows.js';
import { countCallsAtomically, isMetered, readChainState, type InvocationToCount } from '../../src/store/runtime.js';
import { invocations } from '../../src/store/schema/index.js';

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

export async function delegationCount(sql: Sql, tenantId: string): Promise<number> {
  const [r] = await sql<{ n: number }[]>`select count(*)::int as n from delegations where tenant_id = ${tenantId}`;
  return r!.n;
}

/** What an allowed verify stores besides the counters: shapes copied from a real one. */
export interface CountTemplate {
  readonly tenantId: string;
  /** An active verify key of the tenant and its trusted root: the statement re-checks both. */
  readonly keyId: string;
  readonly rootDid: string;
  readonly kid: string;
  readonly invocationJws: string;
  readonly invocationHash: string;
  readonly receiptJws: string;
}

export function invocationFor(t: CountTemplate, drChain: readonly string[]): InvocationToCount {
  return {
    tenantId: t.tenantId,
    jti: `inv:${randomUUID()}`,
    hash: t.invocationHash,
    jws: t.invocationJws,
    drChain: drChain as InvocationToCount['drChain'],
    tool: 'web_search',
    estimatedMicros: 0,
    callerKeyId: t.keyId,
  };
}

function receiptFor(t: CountTemplate, jti: string) {
  return { tenantId: t.tenantId, kind: 'invocation.allowed' as const, subject: jti, jws: t.receiptJws, kid: t.kid };
}

/** One allowed count exactly as the service does it: the same statement, the same rows. */
export async function countOnce(store: Store, t: CountTemplate, drChain: readonly string[]): Promise<boolean> {
  const inv = invocationFor(t, drChain);
  const limits = drChain.map((hash, depth) => ({ hash, depth, maxCalls: null, maxSpendMicros: null }));
  const out = await countCallsAtomically(store.query, inv, receiptFor(t, inv.jti), limits, t.rootDid, new Date(Date.now() + 5_000));
  return out.ok;
}

/**
 * The most one counted row can take: BEGIN, the same conditional increment,
 * COMMIT, nothing else. The row lock is held from the UPDATE through the
 * COMMIT round trip, as in the real transaction.
 */
export async function bumpRowOnly(db: Db, tenantId: string, hash: string): Promise<boolean> {
  return db.transaction(async (tx) => {
    const r = await rows<{ hash: string }>(
      tx,
      dsql`update delegations set calls_used = calls_used + 1
            where tenant_id = ${tenantId} and hash = ${hash} and (max_calls is null or calls_used < max_calls)
        returning hash`,
    );
    return r.length === 1;
  });
}

// ---------------------------------------------------------------------------
// Lock waits: how many backends wait on a heavyweight lock, sampled.

export function startLockSampler(sql: Sql, everyMs = 100): () => Promise<{ avgWaiting: number; avgActive: number; samples: number }> {
  let stop = false;
  let samples = 0;
  let waiting = 0;
  let active = 0;
  const loop = (async () => {
    while (!stop) {
      const [r] = await sql<{ w: number; a: number }[]>`
        select count(*) filter (where wait_event_type = 'Lock')::int as w,
               count(*) filter (where state = 'active')::int as a
          from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()`;
      samples++;
      waiting += r!.w;
      active += r!.a;
      await new Promise((res) => setTimeout(res, everyMs));
    }
  })().catch(() => {
    stop = true; // the database went away (teardown): the sample just ends
  });
  return async () => {
    stop = true;
    await loop;
    return { avgWaiting: samples ? waiting / samples : 0, avgActive: samples ? active / samples : 0, samples };
  };
}

// ---------------------------------------------------------------------------
// Counter slices (bench-only): a hot DR's max_calls split into S rows whose
// caps sum to max_calls. A call claims one unit from any slice with room,
// preferring "its" slice and skipping slices other transactions hold; only
// when no unheld slice has room does it wait, for one slice at a time, and
// it denies only when every slice is full. With at least as many slices as
// concurrent writers (one per pool connection), that slow path runs only
// near exhaustion. (Locking all slices in order there is NOT safe: FOR
// UPDATE SKIP LOCKED keeps the lock on a row whose recheck failed, i.e. a
// slice that just filled, so a transaction can hold a slice out of order.)
// Every slice row checks used <= cap, and the caps never change here (a rebalancer would move cap between slices inside one
// transaction), so the slices together can never pass max_calls.

export async function createSliceTable(sql: Sql): Promise<void> {
  await sql`create table if not exists bench_counter_slices (
    tenant_id text not null,
    hash text not null,
    slice int not null,
    cap bigint not null,
    used bigint not null default 0,
    primary key (tenant_id, hash, slice),
    constraint bench_slices_within_cap check (used >= 0 and used <= cap)
  )`;
}

/** Splits `maxCalls` of `hash` over `slices` rows (caps differ by at most 1, sum = maxCalls). */
export async function sliceCounter(sql: Sql, tenantId: string, hash: string, maxCalls: number, slices: number): Promise<void> {
  await sql`delete from bench_counter_slices where tenant_id = ${tenantId} and hash = ${hash}`;
  const caps = Array.from({ length: slices }, (_, i) => Math.floor(maxCalls / slices) + (i < maxCalls % slices ? 1 : 0));
  for (const [i, cap] of caps.entries()) {
    await sql`insert into bench_counter_slices (tenant_id, hash, slice, cap) values (${tenantId}, ${hash}, ${i}, ${cap})`;
  }
}

class SliceDeny extends Error {}

/**
 * countCallsAtomically with the root's counter moved to slices: same reads,
 * same invocation and receipt inserts, same conditional root-to-leaf update
 * for the other counted DRs. Lock order stays global (the root's slices,
 * then delegations rows by depth), so there are no deadlocks.
 */
export const sliceStats = { deadlockRetries: 0 };

export async function countWithSlices(
  db: Db,
  t: CountTemplate,
  drChain: readonly string[],
  slices: number,
  preferred: number,
): Promise<boolean> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await countWithSlicesOnce(db, t, drChain, slices, preferred);
    } catch (e) {
      // A deadlock aborts the whole transaction (nothing was counted): retrying is safe.
      const code = (e as { cause?: { code?: string } }).cause?.code ?? (e as { code?: string }).code;
      if (code !== '40P01' || attempt >= 3) throw e;
      sliceStats.deadlockRetries++;
    }
  }
}

async function countWithSlicesOnce(
  db: Db,
  t: CountTemplate,
  drChain: readonly string[],
  slices: number,
  preferred: number,
): Promise<boolean> {
  const inv = invocationFor(t, drChain);
  const rootHash = drChain[0]!;
  try {
    return await db.transaction(async (tx) => {
      const before = await readChainState(tx, inv.tenantId, inv.drChain);
      if (before.length !== drChain.length || before.some((s) => s.revoked)) throw new SliceDeny('missing or revoked');
      const inserted = await tx
        .insert(invocations)
        .values({
          tenantId: inv.tenantId,
          jti: inv.jti,
          hash: inv.hash,
          jws: inv.jws,
          leafHash: drChain[drChain.length - 1]!,
          drChain: [...drChain],
          tool: inv.tool,
          estimatedMicros: 0,
          callerKeyId: inv.callerKeyId,
        })
        .onConflictDoNothing()
        .returning({ jti: invocations.jti });
      if (inserted.length === 0) throw new SliceDeny('replay');
      await insertReceipt(tx, receiptFor(t, inv.jti));

      // 1. The root: one unit from a slice nobody else holds, else the exact slow path.
      const fast = await rows<{ slice: number }>(
        tx,
        dsql`update bench_counter_slices s set used = s.used + 1
              where (s.tenant_id, s.hash, s.slice) = (
                      select tenant_id, hash, slice from bench_counter_slices
                       where tenant_id = ${inv.tenantId} and hash = ${rootHash} and used < cap
                       order by (slice - ${preferred} + ${slices}) % ${slices}
                       limit 1
                       for no key update skip locked)
                and s.used < s.cap
            returning s.slice`,
      );
      if (fast.length === 0) {
        // No slice nobody holds has room. Deny only when every slice is full: a full slice
        // never has room again (caps are fixed and committed `used` only grows), so a plain
        // read that sees all full is exact. Otherwise wait for one slice with room, and
        // look again if it filled meanwhile (at most once per slice).
        let claimed = false;
        for (let round = 0; round <= slices && !claimed; round++) {
          const state = await rows<{ slice: number; used: string; cap: string }>(
            tx,
            dsql`select slice, used::text, cap::text from bench_counter_slices
                  where tenant_id = ${inv.tenantId} and hash = ${rootHash} order by slice`,
          );
          const open = state.filter((x) => BigInt(x.used) < BigInt(x.cap)).map((x) => x.slice);
          if (open.length === 0) throw new SliceDeny('CALLS_EXHAUSTED at the root');
          const k = open.find((x) => x >= preferred) ?? open[0]!;
          const got = await rows<{ slice: number }>(
            tx,
            dsql`update bench_counter_slices set used = used + 1
                  where tenant_id = ${inv.tenantId} and hash = ${rootHash} and slice = ${k} and used < cap
              returning slice`,
          );
          claimed = got.length === 1;
        }
        if (!claimed) throw new SliceDeny('CALLS_EXHAUSTED at the root');
      }

      // 2. The other counted DRs, exactly as countCallsAtomically does.
      const rest = before.filter((s) => s.hash !== rootHash && isMetered(s)).map((s) => s.hash);
      if (rest.length > 0) {
        const list = dsql.join(
          rest.map((h) => dsql`${h}`),
          dsql`, `,
        );
        const updated = await rows<{ hash: string }>(
          tx,
          dsql`with locked as (
                 select hash from delegations
                  where tenant_id = ${inv.tenantId} and hash = any(array[${list}]::text[])
                  order by depth for no key update)
               update delegations d set calls_used = d.calls_used + case when d.max_calls is null then 0 else 1 end
                 from locked
                where d.tenant_id = ${inv.tenantId} and d.hash = locked.hash
                  and (d.max_calls is null or d.calls_used < d.max_calls)
               returning d.hash`,
        );
        if (updated.length !== rest.length) throw new SliceDeny('CALLS_EXHAUSTED below the root');
      }
      return true;
    });
  } catch (e) {
    if (e instanceof SliceDeny) return false;
    throw e;
  }
}

/** Invocations stored through a DR (the audit side of "nothing phantom"). */
export async function invocationsThrough(db: Db, tenantId: string, hash: string): Promise<number> {
  const [r] = await rows<{ n: number }>(
    db,
    dsql`select count(*)::int as n from invocations where tenant_id = ${tenantId} and dr_chain @> array[${hash}]::text[]`,
  );
  return r!.n;
}

export async function sliceTotals(sql: Sql, tenantId: string, hash: string): Promise<{ used: number; cap: number }> {
  const [r] = await sql<{ used: number; cap: number }[]>`
    select coalesce(sum(used), 0)::int as used, coalesce(sum(cap), 0)::int as cap
      from bench_counter_slices where tenant_id = ${tenantId} and hash = ${hash}`;
  return r!;
}
