/**
 * Metered actuals and the audit reads of invocations.
 *
 * - recordActual: POST /v1/invocations/{jti}/actuals. One actual per
 *   invocation, with provenance; the same normalized body again is
 *   idempotent, a different one 409. The actual, the budget adjustment on
 *   every budgeted DR of the chain and the 'actual.recorded' service receipt are one
 *   transaction.
 * - describeInvocation: GET /v1/invocations/{jti} (allowed, or denied only).
 * - invocationsOfDelegation: GET /v1/delegations/{hash}/invocations, the
 *   DR's whole subtree, newest first, keyset-paged.
 * - listTenantDecisions: GET /v1/invocations, the auditor's list of allowed
 *   invocations and denials, filtered and keyset-paged.
 *
 * A key bound to one tool server without `issue`, `audit` or `approve` (boundToolServerOf)
 * reads only invocations naming its server, and any bound key reports only for
 * those; any other is answered exactly as an unknown jti.
 */
import type { z } from 'zod';
import { decodeBase64url, encodeBase64url } from '../protocol/base64url.js';
import { BatonError } from '../protocol/errors.js';
import { sha256Hex } from '../protocol/hash.js';
import { canonicalJson, utf8Decode, utf8Encode } from '../protocol/jcs.js';
import { MAX_INVOCATION_USD, microsToUsd, usdToMicros, type Micros } from '../protocol/money.js';
import { adjustReservedSpend, findActual, insertActual } from '../store/actuals.js';
import { transactionBehind, type CommitCheck, type Db } from '../store/db.js';
import { findDelegation } from '../store/delegations.js';
import {
  actualsOf,
  denialsOf,
  findInvocation,
  firstServiceReceipts,
  invocationsThrough,
  listDecisions,
  type DecisionFilter,
  type DecisionKey,
  type InvocationKey,
  type ServiceReceiptRef,
} from '../store/invocations.js';
import type { ActualSource } from '../protocol/lists.js';
import { InvocationJti, type ActualRequest as ActualRequestBody } from '../api/invocations.js';
import type { Actual, Denial, Invocation } from '../store/schema/index.js';
import { recordServiceReceipt } from './service-receipts.js';
import type { AuthContext, ServiceDeps } from './types.js';

// ---------------------------------------------------------------- input

export type ActualRequest = z.output<typeof ActualRequestBody>;

// ---------------------------------------------------------------- views

export interface ActualView {
  readonly jti: string;
  readonly cost_usd: number | null;
  readonly tokens_in: number | null;
  readonly tokens_out: number | null;
  readonly source: ActualSource;
  readonly unavailable_reason: string | null;
  readonly declared_usd: number;
  readonly recorded_at: string;
  readonly service_receipt: ServiceReceiptRef | null;
}

function actualView(a: Actual, inv: Invocation, serviceReceipt: ServiceReceiptRef | null): ActualView {
  return {
    jti: a.jti,
    cost_usd: a.costMicros === null ? null : microsToUsd(a.costMicros as Micros),
    tokens_in: a.tokensIn,
    tokens_out: a.tokensOut,
    source: a.source,
    unavailable_reason: a.unavailableReason,
    declared_usd: microsToUsd(inv.estimatedMicros as Micros),
    recorded_at: a.createdAt.toISOString(),
    service_receipt: serviceReceipt,
  };
}

export interface InvocationListItem {
  readonly jti: string;
  readonly decision: 'allowed';
  readonly hash: string;
  readonly dr_chain: readonly string[];
  readonly leaf: string;
  readonly tool: string | null;
  readonly declared_usd: number;
  readonly caller_key_id: string;
  readonly created_at: string;
  readonly service_receipt: ServiceReceiptRef | null;
  readonly actual: Omit<ActualView, 'jti' | 'declared_usd'> | null;
}

function invocationItem(
  inv: Invocation,
  serviceReceipt: ServiceReceiptRef | null,
  actual: Actual | undefined,
  actualServiceReceipt: ServiceReceiptRef | null,
): InvocationListItem {
  let a: InvocationListItem['actual'] = null;
  if (actual) {
    const { jti: _j, declared_usd: _d, ...rest } = actualView(actual, inv, actualServiceReceipt);
    a = rest;
  }
  return {
    jti: inv.jti,
    decision: 'allowed',
    hash: inv.hash,
    dr_chain: inv.drChain,
    leaf: inv.leafHash,
    tool: inv.tool,
    declared_usd: microsToUsd(inv.estimatedMicros as Micros),
    caller_key_id: inv.callerKeyId,
    created_at: inv.createdAt.toISOString(),
    service_receipt: serviceReceipt,
    actual: a,
  };
}

