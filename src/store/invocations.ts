/**
 * Reads over allowed invocations, recorded denials and the service receipts and
 * actuals attached to them. Every query is scoped by tenant.
 */
import { and, asc, desc, eq, inArray, isNotNull, or, sql } from 'drizzle-orm';
import type { Db } from './db.js';
import { actuals, apiKeys, denials, invocations, type Actual, type Denial, type Invocation } from './schema/index.js';

export async function findInvocation(db: Db, tenantId: string, jti: string): Promise<Invocation | undefined> {
  const [row] = await db
    .select()
    .from(invocations)
    .where(and(eq(invocations.tenantId, tenantId), eq(invocations.jti, jti)))
    .limit(1);
  return row;
}

/**
 * Which denials a key confined to one tool server may see: those recorded by a key bound to that
 * same server (its own verify traffic), and exact replays of `invocationHash` (an invocation it may
 * read). A denial stores no tool_server of its own, so nothing else can be shown to be its server's.
 */
export interface DenialScope {
  readonly toolServer: string;
  readonly invocationHash: string | null;
}

/** Recorded denials of a jti, oldest first (bounded); only those `scope` allows when given. */
export async function denialsOf(db: Db, tenantId: string, jti: string, limit: number, scope?: DenialScope): Promise<Denial[]> {
  const where = [eq(denials.tenantId, tenantId), eq(denials.jti, jti)];
  if (scope) {
    const boundKeys = db
      .select({ id: apiKeys.id })
      .from(apiKeys)
      .where(and(eq(apiKeys.tenantId, tenantId), eq(apiKeys.toolServer, scope.toolServer)));
    where.push(
      scope.invocationHash === null
        ? inArray(denials.callerKeyId, boundKeys)
        : or(inArray(denials.callerKeyId, boundKeys), eq(denials.invocationHash, scope.invocationHash))!,
    );
  }
  return db
    .select()
    .from(denials)
    .where(and(...where))
    .orderBy(asc(denials.id))
    .limit(limit);
}

/**
 * The tool_server an allowed invocation names, read from its stored JWS in SQL (the payload is
 * base64url JCS, verified when it was stored; PostgreSQL's decoder wants standard base64 with
 * padding). Lets a list confined to one tool server filter in the query, so pages stay exact.
 */
const invocationPayload = sql`split_part(${invocations.jws}, '.', 2)`;
export const invocationToolServer = sql<
  string | null
>`(convert_from(decode(rpad(translate(${invocationPayload}, '-_', '+/'), ((length(${invocationPayload}) + 3) / 4) * 4, '='), 'base64'), 'UTF8')::jsonb ->> 'tool_server')`;

export async function actualsOf(db: Db, tenantId: string, jtis: readonly string[]): Promise<Map<string, Actual>> {
  if (jtis.length === 0) return new Map();
  const found = await db
    .select()
    .from(actuals)
    .where(and(eq(actuals.tenantId, tenantId), inArray(actuals.jti, [...jtis])));
  return new Map(found.map((a) => [a.jti, a]));
}

export { firstServiceReceipts, type ServiceReceiptRef } from './service-receipts.js';

/**
 * Keyset position: created_at with its full microsecond precision (as UTC
 * text, since a JS Date keeps only milliseconds) and the jti breaking ties.
 */
export interface InvocationKey {
  readonly createdAt: string;
  readonly jti: string;
}

