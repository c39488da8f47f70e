/**
 * Offline checks of a Baton tenant's transparency log, for auditors:
 *
 * - verifyReceiptInclusion: a receipt is in the log under a signed checkpoint
 *   (C2SP tlog-proof bundle, as GET /v1/log/receipts/{id}/proof returns it);
 * - verifyCheckpointConsistency: a newer checkpoint only appended to an older
 *   one (else a split-view finding, with both signed notes as evidence);
 * - auditLog: replays the whole log from its tiles and entry bundles,
 *   recomputes the root, re-verifies every receipt's signature and tenant,
 *   cross-checks the receipts listing, and reports every entry missing,
 *   reordered or rewritten.
 *
 * The checks themselves are the pure protocol modules; auditLog only adds
 * HTTP reads (through a fetch function the caller may replace).
 */
import { decodeBase64url } from '../protocol/base64url.js';
import { leafHash, rootOf, type Hash } from '../protocol/merkle.js';
import { parseVerifierKey } from '../protocol/note.js';
import { verifyServiceReceipt, type ServiceVerificationKey } from '../protocol/service-receipt.js';
import { findSplitView, type SplitViewFinding } from '../protocol/split-view.js';
import { entryBundlePath, parseEntryBundle, tileHashes, tilePath, TILE_WIDTH } from '../protocol/tiles.js';
import { openCheckpoint, verifyTlogProof, type LogPolicy, type SignedCheckpoint, type VerifiedTlogProof } from '../protocol/tlog-proof.js';
import { bytesEqual, decodeBase64, encodeBase64, utf8 } from '../protocol/tlog-input.js';
import { BatonError } from '../protocol/errors.js';

/** What an auditor trusts about one tenant's log, as strings it can keep in a file. */
export interface LogTrust {
  /** The checkpoint origin, e.g. baton.example.com/baton/ten_4f2a. */
  readonly origin: string;
  /** The log's note verifier keys (GET /v1/log verifier_keys). */
  readonly logKeys: readonly string[];
  /** Witness cosignature verifier keys. */
  readonly witnesses?: readonly string[];
  /** How many of `witnesses` must have cosigned a checkpoint (default 0). */
  readonly requiredCosignatures?: number;
}

export function logPolicy(trust: LogTrust): LogPolicy {
  return {
    origin: trust.origin,
    logKeys: trust.logKeys.map(parseVerifierKey),
    witnesses: (trust.witnesses ?? []).map(parseVerifierKey),
    requiredCosignatures: trust.requiredCosignatures ?? 0,
  };
}

/** The leaf hash of a service receipt: the log entry is the receipt's JWS. */
export function receiptLeafHash(jws: string): Hash {
  return leafHash(utf8(jws));
}

/**
 * Verifies that `jws` is the leaf at the bundle's index under its signed
 * checkpoint (log signature, origin, witness quorum, inclusion proof). Throws
 * a BatonError (NOTE_NOT_VERIFIED, COSIGNATURES_INSUFFICIENT,
 * LOG_PROOF_INVALID, MALFORMED_…) otherwise. `now` is Unix seconds.
 */
export function verifyReceiptInclusion(jws: string, bundle: string, trust: LogTrust, now: number): VerifiedTlogProof {
  return verifyTlogProof(bundle, receiptLeafHash(jws), logPolicy(trust), now);
}

export type ConsistencyResult =
  | { readonly consistent: true; readonly older: SignedCheckpoint; readonly newer: SignedCheckpoint }
  | { readonly consistent: false; readonly finding: SplitViewFinding };

/**
 * Checks that checkpoint `newer` extends `older` (either order of sizes is
 * accepted) with a consistency proof of base64 hashes. Both notes must open
 * under the trust; a failure of the proof, or equal sizes with different
 * roots, is a split view: the finding carries both notes as evidence.
 */
export function verifyCheckpointConsistency(
  olderNote: string,
  newerNote: string,
  proof: readonly string[],
  trust: LogTrust,
  now: number,
): ConsistencyResult {
  const policy = logPolicy(trust);
  const a = openCheckpoint(olderNote, policy, now);
  const b = openCheckpoint(newerNote, policy, now);
  const hashes = proof.map((p) => decodeBase64(p) ?? new Uint8Array(0));
  const finding = findSplitView(a, b, hashes);
  if (finding !== null) return { consistent: false, finding };
  const [older, newer] = a.checkpoint.size <= b.checkpoint.size ? [a, b] : [b, a];
  return { consistent: true, older, newer };
}

// ---------------------------------------------------------------------------
// Full audit.

