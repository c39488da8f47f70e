/**
 * Flag parsing for every subcommand: node's parseArgs, with its raw errors
 * turned into usage errors that say what to type instead ("did you mean").
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { EXIT_USAGE, UsageError, type CliIo } from './io.js';

/** Edit distance (insertions, deletions, substitutions, adjacent swaps). */
function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, d[i - 2]![j - 2]! + 1);
      d[i]![j] = best;
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * The candidate the user most likely meant, or undefined when none is close:
 * within a third of the word's length (at least 1, at most 3 edits), or 2 edits
 * when the first three letters are the candidate's ("prove" for "proof"), or a
 * candidate that starts with what was typed. A hyphenated candidate is also
 * measured by its trailing words, so an old short name ("receipt") finds the
 * qualified one that replaced it ("service-receipt").
 */
export function closestMatch(typed: string, candidates: readonly string[]): string | undefined {
  const word = typed.toLowerCase();
  const base = Math.min(3, Math.max(1, Math.floor(word.length / 3)));
  let best: { name: string; distance: number } | undefined;
  for (const name of candidates) {
    const tails = name.split('-').map((_, i, parts) => parts.slice(i).join('-'));
    const distance =
      name.startsWith(word) && word.length >= 2
        ? 0.5
        : Math.min(editDistance(word, name), ...tails.slice(1).map((t) => editDistance(word, t) + 0.5));
    // Each candidate by its own allowance, so one that keeps the first letters is found even after a tie.
    const allowed = word.length >= 4 && name.startsWith(word.slice(0, 3)) ? Math.max(2, base) : base;
    if (distance <= allowed && (best === undefined || distance < best.distance)) best = { name, distance };
  }
  return best?.name;
}

/** " (did you mean X?)" or "". */
export function didYouMean(typed: string, candidates: readonly string[], render: (name: string) => string = (n) => n): string {
  const match = closestMatch(typed, candidates);
  return match === undefined ? '' : ` (did you mean ${render(match)}?)`;
}

/**
 * parseArgs with usage errors a person can act on. `command` names the
 * subcommand for the "see --help" hint.
 */
export function parseCliArgs<T extends ParseArgsConfig>(command: string, config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config.args === undefined ? config : { ...config, args: negativeValuesAttached(config.args, config.options ?? {}) });
  } catch (e) {
    const code = (e as { code?: string }).code ?? '';
    if (!code.startsWith('ERR_PARSE_ARGS')) throw e;
    const see = `Run "baton ${command} --help" for its options.`;
    const message = (e as Error).message;
    // node quotes the option as '--name', '-o, --name <value>' or '--name=x': prefer the long form.
    const flag = /--[A-Za-z0-9][\w-]*/.exec(message)?.[0] ?? /'(-[^' ,=]+)/.exec(message)?.[1];
    if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && flag !== undefined) {
      const known = Object.keys(config.options ?? {});
      const name = flag.replace(/^-+/, '');
      throw new UsageError(`unknown option ${flag}${didYouMean(name, known, (n) => `--${n}`)}. ${see}`);
    }
    if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && flag !== undefined) {
      const option = config.options?.[flag.replace(/^-+/, '')];
      throw new UsageError(
        option?.type === 'boolean'
          ? `option ${flag} takes no value. ${see}`
          : `option ${flag} needs a value, as in ${flag} <value>. ${see}`,
      );
    }
    if (code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') {
      const arg = /'([^']*)'/.exec(message)?.[1];
      throw new UsageError(`unexpected argument${arg === undefined ? '' : ` "${arg}"`}. ${see}`);
    }
    throw new UsageError(`${message} ${see}`);
  }
}

/**
 * `--max-cost -1`: node's parseArgs reads `-1` as an option and reports the flag as missing its
 * value. A negative number after an option that takes a value is that value (`--max-cost=-1`),
 * so the option's own check can say what is wrong with it.
 */
export function negativeValuesAttached(args: readonly string[], options: NonNullable<ParseArgsConfig['options']>): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const next = args[i + 1];
    const name = /^--([^=]+)$/.exec(arg)?.[1];
    if (name !== undefined && options[name]?.type === 'string' && next !== undefined && /^-(\d|\.\d)/.test(next)) {
      out.push(`${arg}=${next}`);
      i++;
    } else out.push(arg);
  }
  return out;
}

/** One subcommand of a command group ("baton context add", "baton keys rotate"). */
export interface Subcommand {
  readonly run: (argv: string[], io: CliIo) => Promise<number>;
  readonly summary: string;
}

/** The help of a command group: usage, then one line per subcommand. */
export function groupHelp(group: string, about: string, table: Readonly<Record<string, Subcommand>>, footer = ''): string {
  const width = Math.max(...Object.keys(table).map((n) => n.length)) + 2;
  return [
    `Usage: baton ${group} <${Object.keys(table).join('|')}> [options]`,
    '',
    about,
    '',
    'Commands:',
    ...Object.entries(table).map(([name, s]) => `  ${name.padEnd(width)} ${s.summary}`),
    '',
    `Run "baton ${group} <command> --help" for a command's options.`,
    ...(footer ? ['', footer] : []),
  ].join('\n');
}

/**
 * Runs `baton <group> <sub> ...`: a typo gets "did you mean", a bare group
 * or --help prints the group's help.
 */
export async function runSubcommand(
  group: string,
  argv: string[],
  io: CliIo,
  table: Readonly<Record<string, Subcommand>>,
  help: string,
): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    io.out(help);
    return name === undefined ? EXIT_USAGE : 0;
  }
  const sub = Object.hasOwn(table, name) ? table[name] : undefined;
  if (!sub) {
    const hint = didYouMean(name, Object.keys(table), (n) => `"baton ${group} ${n}"`);
    throw new UsageError(`unknown command "${group} ${name}"${hint}`, help);
  }
  try {
    return await sub.run(rest, io);
  } catch (e) {
    if (e !== null && typeof e === 'object' && !failedSubcommand.has(e)) failedSubcommand.set(e, `${group} ${name}`);
    throw e;
  }
}

/** The subcommand ("keys rotate") an error thrown out of runSubcommand came from, so main can name it. */
export const failedSubcommand = new WeakMap<object, string>();
