/**
 * Service receipts, verified offline: what an auditor runs against the keys
 * published at GET /v1/keys or /.well-known/jwks.json. Pure, so the SDK can
 * use it without the service or its store.
 *
 * A receipt is a compact JWS whose header is exactly
 * JCS({"alg":"EdDSA","kid":kid,"typ":"JWT"}) and whose payload is a JCS
 * object, signed under the project's one Ed25519 rule.
 */
import { decodeBase64url, encodeBase64url } from './base64url.js';
import { didKeyFromPublicKey } from './did-key.js';
import { verifyEd25519 } from './ed25519.js';
import { sha256Hex } from './hash.js';
import { canonicalJson, parseCanonicalJson, utf8Encode, type JsonValue } from './jcs.js';

/** A published verification key, as an auditor holds it. */
export interface ServiceVerificationKey {
  readonly kid: string;
  readonly publicKey: Uint8Array;
}

/**
 * The kid of a service key: 'svc_' + the first 16 hex digits of SHA-256 over its raw public key.
 * Derived, never chosen, so a client that pins a key by its did:key knows its kid too.
 */
export function serviceKid(publicKey: Uint8Array): string {
  return `svc_${sha256Hex(publicKey).slice(0, 16)}`;
}

/** Receipts are small; anything larger is refused before parsing. */
const MAX_RECEIPT_LENGTH = 1024 * 1024;

/** The encoded header every receipt signed under `kid` carries. */
export function serviceReceiptHeaderFor(kid: string): string {
  return encodeBase64url(utf8Encode(canonicalJson({ alg: 'EdDSA', kid, typ: 'JWT' })));
}

export interface ServiceReceiptVerification {
  readonly valid: boolean;
  /** The parsed payload when valid; null otherwise (never act on an unverified payload). */
  readonly payload: Record<string, JsonValue> | null;
  /** The kid the header names, when the header could be read. */
  readonly kid: string | null;
  /** Why it is not valid. */
  readonly reason?: string;
}

function isObject(v: JsonValue): v is { [k: string]: JsonValue } {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function refuse(reason: string, kid: string | null = null): ServiceReceiptVerification {
  return { valid: false, payload: null, kid, reason };
}

/**
 * Checks a receipt JWS against published service keys. Never throws on bad
 * input. Valid means: the header is exactly JCS({"alg":"EdDSA","kid",
 * "typ":"JWT"}), the payload is a JCS object, the kid is one of `keys`, the
 * Ed25519 signature verifies under it (the project's one verification
 * rule), and the payload's kid and iss, when present, name that same key.
 */
export function verifyServiceReceipt(jws: string, keys: readonly ServiceVerificationKey[]): ServiceReceiptVerification {
  if (typeof jws !== 'string' || jws.length === 0 || jws.length > MAX_RECEIPT_LENGTH)
    return refuse('not a compact JWS string of acceptable length');
  const parts = jws.split('.');
  if (parts.length !== 3) return refuse('a compact JWS has exactly 3 dot-separated parts');
  const [encodedHeader, encodedPayload, encodedSignature] = parts as [string, string, string];

  let header: JsonValue;
  try {
    header = parseCanonicalJson(decodeBase64url(encodedHeader, 'receipt header'), 'receipt header');
  } catch {
    return refuse('the header is not canonical base64url JCS');
  }
  if (!isObject(header) || typeof header['kid'] !== 'string' || header['kid'].length === 0) return refuse('the header names no kid');
  const kid = header['kid'];
  if (encodedHeader !== serviceReceiptHeaderFor(kid)) return refuse('the header is not exactly {"alg":"EdDSA","kid":…,"typ":"JWT"}', kid);

  let payload: JsonValue;
  let signature: Uint8Array;
  try {
    payload = parseCanonicalJson(decodeBase64url(encodedPayload, 'receipt payload'), 'receipt payload');
    signature = decodeBase64url(encodedSignature, 'receipt signature');
  } catch {
    return refuse('the payload or signature is not canonical base64url (JCS)', kid);
  }
  if (!isObject(payload)) return refuse('the payload is not a JSON object', kid);

  const key = keys.find((k) => k.kid === kid);
  if (!key) return refuse(`no published key has kid ${kid}`, kid);
  if (!verifyEd25519(key.publicKey, utf8Encode(`${encodedHeader}.${encodedPayload}`), signature)) {
    return refuse('the signature does not verify under the published key', kid);
  }
  if ('kid' in payload && payload['kid'] !== kid) return refuse('the payload kid differs from the header kid', kid);
  if ('iss' in payload) {
    let did: string;
    try {
      did = didKeyFromPublicKey(key.publicKey);
    } catch {
      return refuse('the published key is not an acceptable Ed25519 key', kid);
    }
    if (payload['iss'] !== did) return refuse('the payload iss is not the did:key of the signing key', kid);
  }
  return { valid: true, payload, kid };
}
