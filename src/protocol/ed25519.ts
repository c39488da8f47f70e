/**
 * Ed25519 for Baton: ONE verification rule, two backends that must agree on it.
 *
 * THE RULE. verify(A, M, sig) accepts iff all of these hold:
 *   1. sig is exactly 64 bytes, and S (its last 32 bytes, little-endian) is
 *      below the group order L. (Rejects the S+L malleability.)
 *   2. A is exactly 32 bytes, canonically encoded (y < p, and not one of the
 *      two "x = -0" encodings that set the sign bit on a point with x = 0),
 *      decodes to a curve point, and that point is NOT of small order (none of
 *      the 8 torsion points). A small-order key lets anyone forge signatures.
 *   3. R (the first 32 bytes of sig) is not an encoding, canonical or not, of
 *      a small-order point (14 encodings, see SMALL_ORDER_ENCODINGS).
 *   4. The cofactorless equation holds bytewise:
 *        encode([S]B - [k]A) == R,   k = SHA-512(R || A || M) mod L,
 *      with R and A hashed exactly as received. Comparing bytes (not points)
 *      means a non-canonical R can never match.
 *
 * This is RFC 8032's cofactorless check made strict. On ed25519-speccheck it
 * accepts only case 3 (the "Dalek strict" row of that project's results).
 *
 * Backends.
 *  - 'native': node:crypto (OpenSSL) already computes rule 4 exactly (it
 *    re-encodes [S]B - [k]A and memcmp's it with R) and checks S < L, but on
 *    Node 20 and 22 it accepts small-order and non-canonical keys: e.g.
 *    R = identity, S = 0 verifies under the identity key for ANY message
 *    (Node 24 refuses that one itself; the rule must not depend on which
 *    Node runs it). So rules 1-3 run first
 *    as cheap byte compares (key classification is memoised per key), then
 *    crypto.verify runs with a cached KeyObject.
 *  - 'noble': the same pre-checks, then rule 4 computed with @noble/ed25519's
 *    Point API. noble's own verify() is cofactored (and ZIP-215 by default),
 *    which accepts mixed-order cases rule 4 rejects, so it is not used.
 * The differential test runs both, plus an independent BigInt reference of
 * this rule, over Wycheproof, ed25519-speccheck, CCTV and RFC 8032.
 */
import * as ed from '@noble/ed25519';
import { sha512 } from '@noble/hashes/sha2.js';
import type * as NodeCrypto from 'node:crypto';
import { BatonError } from './errors.js';

export type Ed25519Backend = 'native' | 'noble';
export type PublicKeyCheck = 'ok' | 'bad-length' | 'non-canonical' | 'not-on-curve' | 'small-order';

const KEY_BYTES = 32;
const SIG_BYTES = 64;
const SEED_BYTES = 32;

// noble's synchronous sign/getPublicKey need a SHA-512 wired in.
ed.hashes.sha512 = sha512;

// ---------------------------------------------------------------------------
// Byte-level constants and checks (shared by both backends, no BigInt).

