/** `baton serve`: runs the Baton service (the same as npm start). */
import { parseCliArgs } from './args.js';
import { BEARER_TOKEN_MAX_LENGTH, ConfigError, loadConfig } from '../config.js';
import { errorText, flushLogs, runService } from '../server.js';
import { COMMON_OPTIONS } from './common.js';
import { EXIT_UNREACHABLE, UsageError, type CliIo } from './io.js';

export const SERVE_HELP = `Usage: baton serve [--port <n>] [--host <addr>] [--data-dir <dir>] [--database-url <url>] [--workers <n>]

Runs the Baton service until Ctrl+C (SIGINT) or SIGTERM, then shuts down
gracefully. Without a database URL it runs on embedded PGlite in the data
folder, so it works on a bare machine; with one, on PostgreSQL. On first
start it prints a one-time admin API key (unless BATON_ADMIN_KEY is set).

Options (each overrides its environment variable):
  --port <n>              PORT (default 8080)
  --host <addr>           HOST (default 127.0.0.1)
  --data-dir <dir>        BATON_DATA_DIR, the embedded database (default ./.baton/data)
  --database-url <url>    DATABASE_URL, postgres://... (default: embedded)
  --workers <n>           BATON_WORKERS, service processes sharing the port,
                          e.g. one per core (default 1; needs a database URL)
  -h, --help              show this help

Environment: these and the five above (PORT, HOST, BATON_DATA_DIR,
DATABASE_URL, BATON_WORKERS) are every variable Baton reads; an unset one
takes its default:
  BATON_ADMIN_KEY              the admin API key: 24 to ${BEARER_TOKEN_MAX_LENGTH} printable ASCII
                               characters, no spaces (default: generated and
                               printed once)
  BATON_METRICS_TOKEN          a bearer token that reads GET /metrics and
                               nothing else, for a Prometheus scraper (24 to
                               ${BEARER_TOKEN_MAX_LENGTH} printable ASCII characters, no spaces;
                               default: unset, and /metrics takes only the
                               admin key)
  BATON_MASTER_KEY             32 random bytes as 64 hex digits or base64 of
                               either alphabet (43 characters, or 44 ending in
                               =; never all zero); encrypts signing keys at
                               rest. Required with
                               DATABASE_URL, the same on every node (default:
                               generated in the data folder, embedded only)
  BATON_MAX_BODY_BYTES         larger request bodies get 413 (1024 to
                               16777216; default 262144)
  BATON_MAX_BODY_BUFFER_BYTES  request body bytes a process holds at once while
                               they arrive, keyless ones half of it; past it a
                               body gets 503 (at least twice
                               BATON_MAX_BODY_BYTES; default 67108864)
  BATON_MAX_CHAIN_DEPTH        the most DRs in a chain (1 to 16; default 16)
  BATON_INVOCATION_MAX_AGE     seconds an invocation is accepted after its
                               iat (default 300)
  BATON_CLOCK_SKEW             seconds of clock difference allowed (default 60)
  BATON_DB_POOL                PostgreSQL connections per worker (default 10)
  BATON_VERIFY_DEADLINE_MS     a verify not decided by then answers 503, as
                               does a key lookup or a read that waits as
                               long for the database (default 5000)
  BATON_WRITE_DEADLINE_MS      any other write that waits longer for the
                               database answers 503 and is rolled back, not
                               applied late (default 30000; at least the
                               verify's)
  BATON_TLOG_INTERVAL_MS       how often this node integrates the transparency
                               log; 0 = never on this node (default 250)
  BATON_TLOG_NAME              start of every tenant log's origin: set it once,
                               to a host name you own (default localhost)
  BATON_LOG_LEVEL              debug, info, warn, error or silent (default info)
  BATON_KEEP_ALIVE_TIMEOUT_MS  how long an idle connection stays open; keep it
                               above your load balancer's (default 65000)
  BATON_HEADERS_TIMEOUT_MS     time to send request headers; above the
                               keep-alive timeout (default 66000)
  BATON_REQUEST_TIMEOUT_MS     time to send a whole request; at least the
                               headers timeout (default 120000)

Exit codes: 0 stopped cleanly, 2 invalid flags or configuration, 3 the
service could not start (e.g. the database is unreachable).`;

export async function runServe(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('serve', {
    args: argv,
    allowPositionals: true,
    options: {
      port: { type: 'string' },
      host: { type: 'string' },
      'data-dir': { type: 'string' },
      'database-url': { type: 'string' },
      workers: { type: 'string' },
      help: COMMON_OPTIONS.help,
    },
  });
  if (values.help) {
    io.out(SERVE_HELP);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`, SERVE_HELP);
  // Each flag sets its environment variable: [variable, flag, value].
  const overrides = [
    ['PORT', '--port', values.port],
    ['HOST', '--host', values.host],
    ['BATON_DATA_DIR', '--data-dir', values['data-dir']],
    ['DATABASE_URL', '--database-url', values['database-url']],
    ['BATON_WORKERS', '--workers', values.workers],
  ] as const;
  for (const [name, , value] of overrides) if (value !== undefined) process.env[name] = value;
  try {
    loadConfig(); // the same check runService makes, reported as a usage error instead of an exit
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    // A value the user typed as a flag is named as that flag, not as a variable they never set. The
    // values the message quotes ("got ...") are left as typed, even one that spells a variable's name.
    const named = (text: string) =>
      overrides.reduce((t, [name, flag, value]) => (value === undefined ? t : t.replace(new RegExp(`\\b${name}\\b`, 'g'), flag)), text);
    // The "Not read" lines name variables as set (BATON_PORT for --port is the user's, not a flag).
    const at = e.message.indexOf('\nNot read');
    const [problems, unread] = at < 0 ? [e.message, ''] : [e.message.slice(0, at), e.message.slice(at)];
    const message =
      problems
        .split(/("(?:[^"\\]|\\.)*")/)
        .map((part, i) => (i % 2 === 1 ? part : named(part)))
        .join('') + unread;
    throw new UsageError(message, SERVE_HELP);
  }
  try {
    await runService();
  } catch (e) {
    flushLogs(); // the lines logged before the failure come first
    io.err(`baton serve: Baton failed to start: ${errorText(e)}`);
    return EXIT_UNREACHABLE;
  }
  // Listening: the process stays up until a signal, and runService exits it.
  return 0;
}
