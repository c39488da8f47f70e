/**
 * Deterministic keys and DRS records for the security suite.
 *
 * Written independently of src/ on purpose: keys come from fixed seeds through
 * node:crypto, did:key and base64url are encoded here, and JWS are assembled by
 * hand, so hostile records (non-canonical JSON, S >= L, small-order keys, odd
 * headers) can be built byte for byte and the suite never trusts the code it
 * attacks to build its inputs. Ed25519 is deterministic and every time is fixed
 * (T0, shared with every test in test/support/fixtures.ts), so the same seed
 * always gives the same JWS: the checked-in corpus names real, stored records.
 */
import { createHash, createPrivateKey, createPublicKey, sign, type KeyObject } from 'node:crypto';
import { ARGS, CMD, T0, TOOL_SERVER } from '../../support/fixtures.js';
import { tool } from '../../support/tools.js';

/** The suite's clock and call are every test's (only the records are built here). */
export { ARGS, CMD, T0, TOOL_SERVER };

// ---------------------------------------------------------------- encodings

export const b64u = (bytes: Uint8Array | string): string =>
  (typeof bytes === 'string' ? Buffer.from(bytes, 'utf8') : Buffer.from(bytes)).toString('base64url');

export const unb64u = (s: string): Buffer => Buffer.from(s, 'base64url');

const B58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';

/** base58btc (Bitcoin alphabet); leading zero bytes become '1's. */
export function base58(bytes: Uint8Array): string {
  let n = 0n;
  for (const b of bytes) n = n * 256n + BigInt(b);
  let out = '';
  while (n > 0n) {
    out = B58[Number(n % 58n)]! + out;
    n /= 58n;
  }
  for (const b of bytes) {
    if (b !== 0) break;
    out = `1${out}`;
  }
  return out;
}

/** did:key for 32 raw Ed25519 public-key bytes (multicodec 0xed01, base58btc). */
export function didKeyOf(publicKey: Uint8Array, extraPrefix: readonly number[] = []): string {
  return `did:key:z${base58(Uint8Array.from([...extraPrefix, 0xed, 0x01, ...publicKey]))}`;
}

export const hex = (s: string): Uint8Array => Uint8Array.from(Buffer.from(s, 'hex'));

/** RFC 8785 for the plain values the suite signs (ASCII keys, safe integers, short decimals). */
export function jcs(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(jcs).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined);
  entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${jcs(v)}`).join(',')}}`;
}

export const sha256Hex = (data: string | Uint8Array): string => createHash('sha256').update(data).digest('hex');
export const recordHash = (jws: string): string => `sha256:${sha256Hex(jws)}`;

// ---------------------------------------------------------------- keys

export interface Key {
  readonly name: string;
  readonly seed: Uint8Array;
  readonly publicKey: Uint8Array;
  readonly did: string;
  readonly privateKey: KeyObject;
}

const PKCS8_ED25519 = hex('302e020100300506032b657004220420');

export function keyFromSeed(name: string, seed: Uint8Array): Key {
  const privateKey = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519, seed]), format: 'der', type: 'pkcs8' });
  const spki = createPublicKey(privateKey).export({ format: 'der', type: 'spki' });
  const publicKey = Uint8Array.from(spki.subarray(spki.length - 32));
  return { name, seed, publicKey, did: didKeyOf(publicKey), privateKey };
}

/** A fixed key per name: seed = SHA-256("baton/security/" + name). */
export function fixedKey(name: string): Key {
  return keyFromSeed(name, Uint8Array.from(createHash('sha256').update(`baton/security/${name}`).digest()));
}

export const KEYS = {
  rootA: fixedKey('rootA'),
  a1: fixedKey('a1'),
  a2: fixedKey('a2'),
  a3: fixedKey('a3'),
  x1: fixedKey('x1'),
  x2: fixedKey('x2'),
  rootB: fixedKey('rootB'),
  b1: fixedKey('b1'),
  stranger: fixedKey('stranger'),
  rootOld: fixedKey('rootOld'),
  newRoot: fixedKey('newRoot'),
} as const;

// ---------------------------------------------------------------- Ed25519 edge material

/** L, the order of the Ed25519 prime subgroup. */
export const GROUP_ORDER = 2n ** 252n + 27742317777372353535851937790883648493n;

export function leToBigint(bytes: Uint8Array): bigint {
  let n = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) n = n * 256n + BigInt(bytes[i]!);
  return n;
}

export function bigintToLe(n: bigint, length: number): Uint8Array {
  const out = new Uint8Array(length);
  for (let i = 0; i < length; i++) {
    out[i] = Number(n & 0xffn);
    n >>= 8n;
  }
  return out;
}

/** Encodings of points of small order (identity, order 2, 4, 8) and non-canonical ones. */
export const WEAK_POINTS = {
  identity: hex('0100000000000000000000000000000000000000000000000000000000000000'),
  order2: hex('ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f'),
  order4: hex('0000000000000000000000000000000000000000000000000000000000000000'),
  order8: hex('26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05'),
  /** y = p + 1: a non-canonical encoding of the identity. */
  identityNonCanonical: hex('eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f'),
  /** The identity with the sign bit set (x = -0). */
  identityNegZero: hex('0100000000000000000000000000000000000000000000000000000000000080'),
} as const;

