/**
 * `baton delegate`: sign a root or sub-delegation with your key file.
 * A sub-delegation is checked against its parent before it is signed, with
 * the rules and codes the service applies, so an escalation is refused here
 * (exit 1) without a round trip.
 */
import { parseCliArgs } from './args.js';
import { isRecordHash } from '../protocol/hash.js';
import { ROOT_TYPES, type RootType } from '../protocol/lists.js';
import { parsePolicy, type Policy } from '../protocol/policy.js';
import { createRootDelegation, createSubDelegation, readDelegation, type SignedDelegation } from '../sdk/records.js';
import {
  COMMON_OPTIONS,
  durationFlag,
  EXIT_HELP,
  formatPolicy,
  HELD_ADVICE,
  integerFlag,
  lazyClientFrom,
  listFlag,
  moneyFlag,
  printJson,
  readJsonArg,
  readKeyFile,
  readRecordFile,
  SERVER_HELP,
  SERVER_OPTIONS,
  shortDid,
  shortHash,
  stageOutputFile,
  STDOUT_PATH,
  unixTimeText,
} from './basics.js';
import { oneLine, UsageError, type CliIo } from './io.js';

export const DELEGATE_HELP = `Usage: baton delegate --key <keyfile> --to <did> [--parent <chain-file|hash>] <policy> [options]

Signs a delegation record (DR) granting <did> authority under a policy.
Without --parent it is a root DR, signed by your key as the root principal
(the tenant must trust that key: an operator registers it as a root). With
--parent it is a sub-delegation of a DR you hold (you are its aud): the new
policy must narrow the parent's, and this is checked before signing.

Prints the signed record (compact JWS) on stdout. With --out it writes the
chain root-to-new as {"receipts": [...]}, the file invoke --chain, submit and
a later delegate --parent read, and prints only the new record's hash (so
ROOT=$(baton delegate ... --out root.json) captures it).

Policy (a file or inline JSON, and/or flags; flags override the file):
  --policy <file|json>     e.g. '{"allowed_tools":["search"],"max_calls":10}'
  --tools <a,b>            allowed_tools
  --max-cost <usd>         max_cost_usd per call
  --max-calls <n>          max_calls (counted across the whole subtree)
  --max-spend <usd>        max_spend_usd (metered budget of the subtree)
  --max-depth <n>          further hops allowed
  --resources <p,q>        allowed_resources (exact URIs or prefixes ending in /*)
  --data-classes <a,b>     allowed_data_classes
  --pii / --write          grant pii_access / write_access (else signed as false,
                           so a DRS verifier, reading absent as unrestricted, agrees)
  Give at least one (use --policy '{}' for a root without limits).

Validity (default: 1 hour for a root, from --nbf when later than now; the
parent's window for a sub-DR):
  --ttl <duration>         expires this long from now (from --nbf when later):
                           3600, 30m, 12h, 7d
  --exp <unix|never>       expires at this time (never = no expiry)
  --nbf <unix>             not valid before this time

Record options:
  --key <keyfile>          your key file (from baton keygen)
  --to <did>               the agent receiving the authority (its did:key)
  --parent <file|hash>     the DR to extend: a chain file, a JWS file, or the
                           hash of a stored DR (fetched with --server/--api-key)
  --cmd <path>             command scope (default /mcp/tools/call, or the parent's)
  --subject <did>          root only: the principal the chain acts for (default: you)
  --root-type <type>       root only: organisation (default), automated-system, human
  --consent <file|json>    root only: drs_consent {method, timestamp, ...} (required for human)
  --jti <dr:id>            record id (default: a random dr:uuid)
  --out <file>             write the chain file, and print the hash, not the JWS
                           ("-": the chain file on stdout, the hash on stderr)
  --submit                 also POST the chain to the service (with --out, the
                           file is put in place once stored, or when it may be:
                           no answer, a timeout, a 5xx; send it again with
                           baton submit. A refusal leaves no file)
  --json                   print {hash, jws, payload, chain, submitted?}
  -h, --help               show this help

${SERVER_HELP}

${EXIT_HELP}
Refused here (exit 1): a sub-delegation that escalates the parent's policy,
outlives it, widens its cmd, or is not signed by the parent's holder.`;

