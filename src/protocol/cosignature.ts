/**
 * C2SP tlog-cosignature, Ed25519 flavour (signature type 0x04): a witness's
 * timestamped statement that, as of that time, the checkpoint is the largest
 * consistent tree head it has seen for the log.
 *
 *   note signature bytes = timestamp (u64, big-endian) || Ed25519 signature
 *   signed message       = "cosignature/v1\n" || "time <timestamp>\n" || checkpoint text
 *   key ID               = SHA-256(name || "\n" || 0x04 || public key)[:4]
 *
 * The message does not commit to the witness's name, so one public key
 * listed under two names would let one signature count twice: quorums here
 * count distinct public keys, never lines or names.
 *
 * Pure module: no I/O, no clock (callers pass `now`, in Unix seconds).
 */
import { parseCheckpoint } from './checkpoint.js';
import { ed25519Signer, publicKeyFromSeed, verifyEd25519 } from './ed25519.js';
import { COSIGNATURE_V1, verifierKey, type NoteSigner, type NoteVerifier, type VerifiedNote, type VerifierKey } from './note.js';
import { check, concatBytes, isSafeUint, utf8 } from './tlog-input.js';

const TIMESTAMP_BYTES = 8;
const COSIGNATURE_BYTES = TIMESTAMP_BYTES + 64;

/** Cosignatures dated further in the future than this (seconds) do not count. */
export const MAX_COSIGNATURE_CLOCK_SKEW = 60;

/**
 * Longest witness name (UTF-8 bytes) a log takes a cosignature from. The signed-note format sets no
 * limit, but every cosignature line carries its witness's name, and a served note must stay within
 * the 256 KiB every client reads: two lines with 130 KB names each made one unreadable.
 */
export const MAX_WITNESS_NAME_BYTES = 256;

/** Characters that print as nothing or reorder text (format, default-ignorable, separators): a name is read by people. */
const INVISIBLE_IN_NAME = /[\p{Cf}\p{Default_Ignorable_Code_Point}\u2028\u2029]/u;

/**
 * Why a log would not serve a witness name (too long, or printing as another), or undefined if it
 * would. Stored cosignatures are served under this rule; new ones meet checkWitnessName's.
 */
export function witnessNameProblem(name: string): string | undefined {
  const bytes = utf8(name).length;
  if (bytes > MAX_WITNESS_NAME_BYTES) return `A witness name is at most ${MAX_WITNESS_NAME_BYTES} bytes of UTF-8 (this one has ${bytes}).`;
  if (INVISIBLE_IN_NAME.test(name))
    return 'A witness name may not hold invisible or bidirectional formatting characters (they would make it read as another name).';
  return undefined;
}

/**
 * Throws INVALID_VERIFIER_KEY unless a witness name is one a log takes from now on: served
 * (witnessNameProblem), printable ASCII, and without `%`. Witnesses go by ASCII host and path names;
 * a letter of another script (a Cyrillic о in lоcalhost/...) reads as a name it is not. A
 * percent-escape is the same trap spelt in ASCII: `%D0%BE` is that о, `%E2%80%8B` a zero-width
 * space, `%2E` a dot, and escapes nest (`%252E`); a host name needs none, so none is taken (checking
 * what they decode to instead would leave the printed name and the name it stands for apart).
 * Cosignatures stored before these rules keep being served, unless their names read as the log's.
 */
