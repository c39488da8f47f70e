/**
 * C2SP signed notes (c2sp.org/signed-note): text signed by one or more keys.
 *
 *   <text, ending in a newline>
 *   <blank line>
 *   — <key name> <base64(4-byte big-endian key ID || signature)>
 *   ... one line per signature
 *
 * The text is separated from the signatures by the LAST blank line, so the
 * text may itself contain blank lines. Keys are identified by the pair
 * (name, key ID); the key ID is SHA-256(name || "\n" || type || public key)
 * truncated to 4 bytes. Baton uses two signature types, both Ed25519 under
 * the project's one verification rule (ed25519.ts): 0x01 signs the note text
 * itself, 0x04 is a timestamped witness cosignature (cosignature.ts).
 *
 * Opening a note against trusted keys (openNote), per the spec:
 *  - signatures from unknown keys are ignored, even if they share the name
 *    or the key ID (but not both) with a trusted key;
 *  - a signature from a trusted key that fails rejects the whole note;
 *  - a note with no valid signature from a trusted key is rejected.
 * Baton adds one rule: a trusted key may sign a note only once. A second
 * line for the same key is refused, so one key can never be counted twice
 * (e.g. towards a witness quorum).
 *
 * Pure module: no I/O, no clock.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { checkPublicKey, ed25519Signer, publicKeyFromSeed, verifyEd25519 } from './ed25519.js';
import { check, concatBytes, decodeBase64, encodeBase64, utf8 } from './tlog-input.js';

/** Signature type 0x01: Ed25519 over the note text. */
export const NOTE_ED25519 = 0x01;
/** Signature type 0x04: timestamped Ed25519 cosignature (c2sp.org/tlog-cosignature). */
export const COSIGNATURE_V1 = 0x04;
export type SignatureType = typeof NOTE_ED25519 | typeof COSIGNATURE_V1;

/**
 * Limits on what openNote reads. The spec requires accepting at least 16
 * signatures; a note that needs more than 100, or more than 256 KiB, is
 * refused before any signature is checked.
 */
export const MAX_NOTE_SIGNATURES = 100;
export const MAX_NOTE_BYTES = 256 * 1024;

const ED25519_SIGNATURE_BYTES = 64;
const KEY_ID_BYTES = 4;
const SIGNATURE_PREFIX = '\u2014 ';

/** A trusted public key, as a verifier holds it. */
export interface VerifierKey {
  readonly name: string;
  /** uint32: SHA-256(name || "\n" || type || publicKey)[:4], big-endian. */
  readonly keyId: number;
  readonly type: SignatureType;
  /** 32-byte Ed25519 public key. */
  readonly publicKey: Uint8Array;
}

/** One signature line, parsed but not verified. */
export interface NoteSignature {
  readonly name: string;
  readonly keyId: number;
  /** The bytes after the key ID: the signature as its type defines it. */
  readonly signature: Uint8Array;
}

export interface Note {
  /** The signed text, including its final newline. */
  readonly text: string;
  readonly signatures: readonly NoteSignature[];
}

/** Checks signatures of one key over note texts. */
export interface NoteVerifier {
  readonly key: VerifierKey;
  verify(text: Uint8Array, signature: Uint8Array): boolean;
}

/** Produces signatures of one key over note texts. */
export interface NoteSigner {
  readonly key: VerifierKey;
  sign(text: Uint8Array): Uint8Array;
}

export interface VerifiedNote {
  readonly text: string;
  /** One entry per trusted key that signed, in note order. */
  readonly verified: readonly { readonly key: VerifierKey; readonly signature: Uint8Array }[];
  /** Signatures from keys the caller does not trust, each once. */
  readonly unverified: readonly NoteSignature[];
}

// ---------------------------------------------------------------------------
// Names, key IDs, verifier keys.