function denialView(d: Denial) {
  return {
    code: d.code,
    block: d.block,
    dr_chain: d.drChain,
    invocation_hash: d.invocationHash,
    caller_key_id: d.callerKeyId,
    created_at: d.createdAt.toISOString(),
    violations: d.violations,
  };
}

// ---------------------------------------------------------------- actuals

function invocationNotFound(jti: string): BatonError {
  return new BatonError('NOT_FOUND', {
    message: `No allowed invocation ${jti} is stored for this tenant.`,
    suggestion: 'Report actuals only for invocations that /v1/verify allowed, with a key of the same tenant.',
  });
}

/** The tool_server an invocation JWS names (its payload was verified when it was stored). */
function toolServerOf(jws: string): string | null {
  try {
    const payload = JSON.parse(utf8Decode(decodeBase64url(jws.split('.')[1] ?? '', 'invocation payload'))) as { tool_server?: unknown };
    return typeof payload.tool_server === 'string' ? payload.tool_server : null;
  } catch {
    return null;
  }
}

export async function recordActual(
  deps: ServiceDeps,
  auth: AuthContext,
  tenantId: string,
  jti: string,
  body: ActualRequest,
  gate: CommitCheck | undefined,
): Promise<{ status: 200 | 201; body: ActualView }> {
  const source = body.source;
  if (source !== 'unavailable' && body.cost_usd! > MAX_INVOCATION_USD) {
    throw new BatonError('NUMBER_OUT_OF_RANGE', {
      message: `cost_usd ${body.cost_usd!} is above the per-invocation maximum of ${MAX_INVOCATION_USD} USD.`,
      suggestion: `Report the cost of this one invocation, at most ${MAX_INVOCATION_USD} USD.`,
      details: { field: 'cost_usd', value: body.cost_usd!, max: MAX_INVOCATION_USD },
    });
  }
  const costMicros = source === 'unavailable' ? null : usdToMicros(body.cost_usd!, 'ceil');
  const normalized = {
    source,
    cost_micros: costMicros,
    tokens_in: body.tokens_in ?? null,
    tokens_out: body.tokens_out ?? null,
    unavailable_reason: source === 'unavailable' ? body.unavailable_reason!.trim() : null,
  };
  const bodyHash = `sha256:${sha256Hex(canonicalJson(normalized))}`;
  const now = deps.now();

  return transactionBehind(deps.store.db, gate, async (tx) => {
    const inv = await findInvocation(tx, tenantId, jti);
    // A key bound to a tool server reports only invocations naming it; another server's call is
    // answered exactly as an unknown jti, so the key learns nothing of which jtis exist.
    if (!inv || (auth.toolServer !== null && toolServerOf(inv.jws) !== auth.toolServer)) throw invocationNotFound(jti);
    const inserted = await insertActual(tx, {
      tenantId,
      jti,
      costMicros,
      tokensIn: normalized.tokens_in,
      tokensOut: normalized.tokens_out,
      source,
      unavailableReason: normalized.unavailable_reason,
      bodyHash,
    });
    if (!inserted) {
      const existing = await findActual(tx, tenantId, jti);
      if (!existing) throw new BatonError('INTERNAL', { message: `The actual of ${jti} conflicted but cannot be read.` });
      const serviceReceipt = (await firstServiceReceipts(tx, tenantId, 'actual.recorded', [jti])).get(jti) ?? null;
      const stored = actualView(existing, inv, serviceReceipt);
      if (existing.bodyHash !== bodyHash) {
        throw new BatonError('CONFLICT', {
          message: `Invocation ${jti} already has a different actual recorded; there is one actual per invocation.`,
          suggestion: 'Resend exactly the original actual to get its stored result; a recorded actual cannot be changed.',
          details: { stored: { ...stored, service_receipt: undefined } },
        });
      }
      return { status: 200 as const, body: stored };
    }
    // A metered cost replaces the estimate held in reserve. 'unavailable'
    // keeps the estimate reserved for good: an unmetered call must never
    // make the budget look unused (the rollup counts it as unmetered).
    const delta = costMicros === null ? 0 : costMicros - inv.estimatedMicros;
    await adjustReservedSpend(tx, tenantId, inv.drChain, delta);
    const serviceReceipt = await recordServiceReceipt(tx, deps.signer, {
      tenantId,
      kind: 'actual.recorded',
      subject: jti,
      now,
      data: {
        jti,
        invocation_hash: inv.hash,
        dr_chain: inv.drChain,
        ...normalized,
        estimated_micros: inv.estimatedMicros,
        body_hash: bodyHash,
        caller_key_id: auth.keyId,
      },
    });
    const row = await findActual(tx, tenantId, jti);
    return { status: 201 as const, body: actualView(row!, inv, serviceReceipt) };
  });
}

