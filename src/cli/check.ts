/**
 * `baton check <bundle.json>`: asks the service whether it WOULD allow a
 * bundle (POST /v1/verify/dry-run): every check the real verify
 * runs, the stored chain, revocation, replay and the counters, consuming
 * nothing and storing nothing. The answer comes with the full explanation.
 */
import { parseCliArgs } from './args.js';
import { clientFrom, COMMON_OPTIONS, printJson, readJsonArg, readText, SERVER_HELP, SERVER_OPTIONS } from './common.js';
import { printableLines, printedItems, UsageError, type CliIo } from './io.js';
import { explainDecision, parseBundleFile } from './verify.js';
import type { Bundle } from '../protocol/records.js';

export const CHECK_HELP = `Usage: baton check <bundle.json> [--body <json|file>] [--require-binding] [options]

Asks the service whether it would allow this invocation now: a dry run of
POST /v1/verify/dry-run with every check the real verify makes,
against the stored chain, revocations, replay and the call and budget
counters. Nothing is consumed, counted or stored. "-" reads stdin.

The file holds a bundle as baton invoke writes it, a DRS fixture with one
under "bundle", or the base64url X-DRS-Bundle form.

Options:
  --body <json|file>   the request body the tool would receive; compared with
                       the signed args (inline JSON or a file)
  --require-binding    deny unless --body equals the signed args
  --json               print the service's answer
  -h, --help           show this help

${SERVER_HELP}
The key needs the verify scope.

Exit codes: 0 would be allowed (also ALREADY ALLOWED: the invocation was
allowed before, and a re-send runs nothing new; the MCP middleware and /verify
refuse it as a replay, so sign a new one), 1 would be denied (or refused),
2 unusable input, 3 server unreachable, timed out or failing.`;

export async function runCheck(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('check', {
    args: argv,
    allowPositionals: true,
    options: {
      body: { type: 'string' },
      'require-binding': { type: 'boolean', default: false },
      ...SERVER_OPTIONS,
      ...COMMON_OPTIONS,
    },
  });
  if (values.help) {
    io.out(CHECK_HELP);
    return 0;
  }
  const file = positionals[0];
  if (!file || positionals.length > 1) throw new UsageError('give exactly one bundle file', CHECK_HELP);
  const bundle = parseBundleFile(await readText(file, 'bundle file'), file);
  if (!bundle || typeof bundle !== 'object' || !('invocation' in bundle)) {
    throw new UsageError(`${file} holds no invocation: baton check judges a bundle (baton invoke writes one)`, CHECK_HELP);
  }
  if (values['require-binding'] && values.body === undefined)
    throw new UsageError('--require-binding needs --body (the request the tool would receive)', CHECK_HELP);
  const body = values.body !== undefined ? await readJsonArg(values.body, '--body') : undefined;

  const client = clientFrom(values, io);
  io.err(`checking (dry run, nothing is counted) on ${client.baseUrl} ...`);
  const result = await client.verify(bundle as Bundle, {
    dryRun: true,
    ...(body !== undefined ? { body } : {}),
    ...(values['require-binding'] ? { requireBinding: true } : {}),
  });
  if (values.json) {
    printJson(io, result);
    return result.valid ? 0 : 1;
  }
  // The wire types are looser than the protocol's (plain strings for hashes); the shape is the same.
  // An invocation allowed before is no call to make again: a re-send is a retry (it runs nothing new),
  // and a tool server behind the MCP middleware or DRS's /verify refuses it as a replay.
  const verdict = result.valid && result.retry ? 'ALREADY ALLOWED' : undefined;
  const lines = [
    explainDecision(result as Parameters<typeof explainDecision>[0]).replace(/^(ALLOWED|DENIED)/, (w) => verdict ?? `WOULD BE ${w}`),
  ];
  if (result.valid) {
    // Counters as they stand; the warnings count this call, as the real call would.
    const before = result.retry ? '' : ' (before this call)';
    const counters = printedItems(result.counters, (c) => [
      `  counter      ${c.dr}: ${c.calls_used} of ${c.max_calls} calls used${before}`,
    ]);
    const warnings = printedItems(result.warnings, (w) => [`  warning      ${w.message}`]);
    if (counters.length + warnings.length > 0) lines.push(printableLines([...counters, ...warnings]));
    if (result.retry)
      lines.push(
        '',
        'Already allowed: this invocation was allowed before. Sent again by the same key to /v1/verify, it gets the original allow and counts nothing; the MCP middleware and /verify refuse it as REPLAY_DETECTED, so a tool never runs twice on one invocation. Sign a new invocation for a new call.',
      );
    lines.push('', 'Dry run: nothing was counted or stored.');
  }
  if (result.request_id) lines.push('', printableLines([`Request id: ${result.request_id}`]));
  io.out(lines.join('\n'));
  return result.valid ? 0 : 1;
}
