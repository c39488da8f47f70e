/**
 * Structured JSON logs, one object per line. Callers pass fields, never
 * secrets: keys, seeds and Authorization headers are never logged.
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error' | 'silent';
const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/**
 * Standard output, one write per turn of the event loop: the lines logged
 * during a turn (a request and its verify decision, and those of every other
 * request answered in the turn) leave together, after the answers were sent,
 * instead of one blocking write each (writes to a pipe or file are
 * synchronous). Whatever is pending is written when the process exits.
 */
function bufferedStdout(): (line: string) => void {
  let pending: string[] = [];
  let scheduled = false;
  const flush = (): void => {
    scheduled = false;
    if (pending.length === 0) return;
    const text = pending.join('');
    pending = [];
    process.stdout.write(text);
  };
  process.on('exit', flush);
  flushPending = flush;
  return (line) => {
    pending.push(line);
    if (!scheduled) {
      scheduled = true;
      setImmediate(flush);
    }
  };
}

let flushPending: (() => void) | undefined;

/**
 * Writes the log lines still waiting for the end of the turn, now: before a text written straight
 * to stderr (the start's banner), which would otherwise read as coming before them. A start's
 * migrations on PGlite hold the turn for their whole length.
 */
export function flushLogs(): void {
  flushPending?.();
}

let stdoutWriter: ((line: string) => void) | undefined;
const writeStdout = (line: string): void => (stdoutWriter ??= bufferedStdout())(line);

/** `base`: fields every line carries (a worker's id and pid under BATON_WORKERS), before the line's own. */
export function createLogger(level: LogLevel, write: (line: string) => void = writeStdout, base: Record<string, unknown> = {}): Logger {
  const emit =
    (at: Exclude<LogLevel, 'silent'>) =>
    (msg: string, fields: Record<string, unknown> = {}) => {
      if (RANK[at] < RANK[level]) return;
      write(`${JSON.stringify({ time: new Date().toISOString(), level: at, msg, ...base, ...fields })}\n`);
    };
  return { debug: emit('debug'), info: emit('info'), warn: emit('warn'), error: emit('error') };
}

export const silentLogger: Logger = createLogger('silent');