/** R = identity, S = 0: "verifies" under a small-order key for every message on a lenient verifier. */
export const IDENTITY_SIGNATURE = Uint8Array.from([...WEAK_POINTS.identity, ...new Uint8Array(32)]);

// ---------------------------------------------------------------- JWS

export const JWS_HEADER = '{"alg":"EdDSA","typ":"JWT"}';
export const HEADER_B64 = b64u(JWS_HEADER);

export function signBytes(key: Key, message: string | Uint8Array): Uint8Array {
  return Uint8Array.from(sign(null, typeof message === 'string' ? Buffer.from(message, 'ascii') : message, key.privateKey));
}

/**
 * A compact JWS over exactly these header and payload bytes (text is UTF-8
 * encoded; pass Uint8Array for invalid UTF-8), signed by `key` unless an
 * explicit signature is given.
 */
export function rawJws(opts: { header?: string | Uint8Array; payload: string | Uint8Array; key?: Key; signature?: Uint8Array }): string {
  const h = opts.header === undefined ? HEADER_B64 : b64u(opts.header);
  const p = b64u(opts.payload);
  const signingInput = `${h}.${p}`;
  const sig = opts.signature ?? signBytes(opts.key!, signingInput);
  return `${signingInput}.${b64u(sig)}`;
}

export const signPayload = (payload: Record<string, unknown>, key: Key): string => rawJws({ payload: jcs(payload), key });

export interface Rec {
  readonly jws: string;
  readonly hash: string;
  readonly payload: Record<string, unknown>;
}

const rec = (payload: Record<string, unknown>, key: Key): Rec => {
  const jws = signPayload(payload, key);
  return { jws, hash: recordHash(jws), payload };
};

export const POLICY_ROOT = { allowed_tools: ['web_search'], max_cost_usd: 10, max_calls: 1000 };
export const POLICY_SUB = { allowed_tools: ['web_search'], max_cost_usd: 10, max_calls: 500 };

export function rootPayload(issuer: Key, audience: string, jti: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    iss: issuer.did,
    sub: issuer.did,
    aud: audience,
    drs_v: '4.0',
    drs_type: 'delegation-receipt',
    cmd: CMD,
    policy: POLICY_ROOT,
    nbf: T0 - 100,
    exp: T0 + 3600,
    iat: T0,
    jti,
    drs_root_type: 'organisation',
    ...extra,
  };
}

export function subPayload(
  parent: Rec,
  issuer: Key,
  audience: string,
  jti: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    iss: issuer.did,
    sub: parent.payload['sub'],
    aud: audience,
    drs_v: '4.0',
    drs_type: 'delegation-receipt',
    cmd: parent.payload['cmd'],
    policy: POLICY_SUB,
    nbf: parent.payload['nbf'],
    exp: parent.payload['exp'],
    iat: T0,
    jti,
    prev_dr_hash: parent.hash,
    ...extra,
  };
}

export const rootDr = (issuer: Key, audience: string, jti: string, extra: Record<string, unknown> = {}): Rec =>
  rec(rootPayload(issuer, audience, jti, extra), issuer);

export const subDr = (parent: Rec, issuer: Key, audience: string, jti: string, extra: Record<string, unknown> = {}): Rec =>
  rec(subPayload(parent, issuer, audience, jti, extra), issuer);

export function invocationPayload(
  chain: readonly Rec[],
  invoker: Key,
  jti: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  const leaf = chain[chain.length - 1]!;
  return {
    iss: invoker.did,
    sub: chain[0]!.payload['sub'],
    drs_v: '4.0',
    drs_type: 'invocation-receipt',
    cmd: leaf.payload['cmd'],
    args: ARGS,
    dr_chain: chain.map((d) => d.hash),
    tool_server: TOOL_SERVER,
    iat: T0,
    jti,
    ...extra,
  };
}

export const invocation = (chain: readonly Rec[], invoker: Key, jti: string, extra: Record<string, unknown> = {}): Rec =>
  rec(invocationPayload(chain, invoker, jti, extra), invoker);

