/**
 * The service's own Ed25519 service-receipt signing key.
 *
 * One active key at a time (a partial unique index on service_keys enforces
 * it in the database), sealed at rest with the master key under the context
 * 'service-key:<kid>'. Retired keys keep their rows and stay published, so a
 * service receipt signed before a rotation still verifies afterwards.
 *
 * Service receipts are compact JWS with the header JCS({"alg":"EdDSA","kid":kid,
 * "typ":"JWT"}) and a JCS payload. verifyServiceReceipt checks one offline
 * against the published keys (GET /v1/keys or /.well-known/jwks.json).
 *
 * A running process signs with the key it loaded. After rotateServiceKey,
 * other processes keep signing with the now retired (still published and
 * verifiable) key until they restart; the returned signer uses the new key.
 */
import { decodeBase64url, encodeBase64url } from '../protocol/base64url.js';
import { didKeyFromPublicKey } from '../protocol/did-key.js';
import { ed25519Signer, generateSeed, publicKeyFromSeed } from '../protocol/ed25519.js';
import { BatonError } from '../protocol/errors.js';
import { canonicalJson, utf8Encode } from '../protocol/jcs.js';
import { ed25519NoteSigner, type NoteSigner } from '../protocol/note.js';
import type { Db } from '../store/db.js';
import { isUniqueViolation } from '../store/errors.js';
import type { ServiceKey } from '../store/schema/index.js';
import { activeServiceKey, insertServiceKey, serviceKeyByKid, listServiceKeys, retireActiveServiceKey } from '../store/service-keys.js';
import { serviceKid, serviceReceiptHeaderFor, type ServiceVerificationKey } from '../protocol/service-receipt.js';
import type { Logger } from './log.js';
import { openSecret, sealSecret } from './secrets.js';

export interface ServiceSigner {
  /** Key id published in /v1/keys and /.well-known/jwks.json. */
  readonly kid: string;
  /** did:key of the current signing key. */
  readonly did: string;
  /** Raw 32-byte Ed25519 public key (a copy; mutating it changes nothing). */
  readonly publicKey: Uint8Array;
  /** Compact JWS, header {"alg":"EdDSA","kid":kid,"typ":"JWT"} (JCS), payload JCS. */
  sign(payload: Record<string, unknown>): string;
  /** Signs C2SP notes (log checkpoints) with the same key, under the key name `name`. */
  noteSigner(name: string): NoteSigner;
}

export interface PublishedServiceKey extends ServiceVerificationKey {
  readonly did: string;
  /** base64url of the raw 32-byte public key. */
  readonly publicKeyB64: string;
  readonly status: 'current' | 'retired';
  readonly createdAt: Date;
  readonly retiredAt: Date | null;
}

const ACTIVE_KEY_INDEX = 'service_keys_one_active_uq';
const KEY_CONTEXT = (kid: string) => `service-key:${kid}`;
/** Attempts to settle on one active key when other nodes create or rotate concurrently. */
const MAX_LOAD_ATTEMPTS = 5;
/** Note signers kept per signing key (one per log name, i.e. per tenant); past this many they are made again. */
const MAX_NOTE_SIGNERS = 10_000;

function signerFromSeed(kid: string, seed: Uint8Array): ServiceSigner {
  const secret = Uint8Array.from(seed);
  const publicKey = publicKeyFromSeed(secret);
  const did = didKeyFromPublicKey(publicKey);
  const encodedHeader = serviceReceiptHeaderFor(kid);
  const signBytes = ed25519Signer(secret);
  const noteSigners = new Map<string, NoteSigner>();
  return Object.freeze({
    kid,
    did,
    get publicKey() {
      return publicKey.slice();
    },
    // A note text is newline-terminated and a JWS signing input has no newline,
    // so one key signing both can never produce a signature valid as the other.
    noteSigner: (name: string) => {
      // Every checkpoint of a log asks again: import the key once per log name.
      let signer = noteSigners.get(name);
      if (!signer) {
        if (noteSigners.size >= MAX_NOTE_SIGNERS) noteSigners.clear();
        signer = ed25519NoteSigner(name, secret);
        noteSigners.set(name, signer);
      }
      return signer;
    },
    sign(payload: Record<string, unknown>): string {
      const signingInput = `${encodedHeader}.${encodeBase64url(utf8Encode(canonicalJson(payload)))}`;
      return `${signingInput}.${encodeBase64url(signBytes(utf8Encode(signingInput)))}`;
    },
  });
}

function brokenKeyRow(kid: string, reason: string): BatonError {
  return new BatonError('INTERNAL', {
    message: `The stored service signing key ${kid} is inconsistent: ${reason}.`,
    suggestion: 'Restore service_keys from a backup, or rotate the service key; do not edit key rows by hand.',
    details: { kid, reason },
  });
}

