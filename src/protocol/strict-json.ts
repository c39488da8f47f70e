/**
 * JSON that every reader reads alike. Parsers disagree on which of two equal
 * keys in one object wins (JSON.parse keeps the last, others the first or
 * refuse), so a document with a repeated key can show one reader an invocation
 * and another a different one. Whoever reads a bundle or a body from text,
 * the service, the CLI offline or the MCP middleware, refuses such a document
 * rather than guess, and bounds its nesting (the service checks before JSON.parse,
 * which then never recurses deeply; the offline readers, whose input is the
 * user's own file, after it). Numbers likewise: a literal a double cannot hold as
 * written (0.1000000000000000000000001, 12345678901234567891, 1e400, 1e-400) is
 * read as another value by JSON.parse and as itself by a reader of big decimals,
 * so it is refused rather than silently changed.
 */

/** Nesting that any document Baton reads as text may reach (a request body, a bundle, a saved answer). */
export const DOCUMENT_MAX_NESTING = 64;

/**
 * Why `text` is ambiguous or too deep, as a phrase that completes "<the
 * document> ...": a key repeated in one object (escapes decoded, so "a" and
 * "\u0061" are the same key), a number JSON.parse would not hold as written, or
 * nesting deeper than `maxNesting`. Undefined when none. One linear pass before
 * JSON.parse; syntax errors are left to JSON.parse, so this only has to be right
 * on valid JSON.
 */
export function jsonAmbiguity(text: string, maxNesting: number): string | undefined {
  const keyStack: (Set<string> | null)[] = [];
  let i = 0;
  while (i < text.length) {
    const ch = text[i]!;
    if (ch === '"') {
      const end = stringEnd(text, i);
      const top = keyStack[keyStack.length - 1];
      if (top && isObjectKey(text, end)) {
        let key: string;
        try {
          key = JSON.parse(text.slice(i, end + 1)) as string;
        } catch {
          return undefined; // malformed: JSON.parse will explain
        }
        if (top.has(key)) return `repeats the key ${JSON.stringify(key)} in one object`;
        top.add(key);
      }
      i = end + 1;
      continue;
    }
    if (ch === '{' || ch === '[') {
      keyStack.push(ch === '{' ? new Set() : null);
      if (keyStack.length > maxNesting) return `nests deeper than ${maxNesting} levels`;
    } else if (ch === '}' || ch === ']') {
      keyStack.pop();
    } else if (ch === '-' || (ch >= '0' && ch <= '9')) {
      // One pass over the token; the common number (few digits, no exponent) is decided here.
      let end = i + 1;
      let digits = ch === '-' ? 0 : 1;
      let exponent = false;
      for (; end < text.length; end++) {
        const c = text.charCodeAt(end);
        if (c >= 48 && c <= 57) digits++;
        else if (c === 101 || c === 69)
          exponent = true; // e, E
        else if (c !== 46 && c !== 43 && c !== 45) break; // . + -
      }
      if (exponent || digits > DIGITS_ALWAYS_HELD) {
        const literal = text.slice(i, end);
        const held = heldAs(literal);
        if (held !== undefined) return `holds the number ${literal.slice(0, 40)}${literal.length > 40 ? '…' : ''}, ${held}`;
      }
      i = end;
      continue;
    }
    i++;
  }
  return undefined;
}

const DECIMAL = /^-?(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/;
/** A double holds every decimal of up to 15 significant digits (DBL_DIG) as written. */
const DIGITS_ALWAYS_HELD = 15;

/**
 * How JSON.parse would read `literal` when that is not the number written (the rest of a phrase),
 * else undefined. A double's value is taken as its shortest decimal form, as everywhere else
 * here (money, JCS): 0.1 is held as written, 0.1000000000000000000000001 is read as 0.1. An
 * integer a double holds exactly is held as written too, in full (2^60 = 1152921504606846976,
 * whose shortest form is 1152921504606847000).
 */
function heldAs(literal: string): string | undefined {
  if (!DECIMAL.test(literal)) return undefined; // not a JSON number: JSON.parse will explain
  const value = Number(literal);
  if (!Number.isFinite(value)) return 'beyond the largest number a double holds (about 1.8e308)';
  const shortest = String(value);
  if (shortest === literal || sameDecimal(literal, shortest)) return undefined;
  if (Number.isInteger(value) && sameDecimal(literal, BigInt(value).toString())) return undefined;
  return `which a double holds only as ${shortest} (it keeps about 15 significant digits): send the number that is meant, as a double holds it`;
}

/** Whether two decimal literals (JSON or String(number) forms) denote the same number. */
function sameDecimal(a: string, b: string): boolean {
  const x = decimalParts(a);
  const y = decimalParts(b);
  if (x.digits === '' || y.digits === '') return x.digits === y.digits; // zero, whatever its sign or exponent
  return x.digits === y.digits && x.point === y.point && x.negative === y.negative;
}

/**
 * value = (negative ? -1 : 1) * 0.<digits> * 10^point, digits with no leading or trailing zeros
 * ('' for zero). Linear in the literal's length: a regex trimming trailing zeros backtracked at
 * every zero, and one number of 120,000 digits held the event loop for seconds.
 */
function decimalParts(literal: string): { negative: boolean; digits: string; point: number } {
  const m = DECIMAL.exec(literal)!;
  const all = m[1]! + (m[2] ?? '');
  let start = 0;
  while (start < all.length && all.charCodeAt(start) === 48) start++;
  let end = all.length;
  while (end > start && all.charCodeAt(end - 1) === 48) end--;
  return { negative: literal.startsWith('-'), digits: all.slice(start, end), point: m[1]!.length + Number(m[3] ?? 0) - start };
}

/** Index of the quote that closes the string opened at `start` (or the last index, unterminated). */
function stringEnd(text: string, start: number): number {
  let i = start + 1;
  while (i < text.length) {
    const ch = text[i];
    if (ch === '\\') i += 2;
    else if (ch === '"') return i;
    else i++;
  }
  return text.length - 1;
}

/** A string is a key when the next non-space character is a colon. */
function isObjectKey(text: string, end: number): boolean {
  let j = end + 1;
  while (j < text.length && (text[j] === ' ' || text[j] === '\n' || text[j] === '\r' || text[j] === '\t')) j++;
  return text[j] === ':';
}
