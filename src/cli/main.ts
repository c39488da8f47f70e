/** `baton` command: dispatches to one module per subcommand. */
import { existsSync } from 'node:fs';
import { BatonError } from '../protocol/errors.js';
import { didYouMean, failedSubcommand } from './args.js';
import { DEFAULT_SERVER } from './basics.js';
import { batonVersionInfo } from '../version.js';
import { EXIT_UNREACHABLE, EXIT_USAGE, oneLine, processIo, terminalSafeIo, UsageError, type CliIo } from './io.js';

type Command = (argv: string[], io: CliIo) => Promise<number>;

/**
 * Each command's module is imported only when it runs: `serve` alone needs
 * the server (hono, drizzle, PGlite), only the online commands the HTTP
 * client, and the offline commands start fast (test/cli/startup.test.ts).
 */
const COMMANDS: Record<string, { load: () => Promise<Command>; summary: string }> = {
  keygen: {
    load: async () => (await import('./keygen.js')).runKeygen,
    summary: 'make a key pair (did:key) and write it to a 0600 key file',
  },
  delegate: {
    load: async () => (await import('./delegate.js')).runDelegate,
    summary: 'sign a root or sub-delegation (narrowing checked before signing)',
  },
  submit: { load: async () => (await import('./submit.js')).runSubmit, summary: 'store signed delegation records in the service' },
  invoke: { load: async () => (await import('./invoke.js')).runInvoke, summary: 'sign an invocation under a chain into a DRS bundle' },
  verify: {
    load: async () => (await import('./verify.js')).runVerify,
    summary: 'verify a DRS bundle offline (exit 0 allowed, 1 denied, 2 unusable input)',
  },
  check: {
    load: async () => (await import('./check.js')).runCheck,
    summary: 'ask the service whether it would allow a bundle (dry run, full explanation)',
  },
  inspect: {
    load: async () => (await import('./inspect.js')).runInspect,
    summary: 'decode records, bundles and service receipts WITHOUT verifying them',
  },
  'service-receipt': {
    load: async () => (await import('./service-receipt.js')).runServiceReceipt,
    summary: "check the service's signed service receipts against its published keys",
  },
  report: { load: async () => (await import('./report.js')).runReport, summary: 'record the metered cost of an allowed invocation' },
  invocations: {
    load: async () => (await import('./invocations.js')).runInvocations,
    summary: 'list verify decisions, filtered by subtree, tool, outcome, code and time (audit key)',
  },
  revoke: { load: async () => (await import('./revoke.js')).runRevoke, summary: 'revoke a delegation and everything under it' },
  // Issue 13: tool catalogs and approval gates.
  tools: { load: async () => (await import('./tools.js')).runTools, summary: "show or publish the tenant's tool catalog" },
  approvals: {
    load: async () => (await import('./tools.js')).runApprovals,
    summary: 'list, approve or reject calls and delegations waiting for a human',
  },
  chain: {
    load: async () => (await import('./chain.js')).runChain,
    summary: 'print a delegation as a tree: policies, status, calls, spend',
  },
  context: {
    load: async () => (await import('./context.js')).runContext,
    summary: 'save servers and keys under names; pick the current one',
  },
  tenants: { load: async () => (await import('./admin.js')).runTenants, summary: 'create and list tenants (admin key)' },
  keys: {
    load: async () => (await import('./admin.js')).runKeys,
    summary: "create, list, rotate and revoke tenants' API keys (admin key)",
  },
  roots: {
    load: async () => (await import('./admin.js')).runRoots,
    summary: "add, list and remove tenants' trusted root DIDs (admin key)",
  },
  serve: { load: async () => (await import('./serve.js')).runServe, summary: 'run the Baton service' },
  log: {
    load: async () => (await import('./log.js')).runLog,
    summary: "prove a service receipt is in the tenant's log; check saved inclusion and consistency proofs offline",
  },
  audit: {
    load: async () => (await import('./audit.js')).runAudit,
    summary: "replay the tenant's transparency log: root, signatures, missing or rewritten service receipts",
  },
  demo: {
    load: () => Promise.resolve(runDemoCommand),
    summary: 'run the whole story on an embedded Baton: delegate, call MCP tools, deny, audit',
  },
};

/**
 * `baton demo` runs examples/demo.ts (also `npm run demo`). Loaded on demand
 * by a computed path, so the service image, which ships src/ without
 * examples/, still type-checks and runs every other command.
 */
const DEMO_MODULE = new URL('../../examples/demo.js', import.meta.url);

/**
 * Whether this installation has the demo: a source checkout (examples/demo.ts
 * beside src/) does, the installed server package does not. Only then is demo
 * listed in the help.
 */
function demoAvailable(): boolean {
  return [DEMO_MODULE, new URL('../../examples/demo.ts', import.meta.url)].some((url) => url.protocol === 'file:' && existsSync(url));
}

