/**
 * Signed service receipts of what the service did (docs/design.md, runtime state). A service receipt is
 * written in the caller's transaction, so an action that rolls back leaves
 * no service receipt, and a committed action always has one.
 */
import { randomFillSync } from 'node:crypto';
import { BatonError, isBatonError } from '../protocol/errors.js';
import type { Db } from '../store/db.js';
import { insertServiceReceipt } from '../store/service-receipts.js';
import type { ServiceReceiptKind } from '../protocol/lists.js';
import type { ServiceSigner } from './signer.js';

/** The signed claims of a service receipt (the JWS payload). */
export interface ServiceReceiptPayload {
  /** did:key of the service key that signed it. */
  readonly iss: string;
  readonly kid: string;
  readonly baton_receipt: ServiceReceiptKind;
  readonly tenant: string;
  /** What it is about: a DR hash, an invocation jti, … */
  readonly subject: string;
  /** Unix seconds, from the service clock. */
  readonly iat: number;
  /** 'rcpt:' + 128 random bits, hex. */
  readonly jti: string;
  readonly data: Record<string, unknown>;
}

export interface ServiceReceiptInput {
  readonly tenantId: string;
  readonly kind: ServiceReceiptKind;
  readonly subject: string;
  /**
   * JSON values only. Object properties whose value is undefined are dropped
   * (as JSON.stringify would), so optional fields can be passed as they are;
   * anything else that is not JSON (NaN, Dates, undefined array items, …)
   * is refused.
   */
  readonly data: Record<string, unknown>;
  readonly now: number;
}

export interface RecordedServiceReceipt {
  readonly id: number;
  readonly kid: string;
  readonly jws: string;
}

const MAX_DATA_DEPTH = 64;

/** Random bytes drawn from the CSPRNG in blocks: one call per 256 service receipt ids instead of one per service receipt. */
const RANDOM_BLOCK = Buffer.alloc(4096);
let randomOffset = RANDOM_BLOCK.length;

/** 'rcpt:' + 128 fresh random bits, hex; no two ids share bytes of the block. */
function serviceReceiptJti(): string {
  if (randomOffset + 16 > RANDOM_BLOCK.length) {
    randomFillSync(RANDOM_BLOCK);
    randomOffset = 0;
  }
  const id = RANDOM_BLOCK.toString('hex', randomOffset, randomOffset + 16);
  randomOffset += 16;
  return `rcpt:${id}`;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** A copy without undefined-valued object properties; everything else is left for canonicalJson to judge. */
function withoutUndefined(value: unknown, depth: number): unknown {
  if (depth > MAX_DATA_DEPTH) return value;
  if (Array.isArray(value)) return value.map((v) => withoutUndefined(v, depth + 1));
  if (!isPlainObject(value)) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    if (v !== undefined) out[k] = withoutUndefined(v, depth + 1);
  }
  return out;
}

/** A signed service receipt ready to insert (see insertServiceReceipt), e.g. inside a transaction that also decides. */
export interface SignedServiceReceipt {
  readonly tenantId: string;
  readonly kind: ServiceReceiptKind;
  readonly subject: string;
  readonly jws: string;
  readonly kid: string;
}

/** Signs a service receipt without storing it. */
export function signServiceReceipt(signer: ServiceSigner, r: ServiceReceiptInput): SignedServiceReceipt {
  if (!Number.isSafeInteger(r.now) || r.now < 0) {
    throw new BatonError('INTERNAL', { message: 'A receipt needs a time in whole unix seconds.' });
  }
  if (r.subject.length === 0) throw new BatonError('INTERNAL', { message: 'A receipt needs a non-empty subject.' });
  const payload: ServiceReceiptPayload = {
    iss: signer.did,
    kid: signer.kid,
    baton_receipt: r.kind,
    tenant: r.tenantId,
    subject: r.subject,
    iat: r.now,
    jti: serviceReceiptJti(),
    data: withoutUndefined(r.data, 0) as Record<string, unknown>,
  };
  let jws: string;
  try {
    jws = signer.sign({ ...payload });
  } catch (err) {
    // A caller bug, not the client's: never surface it as a 400 about their request.
    throw new BatonError('INTERNAL', {
      message: `Receipt data for ${r.kind} is not canonical JSON: ${isBatonError(err) ? err.message : String(err)}`,
    });
  }
  return { tenantId: r.tenantId, kind: r.kind, subject: r.subject, jws, kid: signer.kid };
}

/**
 * Signs and stores a service receipt. Pass the transaction handle of the action the
 * service receipt attests to (a transaction is also a Db).
 */
export async function recordServiceReceipt(db: Db, signer: ServiceSigner, r: ServiceReceiptInput): Promise<RecordedServiceReceipt> {
  const signed = signServiceReceipt(signer, r);
  const id = await insertServiceReceipt(db, signed);
  return { id, kid: signed.kid, jws: signed.jws };
}
