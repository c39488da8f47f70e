/**
 * RFC 8785 (JCS) canonical JSON, written and read strictly.
 *
 * Every DRS header and payload is signed as the exact bytes of its JCS form,
 * so Baton accepts a document only when it already IS that form: re-serialising
 * what we parsed must give back the input byte for byte. That one comparison
 * rejects duplicate keys (parsers disagree on which one wins), whitespace,
 * unsorted keys, non-shortest number forms and needless escapes, and it means
 * the bytes that were signed are the bytes every other check looked at.
 *
 * Baton's profile adds one rule to RFC 8785: integers must be safe
 * (|n| <= 2^53-1). Beyond that a double no longer holds every integer, so a
 * verifier with 64-bit integers (Go, Rust) and one with doubles (JavaScript)
 * could read different values from the same signed bytes.
 *
 * Pure module: no I/O, no clock.
 */
import { BatonError, type ErrorCode } from './errors.js';

export type JsonValue = null | boolean | number | string | JsonValue[] | { [k: string]: JsonValue };

export interface StrictParseLimits {
  /** Deepest nesting of arrays/objects accepted; a bare scalar has depth 0. Default 32. */
  maxDepth?: number;
  /** Largest input accepted, in UTF-8 bytes. Default 256 KiB. */
  maxBytes?: number;
}

export const DEFAULT_MAX_DEPTH = 32;
export const DEFAULT_MAX_BYTES = 256 * 1024;

/**
 * Nesting bound for canonicalJson on in-memory values. It is not a protocol
 * limit (parseCanonicalJson enforces those); it keeps the recursive writer off
 * the end of the stack and turns a cyclic object into an error instead of a hang.
 */
const WRITE_MAX_DEPTH = 1000;

// Created once: both are stateless between non-streaming calls.
const encoder = new TextEncoder();
// ignoreBOM: true keeps a leading U+FEFF in the text so we can refuse it
// instead of having the decoder strip it silently.
const strictDecoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

// ---------------------------------------------------------------------------
// Writing

/**
 * What the writer is for; it decides which faults apply and which error codes
 * they map to. 'issue': canonicalJson (Baton profile, caller-built values);
 * 'rfc': canonicalJsonRfc8785 (any finite number); 'verify': values from
 * JSON.parse of untrusted input in parseCanonicalJson.
 */
type Mode = 'issue' | 'rfc' | 'verify';

type FaultKind = 'type' | 'non-finite' | 'unsafe-integer' | 'lone-surrogate' | 'nul' | 'proto-key' | 'too-deep';

/**
 * Internal fault carrying the JSON Pointer path, built while unwinding so the
 * success path pays nothing for it.
 */
class WriteFault {
  readonly path: string[] = [];
  constructor(
    readonly kind: FaultKind,
    readonly detail: string,
  ) {}
}

type StringWithWellFormed = string & { isWellFormed(): boolean };
const hasIsWellFormed = typeof (String.prototype as Partial<StringWithWellFormed>).isWellFormed === 'function';
const LONE_SURROGATE = /\p{Cs}/u; // with the u flag, a valid pair is one non-Cs code point

/** True when s has no unpaired UTF-16 surrogate (so it has a UTF-8 encoding). */
export function isWellFormedString(s: string): boolean {
  return hasIsWellFormed ? (s as StringWithWellFormed).isWellFormed() : !LONE_SURROGATE.test(s);
}

/**
 * RFC 8785 section 3.2.2.3: the ECMAScript Number-to-String algorithm, which
 * is exactly what String(n) does for finite n (and -0 becomes "0").
 * Throws INVALID_FIELD for NaN and the infinities, which JSON cannot carry.
 * No safe-integer rule here: this is the pure RFC number form.
 */
export function canonicalNumber(n: number): string {
  if (!Number.isFinite(n)) {
    throw new BatonError('INVALID_FIELD', {
      message: `${String(n)} cannot be written as JSON: only finite numbers are allowed.`,
      details: { reason: 'non-finite' },
    });
  }
  return String(n);
}

/**
 * Anything JSON.stringify would escape (quote, backslash, C0 controls) or a
 * surrogate unit. Strings without any take the fast path: quoting them is
 * plain concatenation, which matters because most of a DRS payload is DIDs
 * and other plain ASCII strings, and JSON.stringify per string is costly.
 */
