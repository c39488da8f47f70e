/** `baton report`: the metered cost of an allowed invocation, with where it came from. */
import { parseCliArgs } from './args.js';
import { ACTUAL_SOURCES, type ActualSource } from '../protocol/lists.js';
import {
  clientFrom,
  COMMON_OPTIONS,
  EXIT_HELP,
  formatUsd,
  integerFlag,
  moneyFlag,
  printJson,
  SERVER_HELP,
  SERVER_OPTIONS,
} from './common.js';
import { oneLine, UsageError, type CliIo } from './io.js';

export const REPORT_HELP = `Usage: baton report --jti <inv:id> --source <source> (--cost <usd> | --unavailable-reason <text>) [options]

Records what an allowed invocation actually cost (POST /v1/invocations/{jti}/actuals,
a key with report scope), next to the estimate the agent declared. Metered
spend is what max_spend_usd budgets are enforced on. One actual per
invocation: the same report again is harmless, a different one is refused.

Options:
  --jti <inv:id>                 the invocation (verify's invocation_id)
  --source <source>              where the number comes from, one of:
                                 ${ACTUAL_SOURCES.join(', ')}
  --cost <usd>                   the metered cost in US dollars (not with unavailable)
  --unavailable-reason <text>    why no cost can be given (source unavailable)
  --tokens-in <n>                input tokens, when known
  --tokens-out <n>               output tokens, when known
  --json                         print the service's answer
  -h, --help                     show this help

${SERVER_HELP}

${EXIT_HELP}
Refused (exit 1): unknown invocation (404), a different actual already recorded (409).`;

export async function runReport(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('report', {
    args: argv,
    allowPositionals: true,
    options: {
      jti: { type: 'string' },
      source: { type: 'string' },
      cost: { type: 'string' },
      'unavailable-reason': { type: 'string' },
      'tokens-in': { type: 'string' },
      'tokens-out': { type: 'string' },
      ...SERVER_OPTIONS,
      ...COMMON_OPTIONS,
    },
  });
  if (values.help) {
    io.out(REPORT_HELP);
    return 0;
  }
  if (positionals.length > 0)
    throw new UsageError(
      `unexpected argument "${positionals[0]}"${/^inv:/.test(positionals[0]!) ? `: name the invocation with --jti ${positionals[0]}` : ''}`,
      REPORT_HELP,
    );
  const jti = values.jti;
  if (!jti) throw new UsageError('give --jti <inv:...> (the invocation_id verify returned)', REPORT_HELP);
  const source = values.source as ActualSource | undefined;
  if (!source)
    throw new UsageError(`give --source: an actual without provenance is refused (one of ${ACTUAL_SOURCES.join(', ')})`, REPORT_HELP);
  if (!ACTUAL_SOURCES.includes(source))
    throw new UsageError(`--source is one of ${ACTUAL_SOURCES.join(', ')}, got "${source}"`, REPORT_HELP);
  const reason = values['unavailable-reason'];
  if (source === 'unavailable') {
    if (values.cost !== undefined)
      throw new UsageError('--cost cannot be given with --source unavailable (there is no metered cost)', REPORT_HELP);
    if (!reason?.trim()) throw new UsageError('--source unavailable needs --unavailable-reason <text>', REPORT_HELP);
  } else {
    if (values.cost === undefined) throw new UsageError(`--source ${source} needs --cost <usd>`, REPORT_HELP);
    if (reason !== undefined) throw new UsageError('--unavailable-reason goes with --source unavailable only', REPORT_HELP);
  }

  const client = clientFrom(values, io);
  const actual = await client.reportActual(jti, {
    source,
    ...(values.cost !== undefined ? { cost_usd: moneyFlag('--cost', values.cost) } : {}),
    ...(reason !== undefined ? { unavailable_reason: reason } : {}),
    ...(values['tokens-in'] !== undefined ? { tokens_in: integerFlag('--tokens-in', values['tokens-in']) } : {}),
    ...(values['tokens-out'] !== undefined ? { tokens_out: integerFlag('--tokens-out', values['tokens-out']) } : {}),
  });
  if (values.json) {
    printJson(io, actual);
    return 0;
  }
  const tokens =
    actual.tokens_in !== null || actual.tokens_out !== null
      ? `  tokens      ${actual.tokens_in ?? '?'} in, ${actual.tokens_out ?? '?'} out`
      : null;
  io.out(
    [
      `RECORDED: actual of ${actual.jti}`,
      `  metered     ${actual.cost_usd === null ? `unavailable (${actual.unavailable_reason})` : formatUsd(actual.cost_usd)} [${actual.source}]`,
      `  declared    ${formatUsd(actual.declared_usd)}`,
      ...(tokens ? [tokens] : []),
      `  recorded    ${actual.recorded_at}${actual.service_receipt ? `, service receipt #${actual.service_receipt.id}` : ''}`,
    ]
      .map(oneLine)
      .join('\n'),
  );
  return 0;
}
