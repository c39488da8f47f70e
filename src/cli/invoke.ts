/**
 * `baton invoke`: sign an invocation under a delegation chain you hold and
 * write the DRS bundle a tool server passes to /v1/verify.
 */
import { parseCliArgs } from './args.js';
import { isRecordHash } from '../protocol/hash.js';
import { BatonError } from '../protocol/errors.js';
import { createInvocation, makeBundle, readDelegation } from '../sdk/records.js';
import { verifyChain } from '../protocol/chain.js';
import {
  COMMON_OPTIONS,
  EXIT_HELP,
  lazyClientFrom,
  moneyFlag,
  printJson,
  readJsonArg,
  readKeyFile,
  readRecordFile,
  SERVER_HELP,
  SERVER_OPTIONS,
  shortHash,
  STDOUT_PATH,
  writeOutputFile,
} from './basics.js';
import { UsageError, type CliIo } from './io.js';

export const INVOKE_HELP = `Usage: baton invoke --key <keyfile> --chain <file|hash> --tool <name> --tool-server <uri> [options]

Signs an invocation (the call you are about to make) with the key that holds
the leaf of the chain, and prints the DRS 4.0 bundle
{bundle_version, invocation, receipts} a tool server verifies with
POST /v1/verify (or \`baton verify\` offline).

The signed args are what every policy in the chain is checked against.
pii_access and write_access are declared false unless you pass --pii /
--write (or set them in --args): policies fail closed when they are absent.

A call the chain's own rules deny (a tool not allowed, a missing --cost, an
expired chain) is still signed, with a warning on stderr naming why. Whether
a tenant trusts the root, and revocation and counters, only the service knows.

Options:
  --key <keyfile>         your key file (you are the aud of the leaf DR)
  --chain <file|hash>     the chain, root first: a chain file (baton delegate
                          --out, or GET /v1/delegations/{hash}/chain), JWS
                          files (repeat --chain, root first), or the hash of a
                          stored leaf DR (fetched with --server/--api-key)
  --tool <name>           args.tool
  --args <json|file>      further args as a JSON object (e.g. '{"query":"x"}')
  --cost <usd>            args.estimated_cost_usd (required where a policy sets max_cost_usd)
  --resource <uri>        args.resource_uri
  --data-class <name>     args.data_class
  --pii / --write         declare args.pii_access / args.write_access true
  --tool-server <uri>     the tool server that will run it (e.g. mcp://search)
  --cmd <path>            command (default: the leaf's)
  --jti <inv:id>          invocation id (default: a random inv:uuid)
  --by-reference          leave receipts empty: the service resolves the chain
                          by hash (it must be stored; keeps requests small)
  --out <file>            write the bundle there, and print only its jti
                          ("-": the bundle on stdout, the jti on stderr)
  --json                  print {jti, hash, bundle}
  -h, --help              show this help

${SERVER_HELP}

${EXIT_HELP}`;

