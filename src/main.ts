/** `npm start`: the service on the embedded default (or DATABASE_URL). */
import { ConfigError } from './config.js';
import { runService } from './server.js';
import { flushLogs } from './service/log.js';
import { errorText } from './store/errors.js';

// Configuration is the environment's; an argument would be silently ignored (a `--help` started a
// server in the current folder), so each one is refused, saying where the options are.
const args = process.argv.slice(2);
if (args.length > 0) {
  const help = args.length === 1 && (args[0] === '--help' || args[0] === '-h');
  (help ? process.stdout : process.stderr).write(
    `${help ? '' : `main.js takes no arguments (got ${JSON.stringify(args)}). `}` +
      'It starts the Baton service configured by environment variables (PORT, DATABASE_URL, BATON_*).\n' +
      'For every variable and the command-line form: npx baton serve --help\n',
  );
  process.exit(help ? 0 : 2);
}

// The exit codes of `baton serve`: 2 for a configuration it refuses, 3 for a start that failed (the
// database unreachable, the data folder in use), so a supervisor reads either command the same way.
runService().catch((e) => {
  flushLogs(); // the lines logged before the failure come first
  process.stderr.write(`Baton failed to start: ${errorText(e)}\n`);
  process.exit(e instanceof ConfigError ? 2 : 3);
});