// ---------------------------------------------------------------- reads

const MAX_DENIALS_SHOWN = 100;

/**
 * `toolServer`: the server a key confined to one tool server is bound to (boundToolServerOf), or
 * null. Such a key sees an allowed invocation only when it names that server, and only the denials
 * its server's keys recorded or exact replays of that invocation; anything else is answered exactly
 * as an unknown jti.
 */
export async function describeInvocation(deps: ServiceDeps, tenantId: string, jti: string, toolServer: string | null = null) {
  const db = deps.store.db;
  let inv: Invocation | undefined;
  let denied: Denial[];
  if (toolServer === null) {
    [inv, denied] = await Promise.all([findInvocation(db, tenantId, jti), denialsOf(db, tenantId, jti, MAX_DENIALS_SHOWN)]);
  } else {
    const found = await findInvocation(db, tenantId, jti);
    inv = found !== undefined && toolServerOf(found.jws) === toolServer ? found : undefined;
    denied = await denialsOf(db, tenantId, jti, MAX_DENIALS_SHOWN, { toolServer, invocationHash: inv?.hash ?? null });
  }
  if (!inv) {
    if (denied.length === 0) {
      throw new BatonError('NOT_FOUND', { message: `No invocation ${jti} is recorded for this tenant, allowed or denied.` });
    }
    return { jti, decision: 'denied' as const, denials: denied.map(denialView) };
  }
  const [allowed, actualServiceReceipts, actuals] = await Promise.all([
    firstServiceReceipts(db, tenantId, 'invocation.allowed', [jti]),
    firstServiceReceipts(db, tenantId, 'actual.recorded', [jti]),
    actualsOf(db, tenantId, [jti]),
  ]);
  const item = invocationItem(inv, allowed.get(jti) ?? null, actuals.get(jti), actualServiceReceipts.get(jti) ?? null);
  // Later denials of an allowed jti are replay attempts: shown for the audit trail.
  return { ...item, jws: inv.jws, denials: denied.map(denialView) };
}

const CURSOR_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.\d{6}Z$/;
const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] as const;

/**
 * Whether `text` is an instant as encodeCursor writes it: a real calendar
 * date from year 1 and a time of day without 24:00 or leap seconds. The
 * regular expression alone lets through 2026-02-30 or 0000-00-00, which
 * PostgreSQL rejects (or, for 24:00, rolls over) when the cursor reaches it.
 */
function isCursorInstant(text: string): boolean {
  const m = CURSOR_TIME.exec(text);
  if (!m) return false;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  const days = month === 2 && leap ? 29 : DAYS_IN_MONTH[month - 1];
  return year >= 1 && days !== undefined && day >= 1 && day <= days && hour <= 23 && minute <= 59 && second <= 59;
}

export function encodeCursor(key: InvocationKey): string {
  return encodeBase64url(utf8Encode(JSON.stringify([key.createdAt, key.jti])));
}

/** List items of allowed invocations, with their service receipts and actuals read in three queries for the whole page. */
async function allowedItems(db: Db, tenantId: string, rows: readonly Invocation[]): Promise<(inv: Invocation) => InvocationListItem> {
  const jtis = rows.map((i) => i.jti);
  const [allowed, actualServiceReceipts, actuals] = await Promise.all([
    firstServiceReceipts(db, tenantId, 'invocation.allowed', jtis),
    firstServiceReceipts(db, tenantId, 'actual.recorded', jtis),
    actualsOf(db, tenantId, jtis),
  ]);
  return (i) => invocationItem(i, allowed.get(i.jti) ?? null, actuals.get(i.jti), actualServiceReceipts.get(i.jti) ?? null);
}

