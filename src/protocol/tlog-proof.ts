/**
 * Signed checkpoints under a log policy, and C2SP tlog-proof bundles
 * (c2sp.org/tlog-proof): an offline-verifiable proof that one entry is in
 * the log.
 *
 *   c2sp.org/tlog-proof@v1
 *   [extra <base64 opaque data>]
 *   index <decimal>
 *   <base64 proof hash>        zero or more, leaf's sibling first
 *   <empty line>
 *   <the signed checkpoint, verbatim>
 *
 * Verifying a bundle (the spec's steps, verifyTlogProof):
 *   1. the caller computes the leaf hash (application specific);
 *   2. the checkpoint's origin is the expected one and a trusted log key
 *      signed it (openCheckpoint);
 *   3. the cosignatures of trusted witnesses meet the policy's quorum;
 *   4. the inclusion proof binds the leaf hash at the index to the
 *      checkpoint's root.
 * The extra data is not authenticated and is returned as is.
 *
 * Pure module: no I/O, no clock (callers pass `now`, in Unix seconds).
 */
import { parseCheckpoint, type Checkpoint } from './checkpoint.js';
import { cosignaturesOf, cosignatureVerifier, requireCosignatures, type Cosignature } from './cosignature.js';
import { HASH_SIZE, MAX_PROOF_LENGTH, verifyInclusion, type Hash } from './merkle.js';
import { ed25519NoteVerifier, MAX_NOTE_BYTES, openNote, type VerifierKey } from './note.js';
import { check, decodeBase64, encodeBase64, isSafeUint, parseDecimal } from './tlog-input.js';

/** What a verifier trusts about one log. */
export interface LogPolicy {
  /** The checkpoint origin line the log must use. */
  readonly origin: string;
  /** The log's note keys (type 0x01); any one of them must have signed. */
  readonly logKeys: readonly VerifierKey[];
  /** Witness cosignature keys (type 0x04). */
  readonly witnesses?: readonly VerifierKey[];
  /** How many distinct witnesses must have cosigned; 0 when absent. */
  readonly requiredCosignatures?: number;
}

/** A checkpoint whose log signature (and witness quorum) has been verified. */
export interface SignedCheckpoint {
  readonly checkpoint: Checkpoint;
  /** The signed note exactly as received: evidence a third party can re-check. */
  readonly note: string;
  readonly logKey: VerifierKey;
  /** Every valid cosignature from a trusted witness. */
  readonly cosignatures: readonly Cosignature[];
}

const publicKeyHex = (k: VerifierKey): string => Buffer.from(k.publicKey).toString('hex');

/**
 * Opens a signed checkpoint under a log policy. Throws NOTE_NOT_VERIFIED
 * (no valid log signature, another origin, or a failing trusted signature),
 * MALFORMED_NOTE / MALFORMED_CHECKPOINT, or COSIGNATURES_INSUFFICIENT.
 */
export function openCheckpoint(note: string, policy: LogPolicy, now: number): SignedCheckpoint {
  const witnesses = policy.witnesses ?? [];
  const logKeyBytes = new Set(policy.logKeys.map(publicKeyHex));
  check(
    !witnesses.some((w) => logKeyBytes.has(publicKeyHex(w))),
    'INVALID_VERIFIER_KEY',
    'A witness key is also a log key: the log could cosign its own checkpoints.',
  );
  const verified = openNote(note, [...policy.logKeys.map(ed25519NoteVerifier), ...witnesses.map(cosignatureVerifier)]);
  const byLog = verified.verified.find((v) => policy.logKeys.includes(v.key));
  check(byLog !== undefined, 'NOTE_NOT_VERIFIED', `No key of the log ${policy.origin} signed the checkpoint.`, { origin: policy.origin });
  const checkpoint = parseCheckpoint(verified.text);
  check(
    checkpoint.origin === policy.origin,
    'NOTE_NOT_VERIFIED',
    `The checkpoint is for the log ${checkpoint.origin}, not ${policy.origin}.`,
    {
      origin: checkpoint.origin,
      expected: policy.origin,
    },
  );
  const cosignatures = cosignaturesOf(verified);
  requireCosignatures(cosignatures, witnesses, policy.requiredCosignatures ?? 0, now);
  return { checkpoint, note, logKey: byLog.key, cosignatures };
}

// ---------------------------------------------------------------------------
// The bundle.

export const TLOG_PROOF_HEADER = 'c2sp.org/tlog-proof@v1';
/** A bundle is a signed note plus at most this much around it. */
export const MAX_TLOG_PROOF_BYTES = MAX_NOTE_BYTES + 16 * 1024;