/** created_at as 'YYYY-MM-DDTHH:MM:SS.ffffffZ', exact to the microsecond. */
const createdAtText = sql<string>`to_char(${invocations.createdAt} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

export type InvocationWithKey = Invocation & { readonly key: InvocationKey };

/**
 * One page of the invocations made through `hash` (any DR of its subtree:
 * dr_chain contains it), newest first, strictly after `after` in that order;
 * with `toolServer`, only those naming that tool server (filtered here, so
 * pages and cursors stay exact). Returns limit + 1 rows at most so the caller
 * can tell whether more follow.
 */
export async function invocationsThrough(
  db: Db,
  tenantId: string,
  hash: string,
  after: InvocationKey | null,
  limit: number,
  toolServer: string | null = null,
): Promise<InvocationWithKey[]> {
  const conditions = [eq(invocations.tenantId, tenantId), sql`${invocations.drChain} @> array[${hash}]::text[]`];
  if (toolServer !== null) conditions.push(sql`${invocationToolServer} = ${toolServer}`);
  if (after) conditions.push(sql`(${invocations.createdAt}, ${invocations.jti}) < (${after.createdAt}::timestamptz, ${after.jti})`);
  const found = await db
    .select({ row: invocations, createdAtText })
    .from(invocations)
    .where(and(...conditions))
    .orderBy(desc(invocations.createdAt), desc(invocations.jti))
    .limit(limit + 1);
  return found.map((f) => ({ ...f.row, key: { createdAt: f.createdAtText, jti: f.row.jti } }));
}

/** Filters of the decision list (GET /v1/invocations); every one optional, all combined with AND. */
export interface DecisionFilter {
  /** Only decisions whose chain passes through this DR (its whole subtree). */
  readonly dr?: string | undefined;
  /** Only allowed invocations of this tool (a denial stores no tool). */
  readonly tool?: string | undefined;
  readonly outcome?: 'allowed' | 'denied' | undefined;
  /** Only denials with this code, as their code or the code of one of their violations. */
  readonly code?: string | undefined;
  /** created_at >= since. */
  readonly since?: Date | undefined;
  /** created_at < until. */
  readonly until?: Date | undefined;
}

/**
 * Keyset position in the decision list, newest first: created_at (exact to
 * the microsecond, as text), then 'a' (allowed invocation) or 'd' (denial),
 * then the jti or the denial id as 20 zero-padded digits. Every part is
 * fixed-format text, so the order is the plain comparison of the triple.
 */
export interface DecisionKey {
  readonly createdAt: string;
  readonly source: 'a' | 'd';
  readonly id: string;
}

export type DecisionRow =
  | { readonly kind: 'allowed'; readonly row: Invocation; readonly key: DecisionKey }
  | { readonly kind: 'denied'; readonly row: Denial; readonly key: DecisionKey };

const denialCreatedAtText = sql<string>`to_char(${denials.createdAt} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
const denialIdText = sql<string>`lpad(${denials.id}::text, 20, '0')`;
/** jtis compared byte by byte (collation "C"), the order the merge in JS uses; a locale collation would differ. */
const jtiBytes = sql`${invocations.jti} collate "C"`;

export function compareDecisionKeys(a: DecisionKey, b: DecisionKey): number {
  for (const part of ['createdAt', 'source', 'id'] as const) {
    if (a[part] !== b[part]) return a[part] < b[part] ? -1 : 1;
  }
  return 0;
}

/**
 * One page of the tenant's verify decisions (allowed invocations and
 * recorded denials) matching `filter`, newest first, strictly after `after`.
 * Each table is read up to limit + 1 rows past the cursor under the same
 * filters and the two are merged, so the page is exactly the first limit + 1
 * of the filtered union: no row is skipped or repeated across pages.
 */
export async function listDecisions(
  db: Db,
  tenantId: string,
  filter: DecisionFilter,
  after: DecisionKey | null,
  limit: number,
): Promise<DecisionRow[]> {
  const wantAllowed = filter.outcome !== 'denied' && filter.code === undefined;
  const wantDenied = filter.outcome !== 'allowed' && filter.tool === undefined;

  const allowed = async (): Promise<DecisionRow[]> => {
    if (!wantAllowed) return [];
    // created_at is never null: stating it lets the planner use the partial
    // invocations_tenant_recent_idx (migration 0014).
    const where = [eq(invocations.tenantId, tenantId), isNotNull(invocations.createdAt)];
    if (filter.dr !== undefined) where.push(sql`${invocations.drChain} @> array[${filter.dr}]::text[]`);
    if (filter.tool !== undefined) where.push(eq(invocations.tool, filter.tool));
    if (filter.since !== undefined) where.push(sql`${invocations.createdAt} >= ${filter.since.toISOString()}::timestamptz`);
    if (filter.until !== undefined) where.push(sql`${invocations.createdAt} < ${filter.until.toISOString()}::timestamptz`);
    if (after) {
      where.push(
        sql`(${invocations.createdAt}, 'a'::text, ${jtiBytes}) < (${after.createdAt}::timestamptz, ${after.source}::text, ${after.id}::text collate "C")`,
      );
    }
    const found = await db
      .select({ row: invocations, createdAtText })
      .from(invocations)
      .where(and(...where))
      .orderBy(desc(invocations.createdAt), sql`${jtiBytes} desc`)
      .limit(limit + 1);
    return found.map((f) => ({ kind: 'allowed', row: f.row, key: { createdAt: f.createdAtText, source: 'a', id: f.row.jti } }));
  };

  const denied = async (): Promise<DecisionRow[]> => {
    if (!wantDenied) return [];
    const where = [eq(denials.tenantId, tenantId)];
    if (filter.dr !== undefined) where.push(sql`${denials.drChain} @> array[${filter.dr}]::text[]`);
    // The denial's code, or the code of one of its violations (POLICY_VIOLATION lists TOOL_NOT_ALLOWED, ...).
    if (filter.code !== undefined) {
      where.push(sql`(${denials.code} = ${filter.code} or ${denials.violations} @> ${JSON.stringify([{ code: filter.code }])}::jsonb)`);
    }
    if (filter.since !== undefined) where.push(sql`${denials.createdAt} >= ${filter.since.toISOString()}::timestamptz`);
    if (filter.until !== undefined) where.push(sql`${denials.createdAt} < ${filter.until.toISOString()}::timestamptz`);
    if (after) {
      where.push(
        sql`(${denials.createdAt}, 'd'::text, ${denialIdText} collate "C") < (${after.createdAt}::timestamptz, ${after.source}::text, ${after.id}::text collate "C")`,
      );
    }
    const found = await db
      .select({ row: denials, createdAtText: denialCreatedAtText, idText: denialIdText })
      .from(denials)
      .where(and(...where))
      .orderBy(desc(denials.createdAt), desc(denials.id))
      .limit(limit + 1);
    return found.map((f) => ({ kind: 'denied', row: f.row, key: { createdAt: f.createdAtText, source: 'd', id: f.idText } }));
  };

  const [a, d] = await Promise.all([allowed(), denied()]);
  return [...a, ...d].sort((x, y) => compareDecisionKeys(y.key, x.key)).slice(0, limit + 1);
}