const NEEDS_CARE = /["\\\u0000-\u001f\ud800-\udfff]/;

function writeString(s: string, mode: Mode): string {
  if (!NEEDS_CARE.test(s)) return '"' + s + '"';
  if (!isWellFormedString(s)) throw new WriteFault('lone-surrogate', 'string contains an unpaired UTF-16 surrogate');
  // U+0000 is valid JSON but no PostgreSQL text or jsonb can hold it, so a
  // record carrying one could be verified yet never stored or audited.
  if (mode !== 'rfc' && s.includes('\u0000')) throw new WriteFault('nul', 'string contains U+0000, which Baton does not accept');
  // JSON.stringify's string quoting is the escaping RFC 8785 section 3.2.2.2
  // prescribes (short escapes for \b \t \n \f \r \" \\, \u00xx lowercase for
  // other controls, everything else literal); with well-formed input it is exact.
  return JSON.stringify(s);
}

function writeNumber(n: number, mode: Mode): string {
  if (!Number.isFinite(n)) throw new WriteFault('non-finite', `${String(n)} is not a finite number`);
  if (mode !== 'rfc' && Number.isInteger(n) && !Number.isSafeInteger(n)) {
    // 1e300 and 6.02e23 are whole numbers too, which is why they land here.
    throw new WriteFault(
      'unsafe-integer',
      `number ${String(n)} is a whole number beyond ±(2^53-1) (written with an exponent or not), which JSON readers hold only approximately; send such a value as a string`,
    );
  }
  return String(n);
}

function writeValue(v: unknown, depth: number, maxDepth: number, mode: Mode): string {
  switch (typeof v) {
    case 'string':
      return writeString(v, mode);
    case 'number':
      return writeNumber(v, mode);
    case 'boolean':
      return v ? 'true' : 'false';
    case 'object':
      if (v === null) return 'null';
      if (depth >= maxDepth) throw new WriteFault('too-deep', `nesting is deeper than ${maxDepth} levels (or the value is cyclic)`);
      if (Array.isArray(v)) return writeArray(v, depth + 1, maxDepth, mode);
      return writeObject(v, depth + 1, maxDepth, mode);
    default:
      // undefined, function, bigint, symbol: JSON.stringify would drop, null
      // out or throw on these; a signed document must never depend on which.
      throw new WriteFault('type', `${typeof v} is not a JSON value`);
  }
}

function writeArray(a: readonly unknown[], depth: number, maxDepth: number, mode: Mode): string {
  let out = '[';
  let i = 0;
  // One try per container, not per element; the index is known when it throws.
  try {
    for (; i < a.length; i++) {
      if (i > 0) out += ',';
      // A hole in a sparse array reads as undefined and is refused as such.
      out += writeValue(a[i], depth, maxDepth, mode);
    }
  } catch (e) {
    if (e instanceof WriteFault) e.path.push(String(i));
    throw e;
  }
  return out + ']';
}

/**
 * Own enumerable string keys in RFC 8785 section 3.2.3 order: by UTF-16 code
 * units, which is how both `<` on strings and the comparator-less sort compare.
 * Canonical input is already in order, so check before paying for a sort.
 */
function sortedKeys(o: object): string[] {
  const keys = Object.keys(o);
  for (let i = 1; i < keys.length; i++) {
    if (!((keys[i - 1] as string) < (keys[i] as string))) return keys.sort();
  }
  return keys;
}

function writeObject(o: object, depth: number, maxDepth: number, mode: Mode): string {
  const proto: unknown = Object.getPrototypeOf(o);
  if (proto !== Object.prototype && proto !== null) {
    // Date, Map, Buffer, class instances...: their JSON form is not their
    // own properties (toJSON, or silently "{}"), so refuse rather than guess.
    const name = (o as { constructor?: { name?: unknown } }).constructor?.name;
    throw new WriteFault('type', `${typeof name === 'string' ? name : 'object'} is not a plain JSON object`);
  }
  // Symbol keys are not JSON and are not seen.
  const keys = sortedKeys(o);
  const rec = o as Record<string, unknown>;
  let out = '{';
  let k = '';
  try {
    for (let i = 0; i < keys.length; i++) {
      k = keys[i] as string; // i < keys.length
      // JSON.parse makes "__proto__" an own key, but JavaScript readers drop it (zod's record) or
      // take it as the prototype (Object.assign): the signed member would not be what is judged.
      if (k === '__proto__' && mode !== 'rfc') throw new WriteFault('proto-key', 'a key named "__proto__" is not accepted');
      if (i > 0) out += ',';
      out += writeString(k, mode);
      out += ':';
      out += writeValue(rec[k], depth, maxDepth, mode);
    }
  } catch (e) {
    if (e instanceof WriteFault) e.path.push(k);
    throw e;
  }
  return out + '}';
}

/** Longest JSON Pointer echoed in an error; it is a hint, not an address. */
const MAX_POINTER_CHARS = 200;

/**
 * RFC 6901 JSON Pointer from the segments collected leaf-first, cut short
 * (ending in '…') so a hostile key or a deep value cannot bloat the error.
 */
function pointer(reversed: readonly string[]): string {
  let p = '';
  for (let i = reversed.length - 1; i >= 0; i--) {
    p += '/' + (reversed[i] as string).replace(/~/g, '~0').replace(/\//g, '~1');
    if (p.length > MAX_POINTER_CHARS) return clipText(p, MAX_POINTER_CHARS);
  }
  return p;
}

function faultCode(kind: FaultKind, mode: Mode): ErrorCode {
  switch (kind) {
    case 'unsafe-integer':
      return 'NUMBER_OUT_OF_RANGE';
    case 'non-finite':
      // Only reachable from input text via overflow such as 1e400.
      return mode === 'verify' ? 'NUMBER_OUT_OF_RANGE' : 'INVALID_FIELD';
    case 'lone-surrogate':
      // In received text it is a document no UTF-8 signer could have meant;
      // in a caller's value it is a bad field.
      return mode === 'verify' ? 'NON_CANONICAL_JSON' : 'INVALID_FIELD';
    case 'nul':
    case 'proto-key':
    case 'type':
    case 'too-deep':
      return 'INVALID_FIELD';
  }
}

function write(value: unknown, maxDepth: number, mode: Mode, what: string): string {
  try {
    return writeValue(value, 0, maxDepth, mode);
  } catch (e) {
    if (!(e instanceof WriteFault)) throw e;
    const path = pointer(e.path);
    throw new BatonError(faultCode(e.kind, mode), {
      message: `${what}: ${e.detail} at ${path === '' ? 'the top level' : path}.`,
      details: { what, path, reason: e.kind },
    });
  }
}

/**
 * RFC 8785 canonical JSON of a caller-built value, under Baton's profile.
 *
 * Throws INVALID_FIELD for undefined, functions, bigint, symbols, NaN and
 * the infinities, unpaired surrogates in strings or keys, non-plain objects
 * (Date, Map, class instances) and nesting beyond 1000 levels or cycles;
 * NUMBER_OUT_OF_RANGE for an integer-valued number beyond ±(2^53-1).
 * Object properties whose value is undefined are refused, not dropped.
 */
export function canonicalJson(value: unknown): string {
  return write(value, WRITE_MAX_DEPTH, 'issue', 'value');
}

/**
 * Plain RFC 8785, without Baton's safe-integer rule (1e+30 is written as
 * such). For conformance testing and non-protocol use only: never for a
 * document Baton signs or accepts. Same type strictness as canonicalJson.
 */
export function canonicalJsonRfc8785(value: unknown): string {
  return write(value, WRITE_MAX_DEPTH, 'rfc', 'value');
}

/**
 * Why JSON would not carry `value` as it is, or undefined when it would: JSON.stringify writes
 * Infinity and NaN as null, drops an undefined member, and turns a Date into a string, so a body
 * sent that way is not the body held.
 */
export function notJsonAsIs(value: unknown): string | undefined {
  try {
    canonicalJsonRfc8785(value);
    return undefined;
  } catch (e) {
    if (e instanceof BatonError) return e.message;
    throw e;
  }
}

/** UTF-8 bytes of canonicalJson(value): the bytes that get base64url'd and signed. */
export function canonicalBytes(value: unknown): Uint8Array {
  // canonicalJson output is well-formed (lone surrogates were refused), so
  // the encoder cannot substitute U+FFFD here.
  return encoder.encode(canonicalJson(value));
}

// ---------------------------------------------------------------------------
// UTF-8

/**
 * UTF-8 encoding of s. Refuses (INVALID_FIELD) a string with an unpaired
 * surrogate rather than silently encoding U+FFFD in its place.
 */
export function utf8Encode(s: string): Uint8Array {
  if (!isWellFormedString(s)) {
    throw new BatonError('INVALID_FIELD', {
      message: 'String contains an unpaired UTF-16 surrogate and has no UTF-8 encoding.',
      details: { reason: 'lone-surrogate' },
    });
  }
  return encoder.encode(s);
}

/**
 * Strict UTF-8 decoding: malformed, overlong or surrogate-encoding sequences
 * throw INVALID_FIELD instead of becoming U+FFFD. A leading BOM is NOT
 * stripped (it stays as U+FEFF), so callers see exactly what was sent.
 */
export function utf8Decode(b: Uint8Array, what = 'input'): string {
  try {
    return strictDecoder.decode(b);
  } catch {
    throw new BatonError('INVALID_FIELD', {
      message: `${what} is not valid UTF-8.`,
      details: { what, reason: 'invalid-utf8' },
    });
  }
}

// ---------------------------------------------------------------------------
// Strict reading

function nonCanonical(what: string, detail: string, details: Record<string, unknown> = {}): BatonError {
  return new BatonError('NON_CANONICAL_JSON', {
    message: `${what} is not canonical JSON (RFC 8785): ${detail}.`,
    details: { what, ...details },
  });
}

function checkLimit(name: string, n: number, max: number): number {
  if (!Number.isSafeInteger(n) || n < 0 || n > max) {
    // A NaN limit would compare false everywhere and silently disable the check.
    throw new BatonError('INTERNAL', { message: `parseCanonicalJson: ${name} must be an integer from 0 to ${max}, got ${String(n)}.` });
  }
  return n;
}

/** UTF-8 length of s, computed only when the cheap bounds cannot decide. */
function exceedsUtf8Bytes(s: string, maxBytes: number): boolean {
  // Each UTF-16 unit is 1 to 3 UTF-8 bytes (a surrogate pair: 2 units, 4 bytes).
  if (s.length > maxBytes) return true;
  if (s.length * 3 <= maxBytes) return false;
  return Buffer.byteLength(s, 'utf8') > maxBytes;
}

/**
 * Deepest bracket nesting outside string literals exceeds maxDepth?
 * One linear pass with no recursion, so hostile input like 100000 '[' is
 * refused before JSON.parse or the writer build anything from it. String
 * bodies are skipped with indexOf (native), since they are most of a payload.
 */
function exceedsDepth(text: string, maxDepth: number): boolean {
  // Depth d needs d opening brackets, so a short text cannot exceed the limit.
  const n = text.length;
  if (n <= maxDepth) return false;
  let depth = 0;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      // Find the closing quote: one preceded by an even run of backslashes.
      let j = i;
      for (;;) {
        j = text.indexOf('"', j + 1);
        if (j < 0) return false; // unterminated: JSON.parse refuses it
        let k = j - 1;
        while (text.charCodeAt(k) === 0x5c /* \ */) k--;
        if (((j - 1 - k) & 1) === 0) break;
      }
      i = j;
    } else if (c === 0x5b /* [ */ || c === 0x7b /* { */) {
      if (++depth > maxDepth) return true;
    } else if (c === 0x5d /* ] */ || c === 0x7d /* } */) {
      // Unbalanced closers only occur in text JSON.parse will refuse anyway.
      depth--;
    }
  }
  return false;
}

