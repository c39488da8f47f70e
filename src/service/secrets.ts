/**
 * Secrets at rest: Ed25519 seeds (the service signing key, custodial root
 * keys) are stored sealed with the master key from BATON_MASTER_KEY.
 *
 * Format: 'v1.' + base64url(nonce(12) | ciphertext | tag(16)), AES-256-GCM
 * with a fresh random 96-bit nonce per seal. The AAD binds the value to the
 * row it belongs to ('service-key:<kid>', 'custodial:<tenant>'), so a sealed
 * seed copied into another row (e.g. one tenant's custodial key pasted over
 * another's) does not open there. Any failure to open (wrong master key,
 * wrong context, a changed byte, an unknown version) is one refusal: the
 * service cannot tell these apart, and must not sign with a key it cannot
 * trust, so it stops with an error that says what to check.
 *
 * Nothing here logs, and errors never carry the sealed value or plaintext.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { decodeBase64url, encodeBase64url } from '../protocol/base64url.js';
import { BatonError } from '../protocol/errors.js';

const VERSION = 'v1';
const PREFIX = `${VERSION}.`;
const KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
/** Domain separation: the AAD names the format version as well as the row. */
const AAD_LABEL = 'baton-sealed-secret-v1\u0000';
/** Generous bound on a sealed value (seeds are 32 bytes); refuses garbage before decoding it. */
const MAX_SEALED_LENGTH = 4096;

function assertMasterKey(masterKey: Uint8Array): void {
  if (!(masterKey instanceof Uint8Array) || masterKey.length !== KEY_BYTES) {
    throw new BatonError('INTERNAL', {
      message: `The master key must be exactly ${KEY_BYTES} bytes.`,
      suggestion: 'Set BATON_MASTER_KEY to 32 random bytes, as 64 hex digits or base64, and start Baton again.',
    });
  }
}

function assertContext(context: string): void {
  if (typeof context !== 'string' || context.length === 0) {
    throw new BatonError('INTERNAL', { message: 'A sealed secret needs a non-empty context naming the row it belongs to.' });
  }
}

function aadOf(context: string): Buffer {
  return Buffer.from(AAD_LABEL + context, 'utf8');
}

/** AES-256-GCM seal of `plain`, bound to `context`. */
export function sealSecret(plain: Uint8Array, masterKey: Uint8Array, context: string): string {
  assertMasterKey(masterKey);
  assertContext(context);
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv('aes-256-gcm', masterKey, nonce, { authTagLength: TAG_BYTES });
  cipher.setAAD(aadOf(context));
  const body = Buffer.concat([cipher.update(plain), cipher.final()]);
  const tag = cipher.getAuthTag();
  const sealed = Buffer.concat([nonce, body, tag]);
  body.fill(0);
  return PREFIX + encodeBase64url(sealed);
}

function cannotOpen(context: string, reason: string): BatonError {
  return new BatonError('INTERNAL', {
    message:
      `A secret stored by Baton (${context}) cannot be opened: ${reason}. ` +
      'Either BATON_MASTER_KEY does not match the master key that sealed the data, or the stored value was altered.',
    suggestion:
      'Start Baton with the same BATON_MASTER_KEY that was set when this database was first used. ' +
      'If that key is lost, the sealed keys cannot be recovered: restore the key, or rotate the service key and re-create custodial keys on a new database.',
    details: { context, reason },
  });
}

/** Opens a value sealed by sealSecret with the same master key and context; throws INTERNAL otherwise. */
export function openSecret(sealed: string, masterKey: Uint8Array, context: string): Uint8Array {
  assertMasterKey(masterKey);
  assertContext(context);
  if (typeof sealed !== 'string' || !sealed.startsWith(PREFIX)) {
    throw cannotOpen(context, 'the stored value is not in a sealed format this version of Baton reads');
  }
  if (sealed.length > MAX_SEALED_LENGTH) throw cannotOpen(context, 'the stored value is far too long');
  let bytes: Uint8Array;
  try {
    bytes = decodeBase64url(sealed.slice(PREFIX.length), 'sealed secret');
  } catch {
    throw cannotOpen(context, 'the stored value is not valid base64url');
  }
  if (bytes.length < NONCE_BYTES + TAG_BYTES) throw cannotOpen(context, 'the stored value is too short');
  const nonce = bytes.subarray(0, NONCE_BYTES);
  const body = bytes.subarray(NONCE_BYTES, bytes.length - TAG_BYTES);
  const tag = bytes.subarray(bytes.length - TAG_BYTES);
  let plain: Buffer;
  try {
    const decipher = createDecipheriv('aes-256-gcm', masterKey, nonce, { authTagLength: TAG_BYTES });
    decipher.setAAD(aadOf(context));
    decipher.setAuthTag(tag);
    plain = Buffer.concat([decipher.update(body), decipher.final()]);
  } catch {
    throw cannotOpen(context, 'authentication failed');
  }
  const out = Uint8Array.from(plain);
  plain.fill(0);
  return out;
}
