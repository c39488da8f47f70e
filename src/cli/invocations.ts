/** `baton invocations`: the auditor's list of verify decisions (GET /v1/invocations), filtered. */
import { parseCliArgs } from './args.js';
import type { DecisionFilter, DecisionPage } from '../sdk/client.js';
import {
  clientFrom,
  COMMON_OPTIONS,
  durationFlag,
  EXIT_HELP,
  integerFlag,
  printJson,
  requireHash,
  SERVER_HELP,
  SERVER_OPTIONS,
  shortHash,
} from './common.js';
import { MAX_PRINTED_LINE, oneLine, printableLines, UsageError, type CliIo } from './io.js';

export const INVOCATIONS_HELP = `Usage: baton invocations [filters] [options]

Lists the tenant's verify decisions, allowed invocations and denials, newest
first (GET /v1/invocations, a key with audit scope). Filters combine:

Filters:
  --dr <hash>            decisions whose chain passes through this delegation
                         record (its whole subtree)
  --tool <name>          allowed invocations of this tool
  --outcome <o>          allowed or denied
  --code <CODE>          denials with this code (theirs or a violation's),
                         e.g. REPLAY_DETECTED, POLICY_VIOLATION
  --since <time>         at or after: an RFC 3339 date-time (2026-11-23T09:00:00Z)
                         or a duration back from now (90s, 30m, 12h, 7d)
  --until <time>         before: the same forms

Options:
  --limit <n>            decisions per page, 1-200 (default 50)
  --cursor <cursor>      continue after a page (the cursor it printed)
  --all                  fetch every page
  --json                 print the service's pages as JSON
  -h, --help             show this help

${SERVER_HELP}

${EXIT_HELP}`;

/** The instants the service takes in a query (InstantQuery, src/api/common.ts): UTC years 1 to 9999. */
const FIRST_INSTANT_MS = Date.parse('0001-01-01T00:00:00Z');
const LAST_INSTANT_MS = Date.parse('9999-12-31T23:59:59.999Z');

/** An RFC 3339 date-time as given, or a duration back from now: an instant the service takes. */
function instantFlag(name: string, raw: string, now: number): string {
  if (/^\d+[smhd]?$/.test(raw.trim())) {
    const at = now - durationFlag(name, raw) * 1000;
    // Said here as a usage error, not refused by the service (or, before any date, a crash).
    if (at < FIRST_INSTANT_MS)
      throw new UsageError(`${name} ${raw} reaches back before the year 1: give a shorter duration, or a date-time`);
    return new Date(at).toISOString();
  }
  if (!isCalendarDateTime(raw)) {
    throw new UsageError(
      `${name} takes an RFC 3339 date-time with a zone (2026-11-23T09:00:00Z) or a duration (30m, 12h, 7d), got "${raw}"`,
    );
  }
  const at = Date.parse(raw);
  if (at < FIRST_INSTANT_MS || at > LAST_INSTANT_MS)
    throw new UsageError(`${name} must fall in UTC years 0001 to 9999 (after its offset), got "${raw}"`);
  return raw;
}

/**
 * An RFC 3339 date-time with a zone, as the service reads one: upper-case T and Z, a day its month
 * has, hours to 23 (Date.parse alone takes 2026-02-30 and 24:00, which the service refuses).
 */
function isCalendarDateTime(raw: string): boolean {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-](\d{2}):(\d{2}))$/.exec(raw);
  if (!m) return false;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  const dayExists = date.getUTCFullYear() === year && date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
  const offsetOk = m[9] === undefined || (Number(m[9]) <= 23 && Number(m[10]) <= 59);
  return dayExists && hour <= 23 && minute <= 59 && second <= 59 && offsetOk && !Number.isNaN(Date.parse(raw));
}

