/**
 * Request bodies are read strictly: valid UTF-8, one JSON value, no
 * duplicate object keys (parsers disagree on which duplicate wins, so an
 * ambiguous body is refused rather than guessed at), bounded nesting.
 */
import type { Context } from 'hono';
import { BatonError } from '../protocol/errors.js';

const MAX_NESTING = 64;
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

export async function readJsonBody(c: Context, maxBytes: number): Promise<unknown> {
  const declared = Number(c.req.header('content-length') ?? '0');
  if (declared > maxBytes) throw tooLarge(maxBytes);
  const buffer = new Uint8Array(await c.req.arrayBuffer());
  if (buffer.length > maxBytes) throw tooLarge(maxBytes);
  if (buffer.length === 0) throw invalid('The request body is empty; this route takes a JSON object.');
  let text: string;
  try {
    text = decoder.decode(buffer);
  } catch {
    throw invalid('The request body is not valid UTF-8.');
  }
  return parseStrictJson(text);
}

/** Whether the request carries any body bytes (without consuming them for readJsonBody). */
export async function hasBody(c: Context): Promise<boolean> {
  const length = c.req.header('content-length');
  if (length !== undefined) return Number(length) > 0;
  return (await c.req.raw.clone().arrayBuffer()).byteLength > 0;
}

export function parseStrictJson(text: string): unknown {
  checkStructure(text);
  try {
    return JSON.parse(text);
  } catch (e) {
    throw invalid(`The request body is not valid JSON: ${(e as Error).message}.`);
  }
}

function tooLarge(maxBytes: number): BatonError {
  return new BatonError('PAYLOAD_TOO_LARGE', { message: `The request body is larger than ${maxBytes} bytes.` });
}

function invalid(message: string): BatonError {
  return new BatonError('INVALID_REQUEST', { message });
}

/**
 * One linear pass over the text: tracks the keys of each open object to find
 * duplicates, and the nesting depth, before JSON.parse sees it. Syntax errors
 * are left to JSON.parse; this only has to be right on valid JSON.
 */
function checkStructure(text: string): void {
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
          return; // malformed: JSON.parse will explain
        }
        if (top.has(key)) throw invalid(`The request body repeats the key ${JSON.stringify(key)} in one object.`);
        top.add(key);
      }
      i = end + 1;
      continue;
    }
    if (ch === '{' || ch === '[') {
      keyStack.push(ch === '{' ? new Set() : null);
      if (keyStack.length > MAX_NESTING) throw invalid(`The request body nests deeper than ${MAX_NESTING} levels.`);
    } else if (ch === '}' || ch === ']') {
      keyStack.pop();
    }
    i++;
  }
}

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
