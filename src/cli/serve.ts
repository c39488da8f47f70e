/** `baton serve`: runs the Baton service (the same as npm start). */
import { parseCliArgs } from './args.js';
import { ConfigError, loadConfig } from '../config.js';
import { runService } from '../server.js';
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

Other configuration comes from the environment: BATON_ADMIN_KEY,
BATON_MASTER_KEY (64 hex digits; encrypts signing keys at rest, a dev run
generates one in the data folder), BATON_MAX_BODY_BYTES,
BATON_MAX_CHAIN_DEPTH, BATON_INVOCATION_MAX_AGE, BATON_CLOCK_SKEW,
BATON_DB_POOL (per worker), BATON_VERIFY_DEADLINE_MS (default 5000) and
BATON_LOG_LEVEL (debug, info, warn, error, silent).

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
  const overrides: Record<string, string | undefined> = {
    PORT: values.port,
    HOST: values.host,
    BATON_DATA_DIR: values['data-dir'],
    DATABASE_URL: values['database-url'],
    BATON_WORKERS: values.workers,
  };
  for (const [name, value] of Object.entries(overrides)) if (value !== undefined) process.env[name] = value;
  try {
    loadConfig(); // the same check runService makes, reported as a usage error instead of an exit
  } catch (e) {
    if (e instanceof ConfigError) throw new UsageError(e.message, SERVE_HELP);
    throw e;
  }
  try {
    await runService();
  } catch (e) {
    io.err(`baton serve: Baton failed to start: ${e instanceof Error ? e.message : String(e)}`);
    return EXIT_UNREACHABLE;
  }
  // Listening: the process stays up until a signal, and runService exits it.
  return 0;
}