export type AuditFinding =
  | { readonly kind: 'missing'; readonly index: number; readonly detail: string }
  | { readonly kind: 'rewritten'; readonly index: number; readonly detail: string }
  | { readonly kind: 'reordered'; readonly index: number; readonly detail: string }
  | { readonly kind: 'bad-receipt'; readonly index: number; readonly detail: string }
  | { readonly kind: 'not-in-log'; readonly receiptId: number; readonly detail: string }
  | { readonly kind: 'root-mismatch'; readonly detail: string }
  | { readonly kind: 'split-view'; readonly detail: string; readonly finding: SplitViewFinding };

export interface AuditReport {
  readonly origin: string;
  readonly treeSize: number;
  /** The checkpoint the audit checked against, verbatim. */
  readonly checkpoint: string;
  readonly entriesChecked: number;
  readonly receiptsChecked: number;
  readonly findings: readonly AuditFinding[];
  /** True when the log's own keys were taken from the service rather than pinned by the caller. */
  readonly trustedOnFirstUse: boolean;
  readonly ok: boolean;
}

export interface AuditOptions {
  readonly baseUrl: string;
  /** An API key with the audit scope. */
  readonly apiKey: string;
  /** Pin the log's identity; without it the keys the service serves are used (and the report says so). */
  readonly trust?: LogTrust;
  /** An earlier checkpoint note to check the current one against (split views, rollbacks). */
  readonly previousCheckpoint?: string;
  /** Unix seconds; default the system clock. */
  readonly now?: number;
  readonly fetch?: (url: string, init: { headers: Record<string, string> }) => Promise<Response>;
  /** Called after each tile of entries: done of total leaves. */
  readonly onProgress?: (done: number, total: number) => void;
}

interface Http {
  json(path: string): Promise<unknown>;
  text(path: string): Promise<string>;
  bytes(path: string): Promise<{ ok: true; bytes: Uint8Array } | { ok: false; status: number; body: unknown }>;
}

function http(o: AuditOptions): Http {
  const doFetch = o.fetch ?? ((url, init) => fetch(url, init));
  const base = o.baseUrl.replace(/\/+$/, '');
  const get = async (path: string) => doFetch(`${base}${path}`, { headers: { authorization: `Bearer ${o.apiKey}` } });
  const fail = async (path: string, res: Response): Promise<never> => {
    throw new BatonError('INVALID_REQUEST', {
      message: `GET ${path} answered ${res.status}: ${(await res.text()).slice(0, 300)}`,
      details: { status: res.status },
    });
  };
  return {
    async json(path) {
      const res = await get(path);
      if (!res.ok) return fail(path, res);
      return res.json();
    },
    async text(path) {
      const res = await get(path);
      if (!res.ok) return fail(path, res);
      return res.text();
    },
    async bytes(path) {
      const res = await get(path);
      if (res.ok) return { ok: true, bytes: new Uint8Array(await res.arrayBuffer()) };
      const text = await res.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        /* keep the text */
      }
      return { ok: false, status: res.status, body };
    },
  };
}

const hex = (h: Uint8Array) => Buffer.from(h).toString('hex');

/**
 * Replays a tenant's log (see the module comment). Findings never throw;
 * a checkpoint that does not verify, or a service that cannot be read,
 * does (there is nothing to audit against).
 */