function badCursor(): BatonError {
  return new BatonError('INVALID_REQUEST', {
    message: 'The cursor is not one this service issued.',
    suggestion: 'Pass next_cursor from the previous page unchanged, or omit cursor for the newest invocations.',
    details: { parameter: 'cursor' },
  });
}

export function decodeCursor(cursor: string): InvocationKey {
  try {
    const value: unknown = JSON.parse(utf8Decode(decodeBase64url(cursor, 'cursor')));
    if (Array.isArray(value) && value.length === 2) {
      const [createdAt, jti] = value as unknown[];
      if (typeof createdAt === 'string' && isCursorInstant(createdAt) && InvocationJti.safeParse(jti).success) {
        return { createdAt, jti: jti as string };
      }
    }
  } catch {
    /* fall through */
  }
  throw badCursor();
}

const DENIAL_ID_TEXT = /^[0-9]{20}$/;

function encodeDecisionCursor(key: DecisionKey): string {
  return encodeBase64url(utf8Encode(JSON.stringify([key.createdAt, key.source, key.id])));
}

function decodeDecisionCursor(cursor: string): DecisionKey {
  try {
    const value: unknown = JSON.parse(utf8Decode(decodeBase64url(cursor, 'cursor')));
    if (Array.isArray(value) && value.length === 3) {
      const [createdAt, source, id] = value as unknown[];
      const idOk =
        (source === 'a' && InvocationJti.safeParse(id).success) || (source === 'd' && typeof id === 'string' && DENIAL_ID_TEXT.test(id));
      if (typeof createdAt === 'string' && isCursorInstant(createdAt) && idOk) {
        return { createdAt, source: source as DecisionKey['source'], id: id as string };
      }
    }
  } catch {
    /* fall through */
  }
  throw badCursor();
}

/**
 * GET /v1/invocations: the tenant's verify decisions, allowed invocations and
 * recorded denials together, newest first, under the filters (combined with
 * AND). The cursor is a position in that order, so a page never skips or
 * repeats a row whatever the filters.
 */
export async function listTenantDecisions(
  deps: ServiceDeps,
  tenantId: string,
  q: DecisionFilter & { cursor?: string | undefined; limit: number },
) {
  const db = deps.store.db;
  const after = q.cursor === undefined ? null : decodeDecisionCursor(q.cursor);
  const found = await listDecisions(db, tenantId, q, after, q.limit);
  const page = found.slice(0, q.limit);
  const itemOf = await allowedItems(
    db,
    tenantId,
    page.flatMap((d) => (d.kind === 'allowed' ? [d.row] : [])),
  );
  return {
    invocations: page.map((d) =>
      d.kind === 'allowed' ? itemOf(d.row) : { decision: 'denied' as const, denial_id: d.row.id, jti: d.row.jti, ...denialView(d.row) },
    ),
    next_cursor: found.length > q.limit ? encodeDecisionCursor(page[page.length - 1]!.key) : null,
  };
}

/**
 * `toolServer`: as for describeInvocation. Such a key lists only the invocations naming its server
 * (filtered in the query, so pages and cursors are exact), and a record none of them passes through
 * is answered exactly as an unknown one: the key learns nothing of the tenant's other delegations.
 */
export async function invocationsOfDelegation(
  deps: ServiceDeps,
  tenantId: string,
  hash: string,
  q: { cursor?: string | undefined; limit: number },
  toolServer: string | null = null,
) {
  const db = deps.store.db;
  const after = q.cursor === undefined ? null : decodeCursor(q.cursor);
  const known =
    toolServer === null
      ? (await findDelegation(db, tenantId, hash)) !== undefined
      : (await invocationsThrough(db, tenantId, hash, null, 0, toolServer)).length > 0;
  if (!known) {
    throw new BatonError('NOT_FOUND', { message: `No delegation record ${hash} is stored for this tenant.` });
  }
  const found = await invocationsThrough(db, tenantId, hash, after, q.limit, toolServer);
  const page = found.slice(0, q.limit);
  const itemOf = await allowedItems(db, tenantId, page);
  return {
    invocations: page.map(itemOf),
    next_cursor: found.length > q.limit ? encodeCursor(page[page.length - 1]!.key) : null,
  };
}