export const revocationPayload = (
  signer: Key,
  target: string,
  jti: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> => ({ iss: signer.did, drs_v: '4.0', drs_type: 'revocation', target, iat: T0, jti, ...extra });

export const revocation = (signer: Key, target: string, jti: string, extra: Record<string, unknown> = {}): Rec =>
  rec(revocationPayload(signer, target, jti, extra), signer);

export const bundle = (inv: Rec, chain: readonly Rec[] | 'reference') => ({
  bundle_version: '4.0',
  invocation: inv.jws,
  receipts: chain === 'reference' ? [] : chain.map((d) => d.jws),
});

// ---------------------------------------------------------------- the stored world

/**
 * Everything the suite stores before it attacks (see harness.ts buildWorld):
 *
 * tenant A trusts rootA:  drA0 (rootA -> a1) -> drA1 (a1 -> a2), invocations by a2:
 *   invConsumed (allowed), invMetered (allowed, actual recorded), invUnmetered (allowed, no actual);
 *   drRevoked (rootA -> x1, revoked by revRevoked); drLive (rootA -> x2, never to be revoked);
 *   a custodial root issued from ISSUE_BASE.
 * tenant B trusts rootB: drB0 (rootB -> b1), invB (allowed).
 */
export const drA0 = rootDr(KEYS.rootA, KEYS.a1.did, 'dr:sec-a0');
export const drA1 = subDr(drA0, KEYS.a1, KEYS.a2.did, 'dr:sec-a1');
export const CHAIN_A = [drA0, drA1] as const;
export const invConsumed = invocation(CHAIN_A, KEYS.a2, 'inv:sec-consumed');
export const invMetered = invocation(CHAIN_A, KEYS.a2, 'inv:sec-metered');
export const invUnmetered = invocation(CHAIN_A, KEYS.a2, 'inv:sec-unmetered');
export const ACTUAL_BASE = { cost_usd: 0.25, tokens_in: 100, tokens_out: 50, source: 'api-usage' } as const;
export const drRevoked = rootDr(KEYS.rootA, KEYS.x1.did, 'dr:sec-revoked');
export const revRevoked = revocation(KEYS.rootA, drRevoked.hash, 'rev:sec-revoked');
export const drLive = rootDr(KEYS.rootA, KEYS.x2.did, 'dr:sec-live');
export const ISSUE_BASE = {
  audience: KEYS.a3.did,
  policy: { allowed_tools: ['web_search'], max_calls: 3 },
  jti: 'dr:sec-issued',
  nbf: T0 - 10,
  exp: T0 + 600,
};
export const drB0 = rootDr(KEYS.rootB, KEYS.b1.did, 'dr:sec-b0');
export const invB = invocation([drB0], KEYS.b1, 'inv:sec-b');

/** A DR hash and a jti no tenant holds (well-formed). */
export const ABSENT_HASH = `sha256:${sha256Hex('baton/security/absent')}`;
export const ABSENT_JTI = 'inv:sec-absent';

// ---------------------------------------------------------------- tool catalogs and approvals (issue 13)

/** An organisation-wide tool: the default rules send every call to a human. */
export const ORG_TOOL = tool('org_broadcast', { type: 'internal', blast_radius: 'organizational', action_type: 'org:broadcast' });
/** Three tools that together read untrusted content, access private data and communicate externally. */
export const TRIFECTA_TOOLS = [
  tool('inbox_read', { untrusted_content: true, action_type: 'mail:read' }),
  tool('crm_lookup', { private_data_access: true, action_type: 'crm:read' }),
  tool('mail_send', { type: 'external', external_communication: true, action_type: 'mail:send' }),
];
/**
 * The fixtures' tool, declared harmless: an undeclared tool counts as carrying
 * every risk flag, so left undeclared it would complete the trifecta and every
 * call of the fixtures above would wait for a human.
 */
export const WEB_SEARCH = tool('web_search', { action_type: 'web:search' });
/**
 * Tenant A's catalog: version 1 declares web_search and the organisation-wide
 * tool, version 2 adds the trifecta tools. The fixtures above verify exactly
 * as without a catalog.
 */
export const CATALOG_A = [
  { base_version: 0, strict: false, tools: [WEB_SEARCH, ORG_TOOL] },
  { base_version: 1, strict: false, tools: [WEB_SEARCH, ORG_TOOL, ...TRIFECTA_TOOLS] },
] as const;
export const CATALOG_B = { base_version: 0, strict: false, tools: [tool('b_only_reader')] } as const;

/** A DR whose tools form the trifecta: stored pending a human (a held grant). */
export const drHeld = rootDr(KEYS.rootA, KEYS.a3.did, 'dr:sec-held', {
  policy: { allowed_tools: TRIFECTA_TOOLS.map((t) => t.name), max_cost_usd: 10, max_calls: 10 },
});
/** A DR for the organisation-wide tool, and a call through it that waits for a human (a pending approval). */
export const drGated = rootDr(KEYS.rootA, KEYS.a3.did, 'dr:sec-gated', {
  policy: { allowed_tools: [ORG_TOOL['name']], max_cost_usd: 10, max_calls: 10 },
});
export const GATED_ARGS = { tool: ORG_TOOL['name'], estimated_cost_usd: 0.5, pii_access: false, write_access: false } as const;
export const invGated = invocation([drGated], KEYS.a3, 'inv:sec-gated', { args: GATED_ARGS });
/** The guardrail triple of a decision. */
export const DECISION = { actor: 'sec@example.com', confirm: true, reason: 'security suite' } as const;
/** An approval id no tenant holds (well-formed). */
export const ABSENT_APPROVAL = 'apr_00000000000000000000000000000000';
