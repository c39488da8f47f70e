/** What a CLI command may touch, so tests can run commands in-process. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
}

export const processIo: CliIo = {
  out: (text) => process.stdout.write(`${text}\n`),
  err: (text) => process.stderr.write(`${text}\n`),
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
export const EXIT_DENIED = 1;
export const EXIT_USAGE = 2;