function firstDifference(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  // Point at the start of a character, not between the halves of a pair.
  if (i > 0 && (b.charCodeAt(i - 1) & 0xfc00) === 0xd800) i--;
  return i;
}

function snippet(s: string, at: number): string {
  let start = Math.max(0, at - 8);
  let end = Math.min(s.length, at + 16);
  // Never split a surrogate pair: the snippet is echoed and stored.
  if (start > 0 && isLowSurrogate(s.charCodeAt(start))) start--;
  if (end < s.length && isLowSurrogate(s.charCodeAt(end))) end++;
  return (start > 0 ? '…' : '') + s.slice(start, end) + (end < s.length ? '…' : '');
}

function isLowSurrogate(unit: number): boolean {
  return (unit & 0xfc00) === 0xdc00;
}

/**
 * `s` cut to at most `max` UTF-16 units plus '…', never between the halves
 * of a surrogate pair, so an echoed excerpt stays well-formed (storable).
 */
export function clipText(s: string, max: number): string {
  if (s.length <= max) return s;
  const end = isLowSurrogate(s.charCodeAt(max)) ? max - 1 : max;
  return `${s.slice(0, end)}…`;
}

/**
 * Parse a header or payload, accepting it only if it is byte-exact RFC 8785
 * canonical JSON under Baton's profile.
 *
 * `what` names the document in error messages, e.g. "payload of receipt 2".
 * Errors:
 *  - INVALID_FIELD: larger than maxBytes, or nested deeper than maxDepth;
 *  - NON_CANONICAL_JSON: invalid UTF-8, a BOM, not JSON at all, an unpaired
 *    surrogate (even escaped), or any difference from the canonical form
 *    (details.byte_offset and expected/found snippets show the first one);
 *  - NUMBER_OUT_OF_RANGE: an integer beyond ±(2^53-1) (including values such
 *    as 9007199254740993 that JSON.parse rounds) or a literal that overflows.
 * A string input is treated as already-decoded text of the same document.
 * A limit that is not an integer in range (maxDepth at most 1000) is a
 * programming error and throws INTERNAL.
 */