export async function runInvoke(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('invoke', {
    args: argv,
    allowPositionals: true,
    options: {
      key: { type: 'string' },
      chain: { type: 'string', multiple: true },
      tool: { type: 'string' },
      args: { type: 'string' },
      cost: { type: 'string' },
      resource: { type: 'string' },
      'data-class': { type: 'string' },
      pii: { type: 'boolean' },
      write: { type: 'boolean' },
      'tool-server': { type: 'string' },
      cmd: { type: 'string' },
      jti: { type: 'string' },
      'by-reference': { type: 'boolean', default: false },
      out: { type: 'string', short: 'o' },
      ...SERVER_OPTIONS,
      ...COMMON_OPTIONS,
    },
  });
  if (values.help) {
    io.out(INVOKE_HELP);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`, INVOKE_HELP);
  if (!values.key) throw new UsageError('give --key <keyfile> (the holder of the leaf delegation signs the call)', INVOKE_HELP);
  const chainArgs = values.chain ?? [];
  if (chainArgs.length === 0) throw new UsageError('give --chain <file|hash>: the delegation chain you act under, root first', INVOKE_HELP);
  if (!values['tool-server'])
    throw new UsageError('give --tool-server <uri> (the tool server that will verify and run the call)', INVOKE_HELP);
  if (values.out === STDOUT_PATH && values.json)
    throw new UsageError('--out - prints the bundle on stdout, and --json prints its own answer there: give one', INVOKE_HELP);

  const extra = values.args !== undefined ? await readJsonArg(values.args, '--args') : {};
  if (!extra || typeof extra !== 'object' || Array.isArray(extra))
    throw new UsageError('--args must be a JSON object such as {"query": "weather"}');
  const args: Record<string, unknown> = { pii_access: false, write_access: false, ...(extra as Record<string, unknown>) };
  if (values.tool !== undefined) {
    if (args['tool'] !== undefined && args['tool'] !== values.tool)
      throw new UsageError(`--tool "${values.tool}" differs from "tool" in --args`);
    args['tool'] = values.tool;
  }
  if (args['tool'] === undefined) throw new UsageError('give --tool <name> (or "tool" in --args)', INVOKE_HELP);
  if (values.cost !== undefined) args['estimated_cost_usd'] = moneyFlag('--cost', values.cost);
  if (values.resource !== undefined) args['resource_uri'] = values.resource;
  if (values['data-class'] !== undefined) args['data_class'] = values['data-class'];
  if (values.pii) args['pii_access'] = true;
  if (values.write) args['write_access'] = true;

  const invoker = await readKeyFile(values.key);
  const chain: string[] = [];
  for (const c of chainArgs) {
    if (isRecordHash(c)) {
      const client = await lazyClientFrom(values, io);
      io.err(`fetching the chain of ${shortHash(c)} from ${client.baseUrl} ...`);
      chain.push(...(await client.getChain(c)).receipts);
    } else {
      chain.push(...(await readRecordFile(c)));
    }
  }

  const leaf = readDelegation(chain[chain.length - 1]!);
  if (leaf.payload.aud !== invoker.did) {
    throw new BatonError('ISSUER_AUDIENCE_GAP', {
      message: `The leaf delegation ${leaf.hash} is held by ${leaf.payload.aud}, but --key is ${invoker.did}; only the holder of the leaf can invoke under it.`,
      violations: [{ code: 'ISSUER_AUDIENCE_GAP', field: 'iss', required: leaf.payload.aud, actual: invoker.did }],
    });
  }
  const invocation = createInvocation({
    chain,
    invoker,
    args,
    toolServer: values['tool-server'],
    ...(values.cmd !== undefined ? { cmd: values.cmd } : {}),
    ...(values.jti !== undefined ? { jti: values.jti } : {}),
  });
  const bundle = makeBundle(invocation, chain, values['by-reference'] ? 'reference' : 'value');
  io.err(
    `signed invocation ${invocation.payload.jti} (${shortHash(invocation.hash)}): tool "${String(args['tool'])}" on ${invocation.payload.tool_server}, chain of ${chain.length}${values['by-reference'] ? ' by reference' : ''}`,
  );
  warnIfItCannotPass(invocation.payload.jti, makeBundle(invocation, chain, 'value'), io);

  const text = JSON.stringify(bundle, null, 2);
  if (values.out === STDOUT_PATH) {
    // The bundle on stdout is what invoke prints without --out; the jti goes to stderr.
    io.out(text);
    io.err(`wrote the bundle to stdout; its jti is ${invocation.payload.jti}`);
    return 0;
  }
  if (values.out !== undefined) {
    await writeOutputFile(values.out, `${text}\n`, '--out');
  }
  if (values.json)
    printJson(io, { jti: invocation.payload.jti, hash: invocation.hash, bundle, ...(values.out ? { file: values.out } : {}) });
  else if (values.out !== undefined) {
    io.out(invocation.payload.jti);
    io.err(`wrote the bundle to ${values.out}`);
  } else io.out(text);
  return 0;
}

/**
 * The chain's own rules, checked before the bundle leaves: a call they deny is still signed (the
 * verifier decides, and a denied call is a useful test), but not silently. Trusts the chain's own
 * root, so only the service can say whether a tenant trusts it, or whether a DR is revoked or spent.
 */
function warnIfItCannotPass(jti: string, bundle: unknown, io: CliIo): void {
  let decision: ReturnType<typeof verifyChain>;
  try {
    const root = (bundle as { receipts: string[] }).receipts[0]!;
    decision = verifyChain(bundle, { now: Math.floor(Date.now() / 1000), trustedRoots: [readDelegation(root).payload.iss] });
  } catch (e) {
    // Only a warning: the bundle is signed, and is printed whatever this check could not read.
    io.err(`warning: ${jti} could not be checked against its chain here (${e instanceof Error ? e.message : String(e)})`);
    return;
  }
  if (decision.valid) return;
  const fields = [...new Set(decision.violations.map((v) => v.field))].join(', ');
  io.err(
    `warning: ${jti} cannot pass its own chain: ${decision.error.code} (${fields}). ${decision.error.message} It is signed anyway; "baton verify" on the bundle explains every unmet condition.`,
  );
}
