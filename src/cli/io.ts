/** What a CLI command may touch, so tests can run commands in-process. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  /** Environment for defaults (BATON_URL, BATON_API_KEY); process.env when absent. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Where a secret is read from (`--key-stdin`); process.stdin when absent. */
  readonly stdin?: CliStdin;
}

/** What a command uses of stdin: a stream, and at a terminal its raw mode (process.stdin's shape). */
export interface CliStdin extends NodeJS.ReadableStream {
  readonly isTTY?: boolean;
  readonly isRaw?: boolean;
  setRawMode?(mode: boolean): unknown;
}

/**
 * Characters that drive a terminal or print as nothing: controls (C0, DEL, C1), format characters
 * (bidi controls, zero-width space and joiners, soft hyphen, word joiner, BOM...), the other
 * default-ignorable code points (variation selectors, tag characters, Hangul fillers) and the line
 * and paragraph separators. Tool names, args, revocation reasons and admin labels come from agents
 * and other people: printed raw, an ESC sequence could clear the reader's screen or recolour a
 * line, a bidi override reverse a hash, and `update_record\u200b` would read as `update_record`.
 */
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\u2028\u2029]/gu;

/** UTF-16 escapes (a pair for an astral code point), so the result is also a valid JSON string escape. */
const escaped = (c: string): string =>
  Array.from({ length: c.length }, (_, i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, '0')}`).join('');

/**
 * `text` with every invisible character (above) as a visible `\uXXXX` escape, newlines and tabs
 * kept. Inside JSON strings that is JSON's own escape for the same character, so `--json` output
 * still parses to the same values.
 */
export function terminalSafe(text: string): string {
  return text.replace(INVISIBLE, (c) => (c === '\n' || c === '\t' ? c : escaped(c)));
}

/** One field on one line: like terminalSafe, and newlines and tabs escaped too, so a value cannot fake another line. */
export function oneLine(text: string): string {
  return text.replace(INVISIBLE, escaped);
}

/** Characters printed of one line of a server's refusal or denial. */
export const MAX_PRINTED_LINE = 4_000;
/** Unmet conditions printed of one refusal or denial (the answer itself holds every one). */
export const MAX_PRINTED_ITEMS = 50;

/** `line` cut to MAX_PRINTED_LINE characters, with the count of what was left off. */
export function cutToPrintable(line: string): string {
  if (line.length <= MAX_PRINTED_LINE) return line;
  // Never half a surrogate pair: the cut would print as an escaped lone surrogate.
  const end = /[\uD800-\uDBFF]/.test(line[MAX_PRINTED_LINE - 1]!) ? MAX_PRINTED_LINE - 1 : MAX_PRINTED_LINE;
  return `${line.slice(0, end)}... (${line.length - end} more characters)`;
}

/**
 * Lines holding a server's text (a refusal, a denial), as printed: each kept on its one line, so an
 * answer cannot print lines of its own that read as baton's (a fake "What to do", say), and cut to a
 * length a terminal can show (an answer's 20 MB message would otherwise be printed whole).
 */
export function printableLines(lines: readonly string[]): string {
  return lines.map((line) => oneLine(cutToPrintable(line))).join('\n');
}

/** The lines of the first MAX_PRINTED_ITEMS of `items` (an answer's unmet conditions), and a count of the rest. */
export function printedItems<T>(items: readonly T[], show: (item: T, index: number) => string[]): string[] {
  const lines = items.slice(0, MAX_PRINTED_ITEMS).flatMap(show);
  if (items.length > MAX_PRINTED_ITEMS) lines.push(`  (and ${items.length - MAX_PRINTED_ITEMS} more)`);
  return lines;
}

/** `io` writing only terminal-safe text: every command prints through it (main). */
export function terminalSafeIo(io: CliIo): CliIo {
  return { ...io, out: (text) => io.out(terminalSafe(text)), err: (text) => io.err(terminalSafe(text)) };
}

/**
 * Writes lines to a standard stream whose reader may go away (`baton invocations | head -1`): the
 * first write after that fails with EPIPE, which as an unhandled 'error' event ended the command
 * with a stack trace. The rest of the output is dropped instead, and the command ends as it would
 * have, with its own exit code (a denial piped into head is still 1).
 */
function lineWriter(stream: NodeJS.WriteStream): (text: string) => void {
  let gone = false;
  let watching = false;
  return (text) => {
    if (!watching) {
      watching = true;
      stream.on('error', (e: NodeJS.ErrnoException) => {
        if (e.code !== 'EPIPE' && !gone) throw e;
        gone = true;
      });
    }
    if (!gone) stream.write(`${text}\n`);
  };
}

export const processIo: CliIo = {
  out: lineWriter(process.stdout),
  err: lineWriter(process.stderr),
  env: process.env,
};

/** Bad flags or unreadable input: exit code 2, with the help text to act on. */
export class UsageError extends Error {
  constructor(
    message: string,
    readonly help?: string,
  ) {
    super(message);
    this.name = 'UsageError';
  }
}

export const EXIT_OK = 0;
/** Refused or denied: the service or the client-side checks said no. */
export const EXIT_DENIED = 1;
/** Bad flags or unusable input. */
export const EXIT_USAGE = 2;
/** The server could not be reached, timed out, or failed (5xx). */
export const EXIT_UNREACHABLE = 3;
