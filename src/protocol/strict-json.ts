/**
 * JSON that every reader reads alike. Parsers disagree on which of two equal
 * keys in one object wins (JSON.parse keeps the last, others the first or
 * refuse), so a document with a repeated key can show one reader an invocation
 * and another a different one. Whoever reads a bundle or a body from text,
 * the service, the CLI offline or the MCP middleware, refuses such a document
 * rather than guess, and bounds its nesting (the service checks before JSON.parse,
 * which then never recurses deeply; the offline readers, whose input is the
 * user's own file, after it).
 */

/** Nesting that any document Baton reads as text may reach (a request body, a bundle, a saved answer). */
export const DOCUMENT_MAX_NESTING = 64;

/**
 * Why `text` is ambiguous or too deep, as a phrase that completes "<the
 * document> ...": a key repeated in one object (escapes decoded, so "a" and
 * "\u0061" are the same key), or nesting deeper than `maxNesting`. Undefined
 * when neither. One linear pass before JSON.parse; syntax errors are left to
 * JSON.parse, so this only has to be right on valid JSON.
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
    }
    i++;
  }
  return undefined;
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
