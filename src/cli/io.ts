/** What a CLI command may touch, so tests can run commands in-process. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  /** Environment for defaults (BATON_URL, BATON_API_KEY); process.env when absent. */
  readonly env?: Readonly<Record<string, string | undefined>>;
}

/**
 * Characters that drive a terminal rather than print: C0 controls but newline and tab, DEL, C1
 * controls, and the bidirectional controls that reorder what a reader sees. Tool names, revocation
 * reasons and admin labels come from agents and other people: printed raw, an ESC sequence could
 * clear the reader's screen or recolour a line, and a bidi override reverse a hash.
 */
const TERMINAL_CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/**
 * `text` with every terminal control as a visible `\uXXXX` escape. Inside JSON strings that is
 * JSON's own escape for the same character, so `--json` output still parses to the same values.
 */
export function terminalSafe(text: string): string {
  return text.replace(TERMINAL_CONTROLS, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** `io` writing only terminal-safe text: every command prints through it (main). */
export function terminalSafeIo(io: CliIo): CliIo {
  return { ...io, out: (text) => io.out(terminalSafe(text)), err: (text) => io.err(terminalSafe(text)) };
}

export const processIo: CliIo = {
  out: (text) => process.stdout.write(`${text}\n`),
  err: (text) => process.stderr.write(`${text}\n`),
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