export function parseCanonicalJson(input: Uint8Array | string, what: string, limits?: StrictParseLimits): JsonValue {
  // maxDepth is capped where the recursive writer is still far from the stack limit.
  const maxDepth = checkLimit('maxDepth', limits?.maxDepth ?? DEFAULT_MAX_DEPTH, WRITE_MAX_DEPTH);
  const maxBytes = checkLimit('maxBytes', limits?.maxBytes ?? DEFAULT_MAX_BYTES, Number.MAX_SAFE_INTEGER);

  let text: string;
  if (typeof input === 'string') {
    if (exceedsUtf8Bytes(input, maxBytes)) throw tooLarge(what, maxBytes);
    text = input;
  } else {
    if (input.byteLength > maxBytes) throw tooLarge(what, maxBytes);
    try {
      text = strictDecoder.decode(input);
    } catch {
      throw nonCanonical(what, 'it is not valid UTF-8', { reason: 'invalid-utf8' });
    }
  }
  if (text.charCodeAt(0) === 0xfeff) throw nonCanonical(what, 'it starts with a byte order mark', { reason: 'bom', byte_offset: 0 });
  if (exceedsDepth(text, maxDepth)) {
    throw new BatonError('INVALID_FIELD', {
      message: `${what} nests arrays/objects deeper than ${maxDepth} levels.`,
      details: { what, reason: 'too-deep', max_depth: maxDepth },
    });
  }

  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw nonCanonical(what, 'it is not valid JSON', { reason: 'syntax' });
  }

  // Range and surrogate faults surface here, before the comparison, so
  // 1e300 reports NUMBER_OUT_OF_RANGE rather than a mere formatting difference.
  const canonical = write(parsed, maxDepth, 'verify', what);
  if (canonical !== text) {
    const at = firstDifference(canonical, text);
    const byteOffset = Buffer.byteLength(text.slice(0, at), 'utf8');
    throw nonCanonical(
      what,
      `first difference at byte ${byteOffset} (duplicate or unsorted keys, whitespace, a non-shortest number such as 1.0, 1E2 or -0, or an unneeded escape)`,
      { reason: 'mismatch', byte_offset: byteOffset, expected: snippet(canonical, at), found: snippet(text, at) },
    );
  }
  return parsed as JsonValue;
}

function tooLarge(what: string, maxBytes: number): BatonError {
  return new BatonError('INVALID_FIELD', {
    message: `${what} is larger than ${maxBytes} bytes.`,
    details: { what, reason: 'too-large', max_bytes: maxBytes },
  });
}
