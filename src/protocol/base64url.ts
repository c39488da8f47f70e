/**
 * Strict, canonical base64url (RFC 4648 section 5, unpadded) for JWS segments.
 *
 * Node's decoder is lenient: it skips characters outside the alphabet, mixes
 * in '+' and '/', stops at '=', and ignores non-zero trailing bits. Each
 * leniency lets many strings decode to the same bytes, so a record could be
 * re-encoded (and its hash, which is over the exact JWS string, changed)
 * without touching the signature. We therefore accept exactly one spelling
 * per byte string: the one encodeBase64url produces. Node's native codec
 * does the work; this module only insists on the round trip.
 *
 * Pure module: no I/O, no clock.
 */
import { BatonError } from './errors.js';

/** Sextet value of each ASCII code in the base64url alphabet, -1 elsewhere. */
const SEXTET: Int8Array = (() => {
  const t = new Int8Array(128).fill(-1);
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  for (let i = 0; i < alphabet.length; i++) t[alphabet.charCodeAt(i)] = i;
  return t;
})();

function sextet(code: number): number {
  return code < 128 ? (SEXTET[code] as number) : -1;
}

/** base64url without padding. Never throws. */
export function encodeBase64url(bytes: Uint8Array): string {
  // A Buffer view over the same memory: no copy.
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64url');
}

function malformed(what: string, detail: string, details: Record<string, unknown>): BatonError {
  return new BatonError('MALFORMED_JWS', {
    message: `${what} is not canonical unpadded base64url: ${detail}.`,
    details: { what, ...details },
  });
}

/**
 * Error path only: say precisely why s is not canonical. Called after the
 * round trip failed, so one of these always applies.
 */
function diagnose(s: string, what: string): BatonError {
  let i = 0;
  while (i < s.length && sextet(s.charCodeAt(i)) >= 0) i++;
  if (i < s.length) {
    const c = s.codePointAt(i) as number; // i < s.length
    if (c === 0x3d /* = */) return malformed(what, `padding '=' at position ${i} is not allowed`, { reason: 'padding', position: i });
    const shown = c >= 0x21 && c <= 0x7e ? `'${String.fromCharCode(c)}'` : `U+${c.toString(16).toUpperCase().padStart(4, '0')}`;
    return malformed(what, `character ${shown} at position ${i} is outside [A-Za-z0-9_-]`, { reason: 'alphabet', position: i });
  }
  return malformed(what, 'the unused bits of its last character are not zero', { reason: 'trailing-bits', position: s.length - 1 });
}

/**
 * Decode canonical unpadded base64url, or throw MALFORMED_JWS naming `what`.
 *
 * Accepted: only [A-Za-z0-9_-], no '=' padding, no whitespace, length % 4
 * never 1, and the unused low bits of the last character zero. The test is
 * the definition of canonical: re-encoding the decoded bytes must give back
 * the input exactly. Node's native codec does both directions, which is
 * several times faster here than checking the characters in JavaScript.
 * The empty string decodes to zero bytes; callers that need a non-empty
 * segment check the length themselves.
 *
 * The result is a plain Uint8Array over its own ArrayBuffer (not a slice of
 * Node's shared Buffer pool, which holds other requests' bytes), so even a
 * careless `.buffer` can never expose unrelated memory.
 */
export function decodeBase64url(s: string, what: string): Uint8Array {
  const len = s.length;
  const rem = len & 3;
  if (rem === 1) {
    throw malformed(what, `its length ${len} leaves a lone final character`, { reason: 'length', length: len });
  }
  // Exact size for canonical input: 2 trailing chars carry 1 byte, 3 carry 2.
  const n = (len >> 2) * 3 + (rem === 0 ? 0 : rem - 1);
  const out = new Uint8Array(n);
  const view = Buffer.from(out.buffer, 0, n); // writes land in `out`
  // Node's decoder is lenient (skips junk, takes '+' '/', stops at '=',
  // drops trailing bits), so whatever it made of s, s is canonical only if
  // it is exactly the encoding of those bytes.
  view.write(s, 'base64url');
  if (view.toString('base64url') !== s) throw diagnose(s, what);
  return out;
}