/** `baton demo --help` where the demo is not installed: what it is and where it runs. */
const DEMO_ELSEWHERE_HELP = `Usage: baton demo (in a source checkout of Baton only)

Plays the whole story on an embedded Baton: delegate, call MCP tools through a
Baton-guarded tool server, deny, approve, audit. It lives in examples/ of the
repository, which this installation (the @baton-drs/server package) lacks.
Run it from a checkout instead: npm ci && npm run demo

Exit codes: 0 help shown, 2 the demo is not installed here.`;

async function runDemoCommand(argv: string[], io: CliIo): Promise<number> {
  const demoModule = DEMO_MODULE.href;
  if (!demoAvailable() && argv.some((a) => a === '--help' || a === '-h')) {
    io.out(DEMO_ELSEWHERE_HELP);
    return 0;
  }
  let demo: { runDemo: (argv: string[], io: CliIo) => Promise<number> };
  try {
    demo = (await import(demoModule)) as typeof demo;
  } catch (e) {
    if ((e as { code?: string }).code !== 'ERR_MODULE_NOT_FOUND' || !String((e as Error).message).includes('examples')) throw e;
    io.err(
      'baton demo: the demo lives in examples/ of a source checkout, which this installation lacks. Run it from the repository: npm ci && npm run demo',
    );
    return EXIT_USAGE;
  }
  return demo.runDemo(argv, io);
}

/** The commands this installation can run: demo only where its examples/ are (demoAvailable). */
function listedCommands(): [string, { summary: string }][] {
  return Object.entries(COMMANDS).filter(([name]) => name !== 'demo' || demoAvailable());
}