/** Opens a stored key row and checks that its seed, public key and kid agree. */
function signerFromRow(row: ServiceKey, masterKey: Uint8Array): ServiceSigner {
  const seed = openSecret(row.encryptedSeed, masterKey, KEY_CONTEXT(row.kid));
  try {
    if (seed.length !== 32) throw brokenKeyRow(row.kid, 'the sealed seed is not 32 bytes');
    const publicKey = publicKeyFromSeed(seed);
    if (encodeBase64url(publicKey) !== row.publicKey)
      throw brokenKeyRow(row.kid, 'the sealed seed does not match the published public key');
    if (serviceKid(publicKey) !== row.kid) throw brokenKeyRow(row.kid, 'the kid is not derived from the public key');
    return signerFromSeed(row.kid, seed);
  } finally {
    seed.fill(0);
  }
}

/** A fresh key, sealed and ready to insert. */
function newKeyRow(masterKey: Uint8Array): { row: { kid: string; publicKey: string; encryptedSeed: string }; signer: ServiceSigner } {
  const seed = generateSeed();
  try {
    const publicKey = publicKeyFromSeed(seed);
    const kid = serviceKid(publicKey);
    const row = { kid, publicKey: encodeBase64url(publicKey), encryptedSeed: sealSecret(seed, masterKey, KEY_CONTEXT(kid)) };
    return { row, signer: signerFromSeed(kid, seed) };
  } finally {
    seed.fill(0);
  }
}

/**
 * Loads the active signing key (decrypting it with the master key), or
 * creates one on first start. Nodes starting together on one database
 * converge on one key: the loser of the insert race reads the winner's key.
 * Call with the store's Db, not inside a transaction (a unique violation
 * would abort it).
 */
export async function loadServiceSigner(db: Db, masterKey: Uint8Array, log: Logger): Promise<ServiceSigner> {
  for (let attempt = 0; attempt < MAX_LOAD_ATTEMPTS; attempt++) {
    const active = await activeServiceKey(db);
    if (active) {
      const signer = signerFromRow(active, masterKey);
      log.debug('service signing key loaded', { kid: signer.kid });
      return signer;
    }
    const fresh = newKeyRow(masterKey);
    try {
      await insertServiceKey(db, fresh.row);
    } catch (err) {
      if (isUniqueViolation(err)) continue; // another node created (or rotated) first: read theirs
      throw err;
    }
    log.info('service signing key created', { kid: fresh.signer.kid });
    return fresh.signer;
  }
  throw new BatonError('INTERNAL', {
    message: `Baton could not settle on one active service signing key after ${MAX_LOAD_ATTEMPTS} attempts.`,
    suggestion: 'Check that no process is rotating the service key in a loop, then start Baton again.',
  });
}

/**
 * The signer of the stored key `kid`, active or retired: another thread of
 * this process (the log integrator's) signs with the key the process loaded,
 * even if a rotation made another key active since.
 */
export async function loadServiceSignerByKid(db: Db, masterKey: Uint8Array, kid: string): Promise<ServiceSigner> {
  const row = await serviceKeyByKid(db, kid);
  if (!row) throw brokenKeyRow(kid, 'no stored key has this kid');
  return signerFromRow(row, masterKey);
}

/**
 * Retires the active key at `now` (unix seconds) and creates a new active
 * one, in one transaction. The retired key stays published. A concurrent
 * rotation makes one of the two fail with CONFLICT.
 */
export async function rotateServiceKey(db: Db, masterKey: Uint8Array, now: number): Promise<ServiceSigner> {
  const at = new Date(now * 1000);
  const fresh = newKeyRow(masterKey);
  try {
    await db.transaction(async (tx) => {
      await retireActiveServiceKey(tx, at);
      await insertServiceKey(tx, { ...fresh.row, createdAt: at });
    });
  } catch (err) {
    if (isUniqueViolation(err, ACTIVE_KEY_INDEX)) {
      throw new BatonError('CONFLICT', {
        message: 'Another rotation of the service signing key happened at the same time; this one was not applied.',
        suggestion: 'Read GET /v1/keys to see the current key; rotate again only if you still need to.',
      });
    }
    throw err;
  }
  return fresh.signer;
}

function keyRowError(kid: string): BatonError {
  return brokenKeyRow(kid, 'its public key is not a valid base64url Ed25519 key');
}

/** Every signing key ever used, current first: what /v1/keys and the JWKS publish. */
export async function publishedServiceKeys(db: Db): Promise<PublishedServiceKey[]> {
  const rows = await listServiceKeys(db);
  return rows.map((row) => {
    let publicKey: Uint8Array;
    let did: string;
    try {
      publicKey = decodeBase64url(row.publicKey, 'service public key');
      did = didKeyFromPublicKey(publicKey);
    } catch {
      throw keyRowError(row.kid);
    }
    if (publicKey.length !== 32) throw keyRowError(row.kid);
    return {
      kid: row.kid,
      did,
      publicKey,
      publicKeyB64: row.publicKey,
      status: row.retiredAt === null ? 'current' : 'retired',
      createdAt: row.createdAt,
      retiredAt: row.retiredAt,
    };
  });
}

// Offline verification is pure and lives in the protocol, so the SDK can use it without the store.
export { verifyServiceReceipt, type ServiceReceiptVerification, type ServiceVerificationKey } from '../protocol/service-receipt.js';
