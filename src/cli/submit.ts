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
import { oneLine, UsageError, type CliIo } from './io.js';
import { recordHash } from '../protocol/hash.js';

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
Refused (exit 1): untrusted root, unknown or revoked parent, escalation; an
answer about other records than those sent (nothing of it is shown as theirs).
Malformed records (exit 2).`;

/**
 * Why the service's answer is not about the records sent, if it is not: it lists one stored record
 * for each sent, in order. Printed as theirs, a hostile or mistaken server's answer would pass off
 * other records (another chain, another status) as the ones just stored.
 */
function notTheRecordsSent(sent: readonly string[], answered: readonly { readonly hash: string }[]): string | undefined {
  if (answered.length !== sent.length) return `it lists ${answered.length} record(s) for the ${sent.length} sent`;
  const hashes = sent.map((jws) => recordHash(jws));
  const differing = answered.findIndex((d, i) => d.hash !== hashes[i]);
  if (differing < 0) return undefined;
  return `delegations[${differing}] is ${JSON.stringify(answered[differing]!.hash)}, but the record sent there hashes to ${hashes[differing]}`;
}

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
  const mismatch = notTheRecordsSent(records, result.delegations);
  if (mismatch !== undefined) {
    const message = `The service answered about other records than those sent: ${mismatch}.`;
    const suggestion = `Check that --server names the Baton service meant; whether the records were stored: baton chain ${recordHash(records[records.length - 1]!)}.`;
    if (values.json) printJson(io, { error: { code: 'UNEXPECTED_RESPONSE', message, suggestion } });
    else io.out([`NOT THESE RECORDS: ${message}`, `  Nothing of its answer is shown as theirs. ${suggestion}`].map(oneLine).join('\n'));
    return 1;
  }
  if (values.json) {
    printJson(io, result);
    return 0;
  }
  // Each line holds the service's text: kept on its one line.
  io.out(
    oneLine(
      `${result.created ? 'STORED' : 'ALREADY STORED'}: ${result.delegations.length} delegation record(s)${result.tenant_id ? ` for tenant ${result.tenant_id}` : ''}`,
    ),
  );
  for (const d of result.delegations) {
    io.out(
      oneLine(
        // A keyless answer shows no status (nothing stored about a record): the column is left out.
        `  ${d.hash}  ${d.depth === undefined ? '' : `depth ${d.depth}  `}${d.status === undefined ? '' : `${d.status.padEnd(7)}  `}${shortDid(d.iss)} -> ${shortDid(d.aud)}${d.service_receipt ? `  service receipt #${d.service_receipt.id}` : ''}`,
      ),
    );
  }
  const leaf = result.delegations[result.delegations.length - 1]!;
  io.out(`\nLeaf: ${leaf.hash}\nRead it back with: baton chain ${shortHash(leaf.hash, true)}`);
  if (result.delegations.some((d) => d.status === 'held')) io.out(`\n${HELD_ADVICE}`);
  return 0;
}
