/**
 * `baton revoke <hash>`: revoke a delegation and, with it, every delegation
 * under it, with an API key (--reason) or a signed revocation record (--key).
 */
import { parseCliArgs } from './args.js';
import type { RevokeResult } from '../sdk/client.js';
import {
  clientFrom,
  COMMON_OPTIONS,
  EXIT_HELP,
  printJson,
  readKeyFile,
  requireHash,
  SERVER_HELP,
  SERVER_OPTIONS,
  shortHash,
} from './common.js';
import { oneLine, UsageError, type CliIo } from './io.js';

export const REVOKE_HELP = `Usage: baton revoke <hash> --reason <text> [--api-key <key>]
       baton revoke <hash> --key <keyfile> [--reason <text>]

Revokes a stored delegation record (DR). Revocation cascades: the DR and
every DR under it are denied RECEIPT_REVOKED from this moment, on every
Baton node. It cannot be undone; revoking again changes nothing.

Two ways to prove you may:
  with an API key (issue scope of the DR's tenant, or the admin key):
    --reason is required; it is stored and signed into the service receipt.
  with your key file, without an API key (--key):
    signs a revocation record {iss, target, iat, jti, reason?}; accepted from
    the DR's issuer, the root issuer, or the holder of any DR above it (the
    DR's own holder cannot revoke what it was given).

Options:
  --reason <text>      why (at most 500 characters)
  --key <keyfile>      sign a revocation record instead of using an API key
  --json               print the service's answer
  -h, --help           show this help

${SERVER_HELP}

${EXIT_HELP}
Refused (exit 1): unknown DR (404), key without the scope, signer without authority.`;

export async function runRevoke(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('revoke', {
    args: argv,
    allowPositionals: true,
    options: { reason: { type: 'string' }, key: { type: 'string' }, ...SERVER_OPTIONS, ...COMMON_OPTIONS },
  });
  if (values.help) {
    io.out(REVOKE_HELP);
    return 0;
  }
  if (positionals.length > 1) throw new UsageError('give exactly one delegation hash', REVOKE_HELP);
  const hash = requireHash(positionals[0], 'hash of the delegation to revoke', REVOKE_HELP);
  const reason = values.reason;
  if (reason !== undefined && reason.trim() === '') throw new UsageError('--reason must not be blank', REVOKE_HELP);
  const client = clientFrom(values, io);

  let result: RevokeResult;
  if (values.key !== undefined) {
    const signer = await readKeyFile(values.key);
    io.err(`signing a revocation of ${shortHash(hash)} as ${signer.did} ...`);
    result = await client.revokeSigned({ signer, target: hash, ...(reason !== undefined ? { reason } : {}) });
  } else {
    if (reason === undefined)
      throw new UsageError('give --reason <text> (required with an API key), or --key <keyfile> to sign a revocation', REVOKE_HELP);
    result = await client.revoke(hash, reason);
  }
  if (values.json) {
    printJson(io, result);
    return 0;
  }
  const who = revokerOf(result.revoked_by);
  // A keyless caller's answer about a record revoked another way leaves out the revoker's id and
  // the reason (they are the tenant's or the operator's): the reason is withheld, not missing.
  const withheld = result.revoked_by.id === undefined;
  io.out(
    [
      `${result.already_revoked ? 'ALREADY REVOKED' : 'REVOKED'}: ${result.hash}`,
      `  at               ${result.revoked_at}`,
      `  by               ${who}`,
      `  reason           ${result.reason ?? (withheld ? withheldReason(result.revoked_by.kind, who) : '(none given)')}`,
      `  descendants      ${result.descendants} more delegation record(s) under it are denied too`,
      ...(result.service_receipt ? [`  service receipt  #${result.service_receipt.id} (signed by ${result.service_receipt.kid})`] : []),
    ]
      // The reason is another party's text: kept on its one line, so it cannot fake the lines after it.
      .map(oneLine)
      .join('\n'),
  );
  return 0;
}

/**
 * Who revoked, as the answer tells it. An admin key is the operator's, never the tenant's; the id
 * is absent in a keyless caller's answer about a record it did not revoke itself.
 */
function revokerOf({ kind, id }: RevokeResult['revoked_by']): string {
  switch (kind) {
    case 'admin':
      return id === undefined ? "the operator's admin key" : `the operator's admin key (${id})`;
    case 'api_key':
      return id === undefined ? 'an API key of the tenant' : `API key ${id} of the tenant`;
    case 'did':
      return id ?? 'a signed revocation record (its signer is not shown to this caller)';
  }
}

/** The reason line when the answer withholds it: a key's words are its tenant's or the operator's. */
function withheldReason(kind: RevokeResult['revoked_by']['kind'], who: string): string {
  return kind === 'did' ? '(not shown to this caller)' : `(not shown to this caller: revoked by ${who})`;
}