/** Unicode spaces (plus NEL, which Go's unicode.IsSpace also counts) and '+'. */
const NAME_FORBIDDEN = /[\s\u0085+]/u;
/** ASCII control characters other than newline. */
const CONTROL = /[\x00-\x09\x0b-\x1f]/;
/** A UTF-16 surrogate not part of a pair: a string that is not valid UTF-8. */
const LONE_SURROGATE = /\p{Cs}/u;

function isValidKeyName(name: string): boolean {
  return name.length > 0 && !NAME_FORBIDDEN.test(name) && !CONTROL.test(name) && !LONE_SURROGATE.test(name);
}

function checkKeyName(name: unknown, code: 'MALFORMED_NOTE' | 'INVALID_VERIFIER_KEY'): asserts name is string {
  check(
    typeof name === 'string' && isValidKeyName(name),
    code,
    'A key name must be non-empty and contain no spaces, no "+" and no control characters.',
    {
      name,
    },
  );
}

/** SHA-256(name || 0x0A || type || publicKey)[:4] as a big-endian uint32. */
export function keyIdOf(name: string, type: SignatureType, publicKey: Uint8Array): number {
  const digest = sha256(concatBytes(utf8(name), Uint8Array.of(0x0a, type), publicKey));
  return new DataView(digest.buffer, digest.byteOffset, KEY_ID_BYTES).getUint32(0);
}

/** A verifier key for (name, type, publicKey); refuses bad names, types and weak keys. */
export function verifierKey(name: string, type: number, publicKey: Uint8Array): VerifierKey {
  checkKeyName(name, 'INVALID_VERIFIER_KEY');
  check(
    type === NOTE_ED25519 || type === COSIGNATURE_V1,
    'INVALID_VERIFIER_KEY',
    `Signature type 0x${type.toString(16).padStart(2, '0')} is not one Baton verifies (0x01 or 0x04).`,
    {
      type,
    },
  );
  const keyCheck = checkPublicKey(publicKey);
  check(keyCheck === 'ok', 'INVALID_VERIFIER_KEY', `The public key of ${name} is not a strong Ed25519 key (${keyCheck}).`, {
    name,
    reason: keyCheck,
  });
  return { name, keyId: keyIdOf(name, type, publicKey), type, publicKey: Uint8Array.from(publicKey) };
}

function hex32(n: number): string {
  return n.toString(16).padStart(8, '0');
}

/** `<name>+<hex key ID>+<base64(type || public key)>` */
export function formatVerifierKey(key: VerifierKey): string {
  return `${key.name}+${hex32(key.keyId)}+${encodeBase64(concatBytes(Uint8Array.of(key.type), key.publicKey))}`;
}

/** Parses a vkey string; the key ID must be the one derived from its name, type and key. */
export function parseVerifierKey(vkey: string): VerifierKey {
  // Names never contain '+', but base64 may: split at the first two only.
  const first = typeof vkey === 'string' ? vkey.indexOf('+') : -1;
  const second = first < 0 ? -1 : vkey.indexOf('+', first + 1);
  check(second > 0, 'INVALID_VERIFIER_KEY', 'A verifier key has three "+"-separated parts: name, key ID, key.');
  const [name, idHex, encoded] = [vkey.slice(0, first), vkey.slice(first + 1, second), vkey.slice(second + 1)];
  check(/^[0-9a-f]{8}$/.test(idHex), 'INVALID_VERIFIER_KEY', 'The key ID of a verifier key is 8 lowercase hex digits.', { key_id: idHex });
  const material = decodeBase64(encoded);
  check(
    material !== undefined && material.length === 33,
    'INVALID_VERIFIER_KEY',
    'The key of a verifier key is canonical base64 of 1 type byte and a 32-byte Ed25519 key.',
  );
  const key = verifierKey(name, material[0]!, material.subarray(1));
  check(
    hex32(key.keyId) === idHex,
    'INVALID_VERIFIER_KEY',
    `The key ID ${idHex} is not the one derived from the name, type and key (${hex32(key.keyId)}).`,
    {
      key_id: idHex,
      expected: hex32(key.keyId),
    },
  );
  return key;
}