function fromHex(hex: string): Uint8Array {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** L = 2^252 + 27742317777372353535851937790883648493, little-endian. */
const GROUP_ORDER_LE = fromHex('edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010');
const GROUP_ORDER = 2n ** 252n + 27742317777372353535851937790883648493n;

/** Rule 1: S < L, compared from the most significant byte down. */
function isScalarBelowGroupOrder(sig: Uint8Array): boolean {
  for (let i = KEY_BYTES - 1; i >= 0; i--) {
    const s = sig[KEY_BYTES + i]!;
    const l = GROUP_ORDER_LE[i]!;
    if (s !== l) return s < l;
  }
  return false; // S == L
}

/**
 * Every encoding of a point of order dividing 8: the 8 canonical ones first,
 * then the 6 non-canonical ones (y >= p, or sign bit set with x = 0). Listed
 * in C2SP/CCTV ed25519/README.md; the test re-derives the set independently.
 */
const SMALL_ORDER_ENCODINGS: readonly Uint8Array[] = [
  '0000000000000000000000000000000000000000000000000000000000000000', // order 4
  '0000000000000000000000000000000000000000000000000000000000000080', // order 4
  '0100000000000000000000000000000000000000000000000000000000000000', // identity
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05', // order 8
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85', // order 8
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a', // order 8
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa', // order 8
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', // order 2
  'edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', // y = p (0)
  'edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff', // y = p (0)
  '0100000000000000000000000000000000000000000000000000000000000080', // identity, x = -0
  'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f', // y = p + 1 (1)
  'eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff', // y = p + 1, x = -0
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff', // order 2, x = -0
].map(fromHex);

/** Compares the 32 bytes of `a` starting at `offset` with `b`; exits at the first difference. */
function equals32(a: Uint8Array, offset: number, b: Uint8Array): boolean {
  for (let i = 0; i < KEY_BYTES; i++) if (a[offset + i] !== b[i]) return false;
  return true;
}

/** True iff the 32 bytes at `offset` encode a small-order point (rule 3; also used for keys). */
function isSmallOrderEncodingAt(bytes: Uint8Array, offset: number): boolean {
  for (const enc of SMALL_ORDER_ENCODINGS) if (equals32(bytes, offset, enc)) return true;
  return false;
}

/** True iff `bytes` (32) is one of the 14 encodings of a point of order dividing 8. */
export function isSmallOrderPointEncoding(bytes: Uint8Array): boolean {
  return bytes.length === KEY_BYTES && isSmallOrderEncodingAt(bytes, 0);
}

/** y (sign bit masked off) >= p = 2^255 - 19, i.e. ed ff .. ff 7f and above. */
function isYAtLeastP(bytes: Uint8Array): boolean {
  if ((bytes[31]! & 0x7f) !== 0x7f) return false;
  for (let i = 1; i < 31; i++) if (bytes[i] !== 0xff) return false;
  return bytes[0]! >= 0xed;
}

const IDENTITY_NEG_ZERO_X = fromHex('0100000000000000000000000000000000000000000000000000000000000080');
const ORDER2_NEG_ZERO_X = fromHex('ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff');

/** Canonical: y < p, and the sign bit is clear when x = 0 (x = 0 only for y = 1 and y = p - 1). */
function isCanonicalPointEncoding(bytes: Uint8Array): boolean {
  if (isYAtLeastP(bytes)) return false;
  return !equals32(bytes, 0, IDENTITY_NEG_ZERO_X) && !equals32(bytes, 0, ORDER2_NEG_ZERO_X);
}

// ---------------------------------------------------------------------------
// Per-key memo: classification, decoded point (noble) and KeyObject (native).

interface KeyEntry {
  readonly check: PublicKeyCheck;
  /** Decoded point; present iff check is 'ok'. */
  readonly point: ed.Point | undefined;
  /** Built on first native use only. */
  keyObject: NodeCrypto.KeyObject | undefined;
}

/**
 * Bounded, insertion-ordered memo. FIFO eviction keeps it O(1) and bounds the
 * memory an attacker can pin by sending many distinct keys; a hot key that
 * gets evicted only costs one re-decode.
 */
const KEY_CACHE_MAX = 4096;
const keyCache = new Map<string, KeyEntry>();

/** A Map key for exactly these bytes (one UTF-16 unit per byte). */
function cacheKeyOf(bytes: Uint8Array): string {
  return String.fromCharCode.apply(null, bytes as unknown as number[]);
}

function classifyPublicKey(publicKey: Uint8Array): { check: PublicKeyCheck; point: ed.Point | undefined } {
  if (!isCanonicalPointEncoding(publicKey)) return { check: 'non-canonical', point: undefined };
  let point: ed.Point;
  try {
    point = ed.Point.fromBytes(publicKey, false); // strict RFC 8032 decoding
  } catch {
    return { check: 'not-on-curve', point: undefined };
  }
  // Canonical by now, so each torsion point has exactly one encoding to compare with.
  if (isSmallOrderEncodingAt(publicKey, 0)) return { check: 'small-order', point: undefined };
  return { check: 'ok', point };
}

/** Memoised entry for a 32-byte key. */
function keyEntryFor(publicKey: Uint8Array): KeyEntry {
  const id = cacheKeyOf(publicKey);
  const cached = keyCache.get(id);
  if (cached !== undefined) return cached;
  const entry: KeyEntry = { ...classifyPublicKey(publicKey), keyObject: undefined };
  if (keyCache.size >= KEY_CACHE_MAX) {
    const oldest = keyCache.keys().next();
    if (oldest.done !== true) keyCache.delete(oldest.value);
  }
  keyCache.set(id, entry);
  return entry;
}

/** Rule 2 as a verdict with a reason. Memoised by key bytes. */
export function checkPublicKey(publicKey: Uint8Array): PublicKeyCheck {
  if (publicKey.length !== KEY_BYTES) return 'bad-length';
  return keyEntryFor(publicKey).check;
}

// ---------------------------------------------------------------------------
// Native backend (node:crypto / OpenSSL).

/** SPKI DER header for an Ed25519 public key (RFC 8410): SEQ{SEQ{OID 1.3.101.112}, BIT STRING}. */
const SPKI_PREFIX = fromHex('302a300506032b6570032100');
/** PKCS#8 DER header for an Ed25519 seed (RFC 8410). */
const PKCS8_PREFIX = fromHex('302e020100300506032b657004220420');

function concatBytes(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}

/**
 * node:crypto without a static import, so this module still loads where there
 * is no Node (the SDK may be bundled elsewhere) and falls back to noble.
 */
function loadNodeCrypto(): typeof NodeCrypto | undefined {
  const proc = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
  try {
    return proc?.getBuiltinModule?.('node:crypto') as typeof NodeCrypto | undefined;
  } catch {
    return undefined;
  }
}

// RFC 8032 section 7.1 TEST 2: used to prove native Ed25519 works before trusting it.
const SELF_TEST_PUB = fromHex('3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c');
const SELF_TEST_MSG = fromHex('72');
const SELF_TEST_SIG = fromHex(
  '92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00',
);

function nativeWorks(nc: typeof NodeCrypto): boolean {
  try {
    const key = nc.createPublicKey({ key: Buffer.from(concatBytes(SPKI_PREFIX, SELF_TEST_PUB)), format: 'der', type: 'spki' });
    const good = nc.verify(null, SELF_TEST_MSG, key, SELF_TEST_SIG);
    const tampered = SELF_TEST_SIG.slice();
    tampered[0] = tampered[0]! ^ 1;
    return good && !nc.verify(null, SELF_TEST_MSG, key, tampered);
  } catch {
    return false;
  }
}

const nodeCrypto: typeof NodeCrypto | undefined = (() => {
  const nc = loadNodeCrypto();
  return nc !== undefined && nativeWorks(nc) ? nc : undefined;
})();

/** 'native' when node:crypto has working Ed25519, else 'noble'. */
export const defaultEd25519Backend: Ed25519Backend = nodeCrypto !== undefined ? 'native' : 'noble';

function requireNodeCrypto(): typeof NodeCrypto {
  if (nodeCrypto === undefined) {
    throw new BatonError('INTERNAL', { message: 'The native Ed25519 backend (node:crypto) is not available in this runtime.' });
  }
  return nodeCrypto;
}

function keyObjectFor(nc: typeof NodeCrypto, entry: KeyEntry, publicKey: Uint8Array): NodeCrypto.KeyObject {
  if (entry.keyObject === undefined) {
    const der = Buffer.from(concatBytes(SPKI_PREFIX, publicKey));
    entry.keyObject = nc.createPublicKey({ key: der, format: 'der', type: 'spki' });
  }
  return entry.keyObject;
}

// ---------------------------------------------------------------------------
// Noble backend: rule 4 computed directly (cofactorless, bytewise).

function bigIntFromLE(bytes: Uint8Array): bigint {
  let n = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(bytes[i]!);
  return n;
}

function cofactorlessEquationHolds(A: ed.Point, publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  const rBytes = signature.subarray(0, KEY_BYTES);
  const s = bigIntFromLE(signature.subarray(KEY_BYTES, SIG_BYTES)); // < L, checked by the caller
  const h = sha512.create().update(rBytes).update(publicKey).update(message).digest();
  const k = bigIntFromLE(h) % GROUP_ORDER;
  // Variable-time multiplication is fine: every input here is public.
  const expectedR = ed.Point.BASE.multiply(s, false).subtract(A.multiply(k, false));
  return equals32(expectedR.toBytes(), 0, rBytes);
}

// ---------------------------------------------------------------------------
// Public API.

/** Verifies under THE RULE above. Synchronous on both backends; never throws on bad input bytes. */
export function verifyEd25519(
  publicKey: Uint8Array,
  message: Uint8Array,
  signature: Uint8Array,
  backend: Ed25519Backend = defaultEd25519Backend,
): boolean {
  if (signature.length !== SIG_BYTES || publicKey.length !== KEY_BYTES) return false; // rules 1, 2
  if (!isScalarBelowGroupOrder(signature)) return false; // rule 1
  if (isSmallOrderEncodingAt(signature, 0)) return false; // rule 3
  const entry = keyEntryFor(publicKey);
  if (entry.check !== 'ok' || entry.point === undefined) return false; // rule 2
  if (backend === 'native') {
    const nc = requireNodeCrypto();
    return nc.verify(null, message, keyObjectFor(nc, entry, publicKey), signature); // rule 4
  }
  return cofactorlessEquationHolds(entry.point, publicKey, message, signature); // rule 4
}

function assertSeed(seed: Uint8Array): void {
  if (seed.length !== SEED_BYTES) {
    throw new BatonError('INVALID_REQUEST', {
      message: 'An Ed25519 private key seed must be exactly 32 bytes.',
      details: { parameter: 'seed', expected_length: SEED_BYTES, actual_length: seed.length },
    });
  }
}

/** Native private KeyObject from a seed; the temporary DER copy of the seed is wiped. */
function privateKeyObject(nc: typeof NodeCrypto, seed: Uint8Array): NodeCrypto.KeyObject {
  const der = Buffer.from(concatBytes(PKCS8_PREFIX, seed));
  try {
    return nc.createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
  } finally {
    der.fill(0);
  }
}

/**
 * Signers already made, by the caller's own seed array: importing a private key costs ~15x the
 * signature (326 against 22 us, measured with tsx), and an SDK caller signs with the same key
 * pair again and again. Weak, so an entry lives no longer than the caller's array. The seed's digest
 * is checked on every use: an array overwritten in place (wiped, or refilled with another key) is
 * imported again, never signed for with the key it used to hold.
 */
const signersBySeed = new WeakMap<Uint8Array, { readonly digest: Uint8Array; readonly sign: (message: Uint8Array) => Uint8Array }>();

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

/** RFC 8032 Ed25519 signature (deterministic, 64 bytes). Both backends give identical bytes. */
export function signEd25519(seed: Uint8Array, message: Uint8Array): Uint8Array {
  assertSeed(seed);
  const digest = nodeCrypto !== undefined ? nodeCrypto.createHash('sha256').update(seed).digest() : sha512(seed);
  const known = signersBySeed.get(seed);
  if (known !== undefined && sameBytes(known.digest, digest)) return known.sign(message);
  const sign = ed25519Signer(seed);
  signersBySeed.set(seed, { digest, sign });
  return sign(message);
}

/**
 * A signing function bound to one seed, for keys that sign repeatedly (the
 * service's service receipt key): importing the private key costs ~14x the
 * signature itself, so it is done once here rather than per call.
 */
export function ed25519Signer(seed: Uint8Array): (message: Uint8Array) => Uint8Array {
  assertSeed(seed);
  if (nodeCrypto !== undefined) {
    const crypto = nodeCrypto;
    const key = privateKeyObject(crypto, seed);
    return (message) => new Uint8Array(crypto.sign(null, message, key));
  }
  const secret = Uint8Array.from(seed);
  return (message) => ed.sign(message, secret);
}

/** The 32-byte public key of a 32-byte seed. */
export function publicKeyFromSeed(seed: Uint8Array): Uint8Array {
  assertSeed(seed);
  if (nodeCrypto !== undefined) {
    const spki = nodeCrypto.createPublicKey(privateKeyObject(nodeCrypto, seed)).export({ format: 'der', type: 'spki' });
    return new Uint8Array(spki.subarray(SPKI_PREFIX.length));
  }
  return ed.getPublicKey(seed);
}

/** 32 fresh random bytes from the platform CSPRNG. */
export function generateSeed(): Uint8Array {
  return globalThis.crypto.getRandomValues(new Uint8Array(SEED_BYTES));
}