/** One decision on its line, cut to a length a terminal can show (every member is the service's text). */
function line(d: DecisionPage['invocations'][number]): string {
  if (d.decision === 'allowed') {
    return printableLines([`${d.created_at}  ALLOWED  ${d.tool ?? '-'}  ${d.jti}  leaf ${shortHash(d.leaf)}`]);
  }
  const leaf = d.dr_chain.at(-1);
  // No jti: the invocation was unreadable, or its chain did not verify (its jti was only claimed).
  return printableLines([
    `${d.created_at}  DENIED   ${d.code}  ${d.jti ?? `(no jti; invocation ${d.invocation_hash ? shortHash(d.invocation_hash) : 'unreadable'})`}${leaf ? `  leaf ${shortHash(leaf)}` : ''}`,
  ]);
}

export async function runInvocations(argv: string[], io: CliIo): Promise<number> {
  const { values } = parseCliArgs('invocations', {
    args: argv,
    options: {
      dr: { type: 'string' },
      tool: { type: 'string' },
      outcome: { type: 'string' },
      code: { type: 'string' },
      since: { type: 'string' },
      until: { type: 'string' },
      limit: { type: 'string' },
      cursor: { type: 'string' },
      all: { type: 'boolean', default: false },
      ...SERVER_OPTIONS,
      ...COMMON_OPTIONS,
    },
  });
  if (values.help) {
    io.out(INVOCATIONS_HELP);
    return 0;
  }
  if (values.outcome !== undefined && values.outcome !== 'allowed' && values.outcome !== 'denied') {
    throw new UsageError(`--outcome takes allowed or denied, got "${values.outcome}"`, INVOCATIONS_HELP);
  }
  const now = Date.now();
  const filter: DecisionFilter = {
    ...(values.dr !== undefined ? { dr: requireHash(values.dr, '--dr hash', INVOCATIONS_HELP) } : {}),
    ...(values.tool !== undefined ? { tool: values.tool } : {}),
    ...(values.outcome !== undefined ? { outcome: values.outcome } : {}),
    ...(values.code !== undefined ? { code: values.code } : {}),
    ...(values.since !== undefined ? { since: instantFlag('--since', values.since, now) } : {}),
    ...(values.until !== undefined ? { until: instantFlag('--until', values.until, now) } : {}),
  };
  const limit = values.limit !== undefined ? integerFlag('--limit', values.limit, 1) : undefined;
  const client = clientFrom(values, io);

  const pages: DecisionPage[] = [];
  let cursor = values.cursor;
  const seen = new Set<string>(cursor === undefined ? [] : [cursor]);
  const { followCursorOnce } = await import('../sdk/client.js'); // the module every command that asks the service loads
  do {
    const page = await client.listDecisions({
      ...filter,
      ...(cursor !== undefined ? { cursor } : {}),
      ...(limit !== undefined ? { limit } : {}),
    });
    pages.push(page);
    if (!values.json) for (const d of page.invocations) io.out(line(d));
    cursor = page.next_cursor ?? undefined;
    // --all reads to the end: a cursor the service answered before would never get there.
    if (values.all && cursor !== undefined) cursor = followCursorOnce(seen, cursor, '/v1/invocations', page.invocations.length);
  } while (values.all && cursor !== undefined);

  if (values.json) {
    printJson(io, values.all ? { invocations: pages.flatMap((p) => p.invocations), next_cursor: null } : pages[0]);
    return 0;
  }
  const count = pages.reduce((n, p) => n + p.invocations.length, 0);
  io.err(count === 0 ? 'no decisions match' : `${count} decision(s)`);
  // A cursor is only of use whole: one too long to print is not cut but pointed past.
  if (cursor !== undefined)
    io.err(
      // An escaped cursor (control characters) is of no use pasted back either.
      oneLine(cursor) !== cursor || cursor.length > MAX_PRINTED_LINE
        ? `more: the next page's cursor (${cursor.length} characters) cannot be printed as it is: use --all, or --json to read it`
        : oneLine(`more: baton invocations ... --cursor ${cursor}   (or --all)`),
    );
  return 0;
}