/** The command list, every summary in one column: padded to the longest name, so no name runs into its summary. */
function commandList(): string {
  const commands = listedCommands();
  const width = Math.max(...commands.map(([name]) => name.length));
  return commands.map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`).join('\n');
}

export const MAIN_HELP = () => `Usage: baton <command> [options]

Baton issues and verifies signed, attenuated DRS 4.0 delegation chains for AI agents.

Commands:
${commandList()}

A first chain:
  baton keygen --out operator.key         # the root key; the admin trusts its DID for the tenant:
  baton roots add <operator-did> --tenant <id>   # (or POST /v1/admin/tenants/{id}/roots, BatonClient.admin.addRoot)
  baton keygen --out agent.key            # prints the agent's DID
  baton delegate --key operator.key --to <agent-did> --tools search --max-calls 10 --out a.chain.json --submit
  baton invoke --key agent.key --chain a.chain.json --tool search --tool-server mcp://search --out bundle.json
  baton chain <hash> --api-key <audit key>

Online commands take --server <url>, --api-key <key>, --context <name> (a
saved server and key: baton context --help) and --timeout <ms>. Each setting
comes from its flag, else its variable ($BATON_URL, $BATON_API_KEY), else the
context ($BATON_CONTEXT, else the current one), else the default server
${DEFAULT_SERVER}. A --context flag outranks $BATON_URL and $BATON_API_KEY:
its server and key are used unless --server or --api-key is given. A
context's key goes only to the context's own server.
Every command but serve takes --json for output meant for scripts (refusals
and usage errors too: the service's error envelope, on stdout); progress goes
to stderr.

Exit codes:
  0  done (allowed, stored, revoked, ...)
  1  refused or denied (by the service, or by the same checks run locally)
  2  bad flags or unusable input (unreadable file, malformed record, 400);
     but verify and check judge a bundle: a malformed record inside one is
     a denial (exit 1, DENIED: MALFORMED_JWS, ...), as POST /v1/verify
     answers it
  3  the server could not be reached, timed out, failed (5xx) or answered
     unexpectedly (not a Baton answer, or an error baton did not expect)

Run "baton help <command>" or "baton <command> --help" for a command's
options; "baton --version" prints the version. An error baton did not expect
is one FAILED line (with --json, an UNEXPECTED_ERROR envelope on stdout too);
BATON_DEBUG=1 adds its stack trace on stderr.`;

export async function main(argv: string[], rawIo: CliIo = processIo): Promise<number> {
  const io = terminalSafeIo(rawIo);
  const [first, ...afterFirst] = argv;
  // `baton help keygen` is `baton keygen --help`.
  const helpFor = first === 'help' && afterFirst.length > 0;
  const [name, ...rest] = helpFor ? [...afterFirst, '--help'] : argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    io.out(MAIN_HELP());
    return name ? 0 : EXIT_USAGE;
  }
  if (name === '--version' || name === '-v' || name === 'version') {
    io.out(batonVersionInfo().version);
    return 0;
  }
  const command = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (!command) {
    const hint = name.startsWith('-')
      ? didYouMean(name.replace(/^-+/, ''), ['help', 'version'], (n) => `--${n}`)
      : didYouMean(
          name,
          listedCommands().map(([n]) => n),
          (n) => `"baton ${n}"`,
        );
    const message = `baton: unknown ${name.startsWith('-') ? 'option' : 'command'} "${name}"${hint}`;
    // The whole line: `baton --json tools list` puts --json where the command goes.
    if (jsonAsked(argv)) io.out(usageErrorJson(message, 'Run "baton --help" for the commands.'));
    io.err(`${message}\n\n${MAIN_HELP()}`);
    return EXIT_USAGE;
  }
  try {
    const run = await command.load();
    return await run(rest, io);
  } catch (e) {
    // `baton keys rotate: ...`, not `baton keys: ...`, when the subcommand ran.
    const label = `baton ${(e !== null && typeof e === 'object' && failedSubcommand.get(e)) || name}`;
    if (e instanceof UsageError || (e as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      const message = `${label}: ${(e as Error).message}`;
      const synopsis = e instanceof UsageError && e.help ? synopsisOf(e.help) : undefined;
      const helpCommand = synopsis === undefined ? undefined : `baton ${commandPathOf(synopsis, name)} --help`;
      // Scripts read stdout: the envelope a service's 400 gets, with what the text below says.
      if (jsonAsked(rest)) io.out(usageErrorJson(message, helpCommand && `Run "${helpCommand}" for every option.`));
      io.err(message);
      // The synopsis, not the whole help: a long help would scroll the error out of sight.
      if (synopsis !== undefined) io.err(`\n${synopsis}\n\nEvery option: ${helpCommand}`);
      return EXIT_USAGE;
    }
    // The HTTP client's module is loaded here, not up front: offline commands never need it.
    const { BatonApiError } = await import('../sdk/client.js');
    if (e instanceof BatonApiError || e instanceof BatonError) {
      const { errorJson, exitCodeFor, explainRefusal } = await import('./common.js');
      // --json callers get the service's error envelope on stdout, like every other answer.
      if (jsonAsked(rest)) io.out(JSON.stringify(errorJson(e), null, 2));
      else io.err(explainRefusal(e, label));
      return exitCodeFor(e);
    }
    // Anything else is a failure baton did not foresee, most often an answer of a shape it cannot
    // read: one line saying what to do, not a stack trace (BATON_DEBUG=1 adds it).
    const message = `${label}: unexpected error: ${oneLine(e instanceof Error ? `${e.name}: ${e.message}` : String(e))}`;
    const suggestion =
      'If this command asked a server, check that --server, $BATON_URL or the context names a Baton service; ' +
      'if it does, or no server was asked, report this line as a bug in baton.';
    if (jsonAsked(rest)) io.out(JSON.stringify({ error: { code: 'UNEXPECTED_ERROR', message, suggestion } }, null, 2));
    io.err(`FAILED: ${message}. ${suggestion}`);
    if ((io.env ?? process.env)['BATON_DEBUG'] === '1' && e instanceof Error && e.stack) io.err(e.stack);
    return EXIT_UNREACHABLE;
  }
}

/**
 * Whether the command was asked for --json output, read from its arguments as typed, since a usage
 * error may be in parsing them: an argument `--json` before any `--` (after it, `--json` is an
 * operand). `--json=<value>` is not asked: the switch takes no value, so whether JSON was meant
 * cannot be told, and its usage error is text on stderr only. An argument `--json` the parser
 * refused to read as another option's value (`--out --json`) is asked.
 */
function jsonAsked(args: readonly string[]): boolean {
  const operandsFrom = args.indexOf('--');
  return (operandsFrom < 0 ? args : args.slice(0, operandsFrom)).includes('--json');
}

/** A local usage error as the service's error envelope (INVALID_REQUEST, as its 400), for --json. */
function usageErrorJson(message: string, suggestion: string | undefined): string {
  return JSON.stringify({ error: { code: 'INVALID_REQUEST', message, ...(suggestion === undefined ? {} : { suggestion }) } }, null, 2);
}

/** A help text's opening block (its "Usage:" lines), up to the first blank line. */
function synopsisOf(help: string): string {
  const end = help.indexOf('\n\n');
  return end < 0 ? help : help.slice(0, end);
}

/**
 * The command a synopsis is about ("keys rotate", not just "keys"), so the hint opens the help
 * that was shown: the words after `baton` on each of its lines, up to the first option or
 * placeholder, and where the lines name different subcommands (one help for the whole group,
 * as `baton approvals`), only the words they share. `name` when nothing usable is found.
 */
function commandPathOf(synopsis: string, name: string): string {
  const paths = synopsis
    .split('\n')
    .map((line) => /^(?:Usage:)?\s*baton\s+(.*)$/.exec(line)?.[1])
    .filter((rest) => rest !== undefined)
    .map((rest) => {
      const words = rest.split(/\s+/);
      const end = words.findIndex((w) => !/^[a-z][a-z0-9-]*$/.test(w));
      return end < 0 ? words : words.slice(0, end);
    });
  let shared = paths[0] ?? [];
  for (const words of paths.slice(1)) {
    const differ = shared.findIndex((w, i) => words[i] !== w);
    if (differ >= 0) shared = shared.slice(0, differ);
  }
  // A synopsis of another command (or none) must not send the user elsewhere.
  return shared[0] === name ? shared.join(' ') : name;
}