export interface TlogProof {
  readonly index: number;
  /** Inclusion proof, leaf's sibling first. */
  readonly proof: readonly Hash[];
  /** The signed checkpoint note, verbatim. */
  readonly checkpoint: string;
  /** Opaque, unauthenticated application data. */
  readonly extra?: Uint8Array | undefined;
}

function malformed(ok: boolean, message: string, details?: Record<string, unknown>): asserts ok {
  check(ok, 'MALFORMED_LOG_PROOF', message, details);
}

export function formatTlogProof(p: TlogProof): string {
  malformed(isSafeUint(p.index), 'The index is not a non-negative safe integer.', { index: p.index });
  malformed(
    p.proof.length <= MAX_PROOF_LENGTH && p.proof.every((h) => h.length === HASH_SIZE),
    'The inclusion proof is not a list of 32-byte hashes.',
  );
  malformed(p.extra === undefined || p.extra.length > 0, 'Extra data, when present, is not empty.');
  const extra = p.extra === undefined ? '' : `extra ${encodeBase64(p.extra)}\n`;
  const text = `${TLOG_PROOF_HEADER}\n${extra}index ${p.index}\n${p.proof.map((h) => encodeBase64(h) + '\n').join('')}\n${p.checkpoint}`;
  parseTlogProof(text);
  return text;
}

/** Parses a bundle's syntax; the checkpoint is returned unverified. */
export function parseTlogProof(text: string): TlogProof {
  malformed(
    typeof text === 'string' && text.length <= MAX_TLOG_PROOF_BYTES,
    `A tlog-proof is a string of at most ${MAX_TLOG_PROOF_BYTES} characters.`,
  );
  let rest = text;
  let lineNumber = 0;
  const nextLine = (): string => {
    const end = rest.indexOf('\n');
    malformed(end >= 0, 'The tlog-proof ends before its checkpoint.');
    const line = rest.slice(0, end);
    rest = rest.slice(end + 1);
    lineNumber++;
    // No line before the checkpoint may hold a CR, so such a line is refused anyway: say why.
    malformed(
      !line.endsWith('\r'),
      `Line ${lineNumber} of the tlog-proof ends in CR LF: its line endings must be LF alone (was it saved with Windows line endings?).`,
    );
    return line;
  };
  malformed(nextLine() === TLOG_PROOF_HEADER, `The tlog-proof does not start with the line ${TLOG_PROOF_HEADER}.`);
  let line = nextLine();
  let extra: Uint8Array | undefined;
  if (line.startsWith('extra ')) {
    extra = decodeBase64(line.slice('extra '.length));
    malformed(extra !== undefined && extra.length > 0, 'The extra line does not carry canonical, non-empty base64.');
    line = nextLine();
  }
  const index = line.startsWith('index ') ? parseDecimal(line.slice('index '.length)) : undefined;
  malformed(index !== undefined, 'The index line is not "index" and a decimal below 2^53 without leading zeros.');
  const proof: Hash[] = [];
  for (line = nextLine(); line !== ''; line = nextLine()) {
    const hash = decodeBase64(line);
    malformed(hash !== undefined && hash.length === HASH_SIZE, `Proof line ${proof.length + 1} is not canonical base64 of a 32-byte hash.`);
    proof.push(hash);
    malformed(proof.length <= MAX_PROOF_LENGTH, `An inclusion proof has at most ${MAX_PROOF_LENGTH} hashes.`);
  }
  malformed(rest.length > 0, 'The tlog-proof has no checkpoint.');
  return { index, proof, checkpoint: rest, extra };
}

export interface VerifiedTlogProof {
  readonly index: number;
  readonly checkpoint: SignedCheckpoint;
  /** Unauthenticated: never trust it implicitly. */
  readonly extra: Uint8Array | undefined;
}

/**
 * Verifies a bundle end to end for the entry whose leaf hash the caller
 * computed (steps in the module comment). Throws LOG_PROOF_INVALID when the
 * inclusion proof does not bind the leaf to the signed root.
 */
export function verifyTlogProof(text: string, leaf: Hash, policy: LogPolicy, now: number): VerifiedTlogProof {
  const bundle = parseTlogProof(text);
  const checkpoint = openCheckpoint(bundle.checkpoint, policy, now);
  const { size, rootHash } = checkpoint.checkpoint;
  check(
    verifyInclusion(bundle.index, size, leaf, bundle.proof, rootHash),
    'LOG_PROOF_INVALID',
    `The entry is not proven to be at index ${bundle.index} of the tree of size ${size}.`,
    {
      index: bundle.index,
      size,
    },
  );
  return { index: bundle.index, checkpoint, extra: bundle.extra };
}