// ---------------------------------------------------------------------------
// Parse and format.

function malformed(ok: boolean, message: string, details?: Record<string, unknown>): asserts ok {
  check(ok, 'MALFORMED_NOTE', message, details);
}

function checkText(text: unknown, what: string): asserts text is string {
  malformed(typeof text === 'string' && text.length <= MAX_NOTE_BYTES, `The ${what} is not a string of at most ${MAX_NOTE_BYTES} bytes.`);
  malformed(!LONE_SURROGATE.test(text), `The ${what} is not valid UTF-8.`);
  const control = CONTROL.exec(text);
  malformed(control === null, `The ${what} contains a control character other than newline.`, { position: control?.index });
}

function parseSignatureLine(line: string, lineNumber: number): NoteSignature {
  malformed(line.startsWith(SIGNATURE_PREFIX), `Signature line ${lineNumber} does not start with an em dash and a space.`, {
    line: lineNumber,
  });
  const rest = line.slice(SIGNATURE_PREFIX.length);
  const space = rest.indexOf(' ');
  const name = space < 0 ? rest : rest.slice(0, space);
  malformed(space > 0 && isValidKeyName(name), `Signature line ${lineNumber} has no valid key name.`, { line: lineNumber });
  const bytes = decodeBase64(rest.slice(space + 1));
  malformed(
    bytes !== undefined && bytes.length > KEY_ID_BYTES,
    `Signature line ${lineNumber} does not end in canonical base64 of a key ID and a signature.`,
    {
      line: lineNumber,
    },
  );
  return {
    name,
    keyId: new DataView(bytes.buffer, bytes.byteOffset, KEY_ID_BYTES).getUint32(0),
    signature: bytes.slice(KEY_ID_BYTES),
  };
}

/** Splits a signed note into its text and signature lines; checks syntax and limits only. */
export function parseNote(message: string): Note {
  checkText(message, 'signed note');
  malformed(utf8(message).length <= MAX_NOTE_BYTES, `A signed note is at most ${MAX_NOTE_BYTES} bytes.`);
  const split = message.lastIndexOf('\n\n');
  malformed(split >= 0, 'A signed note has a blank line between its text and its signatures.');
  const block = message.slice(split + 2);
  malformed(block.length > 0 && block.endsWith('\n'), 'A signed note has at least one signature line, and every line ends in a newline.');
  const lines = block.slice(0, -1).split('\n');
  malformed(lines.length <= MAX_NOTE_SIGNATURES, `A signed note carries at most ${MAX_NOTE_SIGNATURES} signatures.`, {
    signatures: lines.length,
  });
  return { text: message.slice(0, split + 1), signatures: lines.map((line, i) => parseSignatureLine(line, i + 1)) };
}

function formatSignatureLine(s: NoteSignature): string {
  const id = new Uint8Array(KEY_ID_BYTES);
  new DataView(id.buffer).setUint32(0, s.keyId);
  return `${SIGNATURE_PREFIX}${s.name} ${encodeBase64(concatBytes(id, s.signature))}\n`;
}

/** Formats a note; refuses anything parseNote would refuse, so parse(format(n)) is n. */
export function formatNote(note: Note): string {
  checkText(note.text, 'note text');
  malformed(note.text.endsWith('\n'), 'A note text ends in a newline.');
  for (const s of note.signatures) {
    checkKeyName(s.name, 'MALFORMED_NOTE');
    malformed(
      Number.isInteger(s.keyId) && s.keyId >= 0 && s.keyId <= 0xffffffff && s.signature.length > 0,
      `The signature of ${s.name} is malformed.`,
    );
  }
  const message = note.text + '\n' + note.signatures.map(formatSignatureLine).join('');
  parseNote(message);
  return message;
}

