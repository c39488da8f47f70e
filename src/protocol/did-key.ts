/**
 * did:key for Ed25519: 'did:key:z' + base58btc(0xed 0x01 || 32-byte public key).
 *
 * Parsing is strict so that one key has exactly one DID string: anything that
 * is not byte-for-byte what didKeyFromPublicKey would produce is refused.
 *   INVALID_DID: wrong prefix or multibase, a character outside base58btc,
 *                non-canonical base58, another multicodec, wrong length.
 *   WEAK_KEY:    the 32 bytes are not an acceptable Ed25519 key (checkPublicKey
 *                is not 'ok': non-canonical y or x = -0, not on the curve, or
 *                small order). A non-canonical y is WEAK_KEY, not INVALID_DID:
 *                the DID syntax is fine, the key inside it is what is unsafe,
 *                which is exactly what WEAK_KEY's table message says.
 */
import { decodeBase58btc, encodeBase58btc } from './base58.js';
import { checkPublicKey } from './ed25519.js';
import { BatonError } from './errors.js';

const DID_KEY_PREFIX = 'did:key:z';
const ED25519_PUB_MULTICODEC = [0xed, 0x01] as const;
const KEY_BYTES = 32;
/**
 * An Ed25519 did:key is always 56 characters (0xed01-prefixed 34-byte values
 * take exactly 47 base58 digits). Anything much longer is refused before the
 * quadratic base58 decode; the exact length is then enforced on the bytes.
 */
const MAX_DID_LENGTH = 128;

function invalidDid(reason: string, message: string): BatonError {
  return new BatonError('INVALID_DID', { message, details: { reason } });
}

function weakKey(reason: string): BatonError {
  return new BatonError('WEAK_KEY', {
    message: `The did:key names an Ed25519 public key that Baton refuses (${reason}).`,
    details: { reason },
  });
}

function assertAcceptableKey(publicKey: Uint8Array): void {
  const check = checkPublicKey(publicKey);
  if (check === 'bad-length') {
    throw invalidDid('length', `An Ed25519 public key is 32 bytes, not ${publicKey.length}.`);
  }
  if (check !== 'ok') throw weakKey(check);
}

/** Refuses (WEAK_KEY) to mint a DID for a key that publicKeyFromDidKey would refuse. */
export function didKeyFromPublicKey(publicKey: Uint8Array): string {
  assertAcceptableKey(publicKey);
  const multicodec = new Uint8Array(ED25519_PUB_MULTICODEC.length + KEY_BYTES);
  multicodec.set(ED25519_PUB_MULTICODEC, 0);
  multicodec.set(publicKey, ED25519_PUB_MULTICODEC.length);
  return DID_KEY_PREFIX + encodeBase58btc(multicodec);
}

function decodeMultibase(did: string): Uint8Array {
  const encoded = did.slice(DID_KEY_PREFIX.length);
  let bytes: Uint8Array;
  try {
    bytes = decodeBase58btc(encoded);
  } catch {
    throw invalidDid('base58', 'The did:key contains a character outside the base58btc alphabet.');
  }
  // Re-encoding must give back the input: one key, one spelling (no extra leading '1's).
  if (encodeBase58btc(bytes) !== encoded) {
    throw invalidDid('non-canonical-base58', 'The did:key is not canonically base58btc-encoded.');
  }
  return bytes;
}

function parseDidKey(did: string): Uint8Array {
  if (!did.startsWith('did:key:')) throw invalidDid('prefix', 'A principal must be a did:key identifier.');
  if (!did.startsWith(DID_KEY_PREFIX)) throw invalidDid('multibase', 'A did:key must use base58btc multibase (a "z" after "did:key:").');
  if (did.length > MAX_DID_LENGTH) throw invalidDid('length', 'The did:key is far longer than an Ed25519 did:key.');
  const bytes = decodeMultibase(did);
  if (bytes[0] !== ED25519_PUB_MULTICODEC[0] || bytes[1] !== ED25519_PUB_MULTICODEC[1]) {
    throw invalidDid('multicodec', 'The did:key is not an Ed25519 public key (multicodec 0xed01).');
  }
  if (bytes.length !== ED25519_PUB_MULTICODEC.length + KEY_BYTES) {
    throw invalidDid('length', 'The did:key does not carry exactly 32 key bytes.');
  }
  const publicKey = bytes.slice(ED25519_PUB_MULTICODEC.length);
  assertAcceptableKey(publicKey);
  return publicKey;
}

/**
 * Bounded FIFO memo of accepted DIDs (the same DIDs recur on every verify).
 * Refusals are not cached so garbage cannot evict good entries.
 */
const DID_CACHE_MAX = 4096;
const didCache = new Map<string, Uint8Array>();

/** Strict did:key -> 32-byte Ed25519 public key. Throws INVALID_DID or WEAK_KEY. */
export function publicKeyFromDidKey(did: string): Uint8Array {
  const cached = didCache.get(did);
  // A copy, so a caller mutating the result cannot poison the cache.
  if (cached !== undefined) return cached.slice();
  const publicKey = parseDidKey(did);
  if (didCache.size >= DID_CACHE_MAX) {
    const oldest = didCache.keys().next();
    if (oldest.done !== true) didCache.delete(oldest.value);
  }
  didCache.set(did, publicKey);
  return publicKey.slice();
}
