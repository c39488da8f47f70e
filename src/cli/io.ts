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