export function checkWitnessName(name: string): void {
  const problem = witnessNameProblem(name);
  check(problem === undefined, 'INVALID_VERIFIER_KEY', problem ?? '');
  const other = /[^\x21-\x7e]/u.exec(name);
  if (other !== null) {
    const codePoint = other[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0');
    check(
      false,
      'INVALID_VERIFIER_KEY',
      `A witness name is printable ASCII, as the host and path names witnesses go by are; this one holds U+${codePoint}, which could make it read as another name.`,
    );
  }
  check(
    !name.includes('%'),
    'INVALID_VERIFIER_KEY',
    'A witness name holds no `%`: a percent-escape (`%2E` for `.`, `%E2%80%8B` for a zero-width space) stands for other characters than it prints, so the name could read as another. Write the host and path name as it is.',
  );
}

export interface Cosignature {
  readonly key: VerifierKey;
  /**
   * Unix seconds at which the witness cosigned: exact up to 2^53 - 1; above it (the u64 goes on to
   * 2^64 - 1) a number past every real clock, so such a cosignature is dated in the future wherever
   * times are compared, and counts for nothing.
   */
  readonly timestamp: number;
}

/** The exact bytes a cosignature/v1 signature covers: header, time line, checkpoint text. */
export function cosignedMessage(timestamp: number | bigint, checkpointText: Uint8Array): Uint8Array {
  return concatBytes(utf8(`cosignature/v1\ntime ${timestamp}\n`), checkpointText);
}

/**
 * Reads the u64 timestamp, whole: the signature covers its exact decimal, so one dated past 2^53
 * still verifies as the witness's (reading it as unverifiable refused the whole note, the log's own
 * signature with it, and told a witness its signature was bad where only its date was).
 */
function timestampOf(signature: Uint8Array): bigint | undefined {
  if (signature.length !== COSIGNATURE_BYTES) return undefined;
  return new DataView(signature.buffer, signature.byteOffset, TIMESTAMP_BYTES).getBigUint64(0);
}

/** The largest timestamp C2SP tlog-cosignature allows (it MUST NOT exceed 2^63 - 1). */
export const MAX_COSIGNATURE_TIMESTAMP = 2n ** 63n - 1n;

/** A witness signer that cosigns at `timestamp`; it refuses texts that are not checkpoints. */
export function cosignatureSigner(name: string, seed: Uint8Array, timestamp: number): NoteSigner {
  check(isSafeUint(timestamp), 'INVALID_REQUEST', 'A cosignature timestamp is a non-negative safe integer of Unix seconds.', { timestamp });
  const key = verifierKey(name, COSIGNATURE_V1, publicKeyFromSeed(seed));
  const sign = ed25519Signer(seed);
  const time = new Uint8Array(TIMESTAMP_BYTES);
  new DataView(time.buffer).setBigUint64(0, BigInt(timestamp));
  return {
    key,
    sign: (text) => {
      parseCheckpoint(new TextDecoder('utf-8', { fatal: true }).decode(text));
      return concatBytes(time, sign(cosignedMessage(timestamp, text)));
    },
  };
}

/** A note verifier for a type 0x04 witness key. */
export function cosignatureVerifier(key: VerifierKey): NoteVerifier {
  check(key.type === COSIGNATURE_V1, 'INVALID_VERIFIER_KEY', `${key.name} is not a cosignature key (type 0x04).`, { name: key.name });
  return {
    key,
    verify: (text, signature) => {
      const timestamp = timestampOf(signature);
      if (timestamp === undefined) return false;
      return verifyEd25519(key.publicKey, cosignedMessage(timestamp, text), signature.subarray(TIMESTAMP_BYTES));
    },
  };
}

/**
 * The cosignatures among a note's verified signatures. One dated past 2^63 - 1, which C2SP forbids,
 * is no cosignature: it is left out here, whatever clock it is compared with later.
 */
export function cosignaturesOf(note: VerifiedNote): Cosignature[] {
  return note.verified.flatMap(({ key, signature }) => {
    const timestamp = key.type === COSIGNATURE_V1 ? timestampOf(signature) : undefined;
    return timestamp === undefined || timestamp > MAX_COSIGNATURE_TIMESTAMP ? [] : [{ key, timestamp: Number(timestamp) }];
  });
}

const keyBytes = (k: VerifierKey): string => Buffer.from(k.publicKey).toString('hex');

/**
 * Policy: at least `required` of `witnesses` cosigned (already verified
 * signatures, see openNote). Counts distinct public keys; a cosignature dated
 * more than MAX_COSIGNATURE_CLOCK_SKEW seconds after `now` does not count.
 * Returns the counted cosignatures, or throws COSIGNATURES_INSUFFICIENT.
 */
export function requireCosignatures(
  cosignatures: readonly Cosignature[],
  witnesses: readonly VerifierKey[],
  required: number,
  now: number,
): Cosignature[] {
  check(isSafeUint(now), 'INVALID_REQUEST', 'now is a non-negative safe integer of Unix seconds.', { now });
  check(
    isSafeUint(required) && required <= new Set(witnesses.map(keyBytes)).size,
    'INVALID_REQUEST',
    `A quorum of ${required} cannot be met by ${witnesses.length} witness keys.`,
    { required, witnesses: witnesses.length },
  );
  const trusted = new Set(witnesses.filter((w) => w.type === COSIGNATURE_V1).map(keyBytes));
  const counted = new Map<string, Cosignature>();
  for (const c of cosignatures) {
    const id = keyBytes(c.key);
    if (trusted.has(id) && c.timestamp <= now + MAX_COSIGNATURE_CLOCK_SKEW && !counted.has(id)) counted.set(id, c);
  }
  check(
    counted.size >= required,
    'COSIGNATURES_INSUFFICIENT',
    `${counted.size} of the required ${required} witnesses cosigned this checkpoint.`,
    {
      required,
      cosigned: [...counted.values()].map((c) => c.key.name),
    },
  );
  return [...counted.values()];
}
