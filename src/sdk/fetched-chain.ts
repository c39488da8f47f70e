/**
 * A chain fetched by hash is signed under (baton delegate --parent, baton invoke --chain), so the
 * client takes only the chain of the hash it asked for, whoever answered: a wrong base URL, a proxy
 * or a hostile server must not have the user sign under another chain (one granting max_calls 50
 * instead of 3, say). Pure and cheap: one hash and one signature check per record, no trust
 * decision (roots, revocation and expiry are the service's to judge when the new record is used).
 */
import { decodeJws, signatureValid, type DecodedJws } from '../protocol/jws.js';
import { canonicalJson } from '../protocol/jcs.js';
import { DelegationPayloadSchema, MAX_CHAIN_DEPTH, parseWith, type DelegationPayload } from '../protocol/records.js';
import type { components } from '../api/wire-types.js';

type DelegationChain = components['schemas']['DelegationChain'];

/**
 * Why `chain` is not the chain of the record `requested`, or undefined when it is: root first, each
 * record names the one before it (the root none) and verifies under its own issuer's did:key, the
 * last one is `requested`, and the records shown beside the receipts say what the receipts sign.
 */
export function fetchedChainProblem(requested: string, chain: DelegationChain): string | undefined {
  const { receipts } = chain;
  if (receipts.length === 0) return 'it holds no delegation record';
  // A chain is at most MAX_CHAIN_DEPTH records, its root among them (verify's CHAIN_TOO_DEEP); more is not checked, one signature each.
  if (receipts.length > MAX_CHAIN_DEPTH) return `it holds ${receipts.length} records, more than any chain`;
  const hashes: string[] = [];
  const payloads: DelegationPayload[] = [];
  let rootIssuer: string | undefined;
  for (const [i, jws] of receipts.entries()) {
    let decoded: DecodedJws;
    let payload: DelegationPayload;
    try {
      decoded = decodeJws(jws, `delegation record receipts[${i}]`);
      payload = parseWith(DelegationPayloadSchema, decoded.payload, `payload of receipts[${i}]`);
    } catch (e) {
      return `receipts[${i}] is not a delegation record (${errorText(e)})`;
    }
    const parent = payload.prev_dr_hash ?? null;
    const before = hashes[i - 1];
    if (before === undefined && parent !== null)
      return `its receipts[0] names a parent (${parent}), so the chain does not start at its root`;
    if (before !== undefined && parent !== before)
      return `receipts[${i}] names parent ${parent ?? 'none'}, not receipts[${i - 1}] (${before})`;
    let signed: boolean;
    try {
      signed = signatureValid(decoded, payload.iss);
    } catch (e) {
      return `the issuer of receipts[${i}] is not a usable did:key (${errorText(e)})`;
    }
    if (!signed) return `the signature of receipts[${i}] does not verify under its issuer ${payload.iss}`;
    hashes.push(decoded.hash);
    payloads.push(payload);
    rootIssuer ??= payload.iss;
  }
  const leaf = hashes[hashes.length - 1];
  if (leaf !== requested) return `it ends at ${leaf}, another record`;
  // Readers show these beside the receipts (baton chain): they must be the records just checked.
  if (chain.hash !== requested) return `it is labelled ${JSON.stringify(chain.hash)}`;
  if (chain.root_principal !== rootIssuer)
    return `it names ${JSON.stringify(chain.root_principal)} as root principal, not the root's issuer ${rootIssuer}`;
  const records = chain.records;
  if (records.length !== receipts.length) return `it lists ${records.length} records for ${receipts.length} receipts`;
  for (const [i, record] of records.entries()) {
    if (record.jws !== receipts[i] || record.hash !== hashes[i]) return `records[${i}] is not receipts[${i}]`;
    const member = differingMember(record, payloads[i]!, i, hashes);
    if (member !== undefined) return `records[${i}].${member} is not what receipts[${i}] signs`;
  }
  return undefined;
}

/** The members of a decoded record view that restate what the record beside it signs. */
const SIGNED_VIEW_MEMBERS = [
  'jti',
  'iss',
  'sub',
  'aud',
  'cmd',
  'policy',
  'nbf',
  'exp',
  'iat',
  'parent_hash',
  'depth',
  'root_hash',
] as const;

/** The members of a decoded record view checked against the signed record beside it (the rest is the service's view). */
export const SIGNED_RECORD_MEMBERS = ['jws', 'hash', ...SIGNED_VIEW_MEMBERS] as const;

/** The first member of a decoded record view that says something other than the signed record it is beside. */
function differingMember(
  record: DelegationChain['records'][number],
  payload: DelegationPayload,
  index: number,
  hashes: readonly string[],
): string | undefined {
  const signed: Record<(typeof SIGNED_VIEW_MEMBERS)[number], unknown> = {
    jti: payload.jti,
    iss: payload.iss,
    sub: payload.sub,
    aud: payload.aud,
    cmd: payload.cmd,
    policy: payload.policy,
    nbf: payload.nbf,
    exp: payload.exp ?? null,
    iat: payload.iat,
    parent_hash: payload.prev_dr_hash ?? null,
    depth: index,
    root_hash: hashes[0],
  };
  const shown = record as unknown as Record<string, unknown>;
  const same = (k: (typeof SIGNED_VIEW_MEMBERS)[number]) => {
    try {
      return canonicalJson(shown[k] ?? null) === canonicalJson(signed[k] ?? null);
    } catch {
      return false; // no JSON a record signs (a number out of range, a lone surrogate): not what it signs
    }
  };
  return SIGNED_VIEW_MEMBERS.find((k) => !same(k));
}

const errorText = (e: unknown): string => (e instanceof Error ? e.message : String(e));
