/** `baton` command: dispatches to one module per subcommand. */
import { runVerify } from './verify.js';
import { EXIT_USAGE, processIo, UsageError, type CliIo } from './io.js';

type Command = (argv: string[], io: CliIo) => Promise<number>;

const COMMANDS: Record<string, { run: Command; summary: string }> = {
  verify: { run: runVerify, summary: 'verify a DRS bundle offline (exit 0 allowed, 1 denied, 2 unusable input)' },
};

export const MAIN_HELP = () => `Usage: baton <command> [options]

Baton issues and verifies signed, attenuated DRS 4.0 delegation chains for AI agents.

Commands:
${Object.entries(COMMANDS)
  .map(([name, c]) => `  ${name.padEnd(10)} ${c.summary}`)
  .join('\n')}

Run "baton <command> --help" for a command's options.`;

export async function main(argv: string[], io: CliIo = processIo): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    io.out(MAIN_HELP());
    return name ? 0 : EXIT_USAGE;
  }
  const command = COMMANDS[name];
  if (!command) {
    io.err(`baton: unknown command "${name}"\n\n${MAIN_HELP()}`);
    return EXIT_USAGE;
  }
  try {
    return await command.run(rest, io);
  } catch (e) {
    if (e instanceof UsageError || (e as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      io.err(`baton ${name}: ${(e as Error).message}`);
      if (e instanceof UsageError && e.help) io.err(`\n${e.help}`);
      return EXIT_USAGE;
    }
    throw e;
  }
}