export async function runDelegate(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('delegate', {
    args: argv,
    allowPositionals: true,
    options: {
      key: { type: 'string' },
      to: { type: 'string' },
      parent: { type: 'string' },
      policy: { type: 'string' },
      tools: { type: 'string' },
      'max-cost': { type: 'string' },
      'max-calls': { type: 'string' },
      'max-spend': { type: 'string' },
      'max-depth': { type: 'string' },
      resources: { type: 'string' },
      'data-classes': { type: 'string' },
      pii: { type: 'boolean' },
      write: { type: 'boolean' },
      ttl: { type: 'string' },
      exp: { type: 'string' },
      nbf: { type: 'string' },
      cmd: { type: 'string' },
      subject: { type: 'string' },
      'root-type': { type: 'string' },
      consent: { type: 'string' },
      jti: { type: 'string' },
      out: { type: 'string', short: 'o' },
      submit: { type: 'boolean', default: false },
      ...SERVER_OPTIONS,
      ...COMMON_OPTIONS,
    },
  });
  if (values.help) {
    io.out(DELEGATE_HELP);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`, DELEGATE_HELP);
  if (!values.key) throw new UsageError('give --key <keyfile> (the key that signs this delegation)', DELEGATE_HELP);
  if (!values.to) throw new UsageError('give --to <did:key:...> (the agent receiving the authority)', DELEGATE_HELP);
  if (values.ttl !== undefined && values.exp !== undefined) throw new UsageError('give --ttl or --exp, not both', DELEGATE_HELP);
  if (values.out === STDOUT_PATH && values.json)
    throw new UsageError('--out - prints the chain file on stdout, and --json prints its own answer there: give one', DELEGATE_HELP);
  const isSub = values.parent !== undefined;
  for (const rootOnly of ['subject', 'root-type', 'consent'] as const) {
    if (isSub && values[rootOnly] !== undefined)
      throw new UsageError(`--${rootOnly} applies to a root delegation only; a sub-delegation inherits it`, DELEGATE_HELP);
  }

  const issuer = await readKeyFile(values.key);
  const policy = await policyFrom(values);
  const now = Math.floor(Date.now() / 1000);
  const nbf = values.nbf !== undefined ? integerFlag('--nbf', values.nbf) : undefined;
  const time = {
    iat: now,
    ...(nbf !== undefined ? { nbf } : {}),
    // A lifetime runs from when the record starts to be valid.
    ...(values.ttl !== undefined ? { exp: Math.max(nbf ?? now, now) + durationFlag('--ttl', values.ttl) } : {}),
    ...(values.exp !== undefined ? { exp: values.exp === 'never' ? null : integerFlag('--exp', values.exp) } : {}),
  };
  const common = {
    issuer,
    audience: values.to,
    policy,
    ...time,
    ...(values.cmd !== undefined ? { cmd: values.cmd } : {}),
    ...(values.jti !== undefined ? { jti: values.jti } : {}),
  };

  let above: string[] = [];
  let signed: SignedDelegation;
  if (isSub) {
    above = await parentChain(values.parent!, values, io);
    const parent = readDelegation(above[above.length - 1]!);
    signed = createSubDelegation({ ...common, parent });
  } else {
    const rootType = values['root-type'];
    if (rootType !== undefined && !(ROOT_TYPES as readonly string[]).includes(rootType)) {
      throw new UsageError(`--root-type is one of ${ROOT_TYPES.join(', ')}, got "${rootType}"`);
    }
    const consent = values.consent !== undefined ? await readJsonArg(values.consent, '--consent') : undefined;
    signed = createRootDelegation({
      ...common,
      ...(values.subject !== undefined ? { subject: values.subject } : {}),
      ...(rootType !== undefined ? { rootType: rootType as RootType } : {}),
      ...(consent !== undefined ? { consent: consent as { method: string; timestamp: string } } : {}),
    });
  }
  const chain = [...above, signed.jws];
  const p = signed.payload;
  io.err(
    `signed ${isSub ? `sub-delegation (depth ${above.length})` : 'root delegation'} ${shortHash(signed.hash)}: ${shortDid(p.iss)} -> ${shortDid(p.aud)}, ` +
      `${formatPolicy(p.policy)}, expires ${p.exp === null ? 'never' : unixTimeText(p.exp)}`,
  );

  const chainFile = `${JSON.stringify({ receipts: chain }, null, 2)}\n`;
  // Written before anything is submitted: a path that cannot be written is refused before a store.
  const staged =
    values.out !== undefined && values.out !== STDOUT_PATH
      ? await stageOutputFile(values.out, chainFile, '--out', DELEGATE_HELP)
      : undefined;
  let submitted: unknown;
  if (values.submit) {
    let sent = false;
    try {
      const client = await lazyClientFrom(values, io);
      io.err(`submitting ${chain.length} record(s) to ${client.baseUrl} ...`);
      staged?.keepIfInterrupted((where) => io.err(mayBeStoredNote(where)));
      sent = true;
      const result = await client.submit(chain);
      const mine = result.delegations[result.delegations.length - 1]!;
      io.err(
        oneLine(
          `${result.created ? 'stored' : 'already stored'}: ${shortHash(mine.hash)} depth ${mine.depth}${mine.status === undefined ? '' : `, ${mine.status}`}${result.tenant_id ? `, tenant ${result.tenant_id}` : ''}`,
        ),
      );
      if (mine.status === 'held') io.err(HELD_ADVICE);
      submitted = result;
    } catch (e) {
      if (staged === undefined) throw e;
      if (!sent || !(await mayBeStored(e))) {
        await staged.discard();
        throw e;
      }
      // The chain is kept to be sent again: signing anew would make another record, not this one.
      try {
        await staged.commit();
        io.err(mayBeStoredNote(values.out!));
      } catch (notWritten) {
        io.err(`${(notWritten as Error).message}; the new record, which may be stored: ${signed.jws}`);
      }
      throw e;
    }
  }
  if (staged !== undefined) {
    try {
      await staged.commit();
    } catch (e) {
      // Only if the path changed under us since it was staged; the record's hash must still be told.
      if (values.submit) io.err(`the chain was stored as ${signed.hash}, but not written:`);
      throw e;
    }
  }

  if (values.json) {
    printJson(io, {
      hash: signed.hash,
      jws: signed.jws,
      payload: signed.payload,
      chain,
      ...(values.out ? { file: values.out } : {}),
      ...(submitted ? { submitted } : {}),
    });
  } else if (values.out === STDOUT_PATH) {
    io.out(chainFile.trimEnd());
    io.err(`wrote the chain (${chain.length} record(s), root first) to stdout; the new record is ${signed.hash}`);
  } else if (values.out !== undefined) {
    // stdout carries only the hash, so scripts can capture it; the note goes to stderr.
    io.out(signed.hash);
    io.err(`wrote the chain (${chain.length} record(s), root first) to ${values.out}`);
  } else {
    io.out(signed.jws);
  }
  return 0;
}

type Values = Record<string, string | boolean | undefined>;

/**
 * Whether a submission that failed may have stored the records all the same: only an answer
 * refusing them (4xx) says they were not; with no answer (a timeout, a dropped connection), a 5xx
 * or an answer baton cannot read, the service may have stored them before the failure.
 */
async function mayBeStored(e: unknown): Promise<boolean> {
  const { BatonApiError } = await import('../sdk/client.js');
  return !(e instanceof BatonApiError && e.status >= 400 && e.status < 500);
}

const mayBeStoredNote = (file: string) =>
  `the record may be stored all the same: the chain is in ${file}; send it again with ` +
  `baton submit ${file} (with the same server options; sending it again is harmless)`;

async function policyFrom(values: Values): Promise<Policy> {
  const base = typeof values['policy'] === 'string' ? await readJsonArg(values['policy'], '--policy') : undefined;
  if (base !== undefined && (base === null || typeof base !== 'object' || Array.isArray(base))) {
    throw new UsageError('--policy must be a JSON object such as {"allowed_tools": ["search"], "max_calls": 10}');
  }
  const flags: Record<string, unknown> = {};
  const str = (k: string) => (typeof values[k] === 'string' ? (values[k] as string) : undefined);
  if (str('tools') !== undefined) flags['allowed_tools'] = listFlag(str('tools')!);
  if (str('max-cost') !== undefined) flags['max_cost_usd'] = moneyFlag('--max-cost', str('max-cost')!);
  if (str('max-calls') !== undefined) flags['max_calls'] = integerFlag('--max-calls', str('max-calls')!);
  if (str('max-spend') !== undefined) flags['max_spend_usd'] = moneyFlag('--max-spend', str('max-spend')!);
  if (str('max-depth') !== undefined) flags['max_depth'] = integerFlag('--max-depth', str('max-depth')!);
  if (str('resources') !== undefined) flags['allowed_resources'] = listFlag(str('resources')!);
  if (str('data-classes') !== undefined) flags['allowed_data_classes'] = listFlag(str('data-classes')!);
  if (values['pii'] !== undefined) flags['pii_access'] = values['pii'];
  if (values['write'] !== undefined) flags['write_access'] = values['write'];
  if (base === undefined && Object.keys(flags).length === 0) {
    throw new UsageError(
      "give a policy: --policy <file|json> and/or flags such as --tools and --max-calls (--policy '{}' grants without limits)",
      DELEGATE_HELP,
    );
  }
  // parsePolicy refuses unknown fields and out-of-range values (INVALID_FIELD, exit 2). Access not
  // granted is signed as false by signDelegation, as every signing path does.
  return parsePolicy({ ...(base as object | undefined), ...flags });
}

/** The chain root -> parent: from a chain/JWS file, or fetched from the service by hash. */
async function parentChain(parent: string, values: Values, io: CliIo): Promise<string[]> {
  if (isRecordHash(parent)) {
    const client = await lazyClientFrom(values, io);
    io.err(`fetching the chain of ${shortHash(parent)} from ${client.baseUrl} ...`);
    return [...(await client.getChain(parent)).receipts];
  }
  return readRecordFile(parent);
}
