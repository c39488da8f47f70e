/** `baton submit <file>...`: POST signed delegation records to the service. */
import { parseCliArgs } from './args.js';
import {
  clientFrom,
  COMMON_OPTIONS,
  EXIT_HELP,
  HELD_ADVICE,
  printJson,
  readRecordFile,
  SERVER_HELP,
  SERVER_OPTIONS,
  shortDid,
  shortHash,
} from './common.js';
import { UsageError, type CliIo } from './io.js';

export const SUBMIT_HELP = `Usage: baton submit <file> [<file> ...] [options]

Stores signed delegation records in Baton (POST /v1/delegations). The
records, root first, come from the files in order: chain files
({"receipts": [...]}, as baton delegate --out writes), JWS files (as baton
delegate prints), or JSON arrays of JWS; "-" reads stdin.

The first record must be a root signed by a key the tenant trusts, or extend
a stored, live DR; every record is verified (signatures, linkage,
attenuation, time) before anything is stored. Submitting the same records
again is harmless (nothing changes). No API key is needed: the signatures
are the proof; with one (issue scope) the records go to its tenant.

Options:
  --json               print the service's answer
  -h, --help           show this help

${SERVER_HELP}

${EXIT_HELP}
Refused (exit 1): untrusted root, unknown or revoked parent, escalation.
Malformed records (exit 2).`;

export async function runSubmit(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('submit', {
    args: argv,
    allowPositionals: true,
    options: { ...SERVER_OPTIONS, ...COMMON_OPTIONS },
  });
  if (values.help) {
    io.out(SUBMIT_HELP);
    return 0;
  }
  if (positionals.length === 0) throw new UsageError('give at least one file of signed records', SUBMIT_HELP);
  const records: string[] = [];
  for (const file of positionals) records.push(...(await readRecordFile(file)));
  const client = clientFrom(values, io);
  io.err(`submitting ${records.length} record(s) to ${client.baseUrl} ...`);
  const result = await client.submit(records);
  if (values.json) {
    printJson(io, result);
    return 0;
  }
  io.out(
    `${result.created ? 'STORED' : 'ALREADY STORED'}: ${result.delegations.length} delegation record(s)${result.tenant_id ? ` for tenant ${result.tenant_id}` : ''}`,
  );
  for (const d of result.delegations) {
    io.out(
      // A keyless answer shows no status (nothing stored about a record): the column is left out.
      `  ${d.hash}  ${d.depth === undefined ? '' : `depth ${d.depth}  `}${d.status === undefined ? '' : `${d.status.padEnd(7)}  `}${shortDid(d.iss)} -> ${shortDid(d.aud)}${d.service_receipt ? `  service receipt #${d.service_receipt.id}` : ''}`,
    );
  }
  const leaf = result.delegations[result.delegations.length - 1]!;
  io.out(`\nLeaf: ${leaf.hash}\nRead it back with: baton chain ${shortHash(leaf.hash, true)}`);
  if (result.delegations.some((d) => d.status === 'held')) io.out(`\n${HELD_ADVICE}`);
  return 0;
}
