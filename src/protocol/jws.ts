/**
 * DRS compact JWS: `b64url(JCS(header)).b64url(JCS(payload)).b64url(sig)`.
 *
 * Decoding is strict on purpose: the header must be exactly the one DRS
 * header, header and payload must be byte-exact JCS, and base64url must be
 * canonical. Then every record has exactly one encoding per signer and
 * payload, so its hash identifies it.
 */
import { decodeBase64url, encodeBase64url } from './base64url.js';
import { publicKeyFromDidKey } from './did-key.js';
import { signEd25519, verifyEd25519 } from './ed25519.js';
import { BatonError } from './errors.js';
import { recordHash, type RecordHash } from './hash.js';
import { canonicalJson, parseCanonicalJson, utf8Encode, type JsonValue } from './jcs.js';
import { MAX_JWS_LENGTH } from './records.js';

export const JWS_HEADER = '{"alg":"EdDSA","typ":"JWT"}';
const ENCODED_HEADER = encodeBase64url(utf8Encode(JWS_HEADER));

export interface DecodedJws {
  readonly jws: string;
  readonly hash: RecordHash;
  /** The JCS payload, parsed; its shape is checked by the caller's schema. */
  readonly payload: JsonValue;
  /** The bytes the signature covers: ASCII of `header.payload`. */
  readonly signingInput: Uint8Array;
  readonly signature: Uint8Array;
}

/** Splits and decodes a compact JWS; does not check the signature. */
export function decodeJws(jws: unknown, what: string): DecodedJws {
  if (typeof jws !== 'string' || jws.length === 0) {
    throw new BatonError('MALFORMED_JWS', { message: `The ${what} is not a compact JWS string.` });
  }
  if (jws.length > MAX_JWS_LENGTH) {
    throw new BatonError('MALFORMED_JWS', {
      message: `The ${what} is ${jws.length} characters long; Baton accepts records of at most ${MAX_JWS_LENGTH}.`,
    });
  }
  const parts = jws.split('.');
  if (parts.length !== 3) {
    throw new BatonError('MALFORMED_JWS', {
      message: `The ${what} has ${parts.length} dot-separated parts; a compact JWS has exactly 3.`,
    });
  }
  const [encodedHeader, encodedPayload, encodedSignature] = parts as [string, string, string];
  if (encodedHeader !== ENCODED_HEADER) checkHeader(encodedHeader, what);
  const payload = parseCanonicalJson(decodeBase64url(encodedPayload, `payload of the ${what}`), `payload of the ${what}`);
  const signature = decodeBase64url(encodedSignature, `signature of the ${what}`);
  if (signature.length !== 64) {
    throw new BatonError('SIGNATURE_INVALID', {
      message: `The signature of the ${what} is ${signature.length} bytes; Ed25519 signatures are exactly 64 bytes.`,
    });
  }
  return {
    jws,
    hash: recordHash(jws),
    payload,
    signingInput: utf8Encode(`${encodedHeader}.${encodedPayload}`),
    signature,
  };
}

/** Explains precisely why a header is not the one DRS header. */
function checkHeader(encodedHeader: string, what: string): never {
  const header = parseCanonicalJson(decodeBase64url(encodedHeader, `header of the ${what}`), `header of the ${what}`);
  if (header !== null && typeof header === 'object' && !Array.isArray(header) && header['alg'] !== 'EdDSA') {
    throw new BatonError('UNSUPPORTED_ALG', {
      message: `The header of the ${what} names alg ${JSON.stringify(header['alg'])}; Baton accepts only EdDSA (Ed25519).`,
    });
  }
  throw new BatonError('MALFORMED_JWS', {
    message: `The header of the ${what} must be exactly ${JWS_HEADER}.`,
  });
}

/** Signs a payload as a DRS compact JWS with an Ed25519 seed. */
export function signJws(payload: Record<string, unknown>, seed: Uint8Array): string {
  const signingInput = `${ENCODED_HEADER}.${encodeBase64url(utf8Encode(canonicalJson(payload)))}`;
  return `${signingInput}.${encodeBase64url(signEd25519(seed, utf8Encode(signingInput)))}`;
}

/**
 * Checks the signature of a decoded record against the did:key that issued
 * it. Throws WEAK_KEY / INVALID_DID for a bad key; returns false for a
 * signature that does not verify.
 */
export function signatureValid(decoded: DecodedJws, issuerDid: string): boolean {
  return verifyEd25519(publicKeyFromDidKey(issuerDid), decoded.signingInput, decoded.signature);
}
