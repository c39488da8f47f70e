/** What a CLI command may touch, so tests can run commands in-process. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  /** Environment for defaults (BATON_URL, BATON_API_KEY); process.env when absent. */
  readonly env?: Readonly<Record<string, string | undefined>>;
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