export async function auditLog(o: AuditOptions): Promise<AuditReport> {
  const now = o.now ?? Math.floor(Date.now() / 1000);
  const h = http(o);
  const info = (await h.json('/v1/log')) as { origin: string; verifier_keys: string[] };
  const trust: LogTrust = o.trust ?? { origin: info.origin, logKeys: info.verifier_keys };
  const policy = logPolicy(trust);
  const note = await h.text('/v1/log/checkpoint');
  const current = openCheckpoint(note, policy, now);
  const size = current.checkpoint.size;
  const findings: AuditFinding[] = [];

  if (o.previousCheckpoint !== undefined) {
    const previous = openCheckpoint(o.previousCheckpoint, policy, now);
    const from = Math.min(previous.checkpoint.size, size);
    const to = Math.max(previous.checkpoint.size, size);
    let proof: Hash[] = [];
    if (from > 0 && from !== to) {
      const served = (await h.json(`/v1/log/consistency?from=${from}&to=${to}`)) as { proof: string[] };
      proof = served.proof.map((p) => decodeBase64(p) ?? new Uint8Array(0));
    }
    const finding = findSplitView(previous, current, proof);
    if (finding !== null)
      findings.push({
        kind: 'split-view',
        detail: `checkpoints of sizes ${previous.checkpoint.size} and ${size} do not agree (${finding.kind})`,
        finding,
      });
    else if (previous.checkpoint.size > size)
      findings.push({ kind: 'root-mismatch', detail: `the log shrank from ${previous.checkpoint.size} to ${size} leaves` });
  }

  const keys = ((await h.json('/v1/keys')) as { keys: { kid: string; public_key: string }[] }).keys.map((k): ServiceVerificationKey => ({
    kid: k.kid,
    publicKey: decodeBase64url(k.public_key, 'service public key'),
  }));
  const tenantId = trust.origin.slice(trust.origin.lastIndexOf('/') + 1);
  const treeLeaves: Hash[] = [];
  const entryHashes = new Set<string>();
  let entriesChecked = 0;
  for (let index = 0; index * TILE_WIDTH < size; index++) {
    const width = Math.min(TILE_WIDTH, size - index * TILE_WIDTH);
    const first = index * TILE_WIDTH;
    const tile = { level: 0, index, width };
    const tileRes = await h.bytes(`/v1/log/${tilePath(tile)}`);
    if (!tileRes.ok) throw new BatonError('INVALID_REQUEST', { message: `The log did not serve ${tilePath(tile)} (${tileRes.status}).` });
    const hashes = tileHashes(tile, tileRes.bytes);
    treeLeaves.push(...hashes);
    const bundle = await h.bytes(`/v1/log/${entryBundlePath(index, width)}`);
    if (!bundle.ok) {
      const missing = (bundle.body as { error?: { details?: { missing_indexes?: number[] } } })?.error?.details?.missing_indexes;
      const indexes = missing && missing.length > 0 ? missing : Array.from({ length: width }, (_, i) => first + i);
      for (const i of indexes)
        findings.push({
          kind: 'missing',
          index: i,
          detail: `the service cannot produce the receipt of entry ${i} (HTTP ${bundle.status})`,
        });
      o.onProgress?.(first + width, size);
      continue;
    }
    let entries: Uint8Array[] = [];
    try {
      entries = parseEntryBundle(bundle.bytes);
    } catch {
      /* counted as wrong below */
    }
    if (entries.length !== width) {
      findings.push({ kind: 'missing', index: first, detail: `entry bundle ${index} holds ${entries.length} entries, not ${width}` });
    }
    const positions = new Map(hashes.map((x, i) => [hex(x), first + i]));
    entries.forEach((entry, i) => {
      const at = first + i;
      entriesChecked++;
      const lh = leafHash(entry);
      entryHashes.add(hex(lh));
      if (!bytesEqual(lh, hashes[i] ?? new Uint8Array(0))) {
        const elsewhere = positions.get(hex(lh));
        if (elsewhere !== undefined)
          findings.push({ kind: 'reordered', index: at, detail: `entry ${at} is the leaf logged at index ${elsewhere}` });
        else
          findings.push({
            kind: 'rewritten',
            index: at,
            detail: `entry ${at} does not hash to the logged leaf ${encodeBase64(hashes[i] ?? new Uint8Array(0))}`,
          });
      }
      const jws = new TextDecoder().decode(entry);
      const verified = verifyServiceReceipt(jws, keys);
      if (!verified.valid) findings.push({ kind: 'bad-receipt', index: at, detail: `receipt signature: ${verified.reason}` });
      else if (verified.payload?.['tenant'] !== tenantId)
        findings.push({ kind: 'bad-receipt', index: at, detail: `receipt belongs to tenant ${String(verified.payload?.['tenant'])}` });
    });
    o.onProgress?.(first + width, size);
  }
  if (!bytesEqual(rootOf(treeLeaves), current.checkpoint.rootHash))
    findings.push({ kind: 'root-mismatch', detail: `the tiles hash to ${encodeBase64(rootOf(treeLeaves))}, not the checkpoint's root` });

  // Every receipt the service lists must be in the log, unless it came after the checkpoint.
  const logged = new Set(treeLeaves.map(hex));
  let receiptsChecked = 0;
  const lastLogged = { id: 0 };
  const unlogged: { id: number }[] = [];
  for (let after = 0; ;) {
    const page = (await h.json(`/v1/receipts?after=${after}&limit=500`)) as {
      receipts: { id: number; jws: string }[];
      next_after: number | null;
    };
    for (const r of page.receipts) {
      receiptsChecked++;
      if (logged.has(hex(receiptLeafHash(r.jws)))) lastLogged.id = Math.max(lastLogged.id, r.id);
      else unlogged.push(r);
    }
    if (page.next_after === null) break;
    after = page.next_after;
  }
  // A receipt older than some logged one and still outside the log is not merely pending.
  for (const r of unlogged)
    if (r.id < lastLogged.id)
      findings.push({ kind: 'not-in-log', receiptId: r.id, detail: `receipt ${r.id} is listed by the service but is not in the log` });
  findings.sort((a, b) => ('index' in a ? a.index : -1) - ('index' in b ? b.index : -1));
  return {
    origin: trust.origin,
    treeSize: size,
    checkpoint: note,
    entriesChecked,
    receiptsChecked,
    findings,
    trustedOnFirstUse: o.trust === undefined,
    ok: findings.length === 0,
  };
}