// ---------------------------------------------------------------------------
// Sign and verify.

/** A signer for signature type 0x01 (Ed25519 over the note text). */
export function ed25519NoteSigner(name: string, seed: Uint8Array): NoteSigner {
  const key = verifierKey(name, NOTE_ED25519, publicKeyFromSeed(seed));
  const sign = ed25519Signer(seed);
  return { key, sign: (text) => sign(text) };
}

/** A verifier for a type 0x01 key: Ed25519 over the exact note text. */
export function ed25519NoteVerifier(key: VerifierKey): NoteVerifier {
  check(key.type === NOTE_ED25519, 'INVALID_VERIFIER_KEY', `${key.name} is not a note signing key (type 0x01).`, { name: key.name });
  return {
    key,
    verify: (text, signature) => signature.length === ED25519_SIGNATURE_BYTES && verifyEd25519(key.publicKey, text, signature),
  };
}

const sameKey = (a: { name: string; keyId: number }, b: { name: string; keyId: number }): boolean =>
  a.name === b.name && a.keyId === b.keyId;

/**
 * Adds the signatures of `signers` to a text, or to an already signed note
 * (a witness adding its cosignature). A signer's earlier signature, if any,
 * is replaced rather than repeated.
 */
export function signNote(textOrNote: string | Note, signers: readonly NoteSigner[]): string {
  const note = typeof textOrNote === 'string' ? { text: textOrNote, signatures: [] } : textOrNote;
  checkText(note.text, 'note text');
  const text = utf8(note.text);
  const fresh = signers.map((s) => ({ name: s.key.name, keyId: s.key.keyId, signature: s.sign(text) }));
  const kept = note.signatures.filter((old) => !fresh.some((s) => sameKey(s, old)));
  return formatNote({ text: note.text, signatures: [...kept, ...fresh] });
}

/**
 * Verifies a signed note against trusted keys (rules in the module comment).
 * Throws MALFORMED_NOTE for bad syntax or a key that signed twice,
 * NOTE_NOT_VERIFIED when a trusted signature fails or none verifies, and
 * INVALID_VERIFIER_KEY when two trusted keys share a name and key ID.
 */
export function openNote(message: string, verifiers: readonly NoteVerifier[]): VerifiedNote {
  verifiers.forEach((v, i) =>
    check(
      !verifiers.slice(0, i).some((w) => sameKey(w.key, v.key)),
      'INVALID_VERIFIER_KEY',
      `Two trusted keys are both named ${v.key.name} with key ID ${hex32(v.key.keyId)}.`,
      {
        name: v.key.name,
      },
    ),
  );
  const note = parseNote(message);
  const text = utf8(note.text);
  const verified: { key: VerifierKey; signature: Uint8Array }[] = [];
  const unverified: NoteSignature[] = [];
  for (const sig of note.signatures) {
    const verifier = verifiers.find((v) => sameKey(v.key, sig));
    if (verifier === undefined) {
      if (!unverified.some((u) => sameKey(u, sig) && Buffer.compare(u.signature, sig.signature) === 0)) unverified.push(sig);
      continue;
    }
    malformed(!verified.some((v) => sameKey(v.key, sig)), `The key ${sig.name}+${hex32(sig.keyId)} signed the note more than once.`, {
      name: sig.name,
      reason: 'duplicate-signature',
    });
    check(
      verifier.verify(text, sig.signature),
      'NOTE_NOT_VERIFIED',
      `The signature of trusted key ${sig.name}+${hex32(sig.keyId)} does not verify.`,
      {
        name: sig.name,
      },
    );
    verified.push({ key: verifier.key, signature: sig.signature });
  }
  check(verified.length > 0, 'NOTE_NOT_VERIFIED', 'No trusted key signed the note.', { signers: note.signatures.map((s) => s.name) });
  return { text: note.text, verified, unverified };
}
