/**
 * `baton tools` and `baton approvals`: the tenant's versioned tool catalog,
 * and the humans' side of approval gates (calls waiting for approval, and
 * delegations held because their tools form the lethal trifecta).
 */
import { parseCliArgs } from './args.js';
import {
  clientFrom,
  COMMON_OPTIONS,
  EXIT_HELP,
  integerFlag,
  printJson,
  readJsonArg,
  readKeyFile,
  SERVER_HELP,
  SERVER_OPTIONS,
} from './common.js';
import { UsageError, type CliIo } from './io.js';
import type { GrantStatus } from '../protocol/lists.js';
import { createApprovalDecision, type ApprovalStatus, type PublishToolsInput } from '../sdk/tools.js';

export const TOOLS_HELP = `Usage: baton tools show [--version <n>]
       baton tools publish <file.json|-|JSON> --tenant <id>   (admin key)

show     prints the tenant's current tool catalog and approval settings (or one version).
publish  publishes the next version: the file holds {base_version, strict, tools,
         rules?, default_decision?, approvers?}; base_version must be the current
         version (0 for the first), so concurrent publishers cannot overwrite each other.

Options:
  --version <n>        a past version (versions are immutable)
  --tenant <id>        the tenant to publish for
  --json               print the service's answer
  -h, --help           show this help

${SERVER_HELP}

${EXIT_HELP}`;

export const APPROVALS_HELP = `Usage: baton approvals list [--status pending|approved|rejected|expired|used]
       baton approvals approve <id|dr-hash> --actor <name> --reason <text>
       baton approvals reject  <id|dr-hash> --actor <name> --reason <text>
       baton approvals approve|reject <id> --sign-with <keyfile> --reason <text>
       baton approvals grants  [--status pending|approved|rejected]

Calls a tenant rule sent to a human wait as approvals (apr_...): approve one and
the agent's retry of the same call is allowed once. Delegations whose tools
together form the lethal trifecta wait as grants, named by their hash (sha256:...).
Deciding needs an API key with the approve scope, an actor and a non-blank reason;
or, without a key, --sign-with the key file of an approver DID the tenant lists
(its tool document's approvers): the signed record is the authority, and the DID
is recorded as the actor.

Options:
  --status <s>         only approvals (or grants) in this state
  --actor <name>       who decides (recorded and signed into the service receipt)
  --sign-with <file>   decide as the approver DID of this key file (from baton keygen), no API key needed
  --reason <text>      why (required, non-blank)
  --json               print the service's answer
  -h, --help           show this help

${SERVER_HELP}

${EXIT_HELP}`;

export async function runTools(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('tools', {
    args: argv,
    allowPositionals: true,
    options: { version: { type: 'string' }, tenant: { type: 'string' }, ...SERVER_OPTIONS, ...COMMON_OPTIONS },
  });
  if (values.help || positionals.length === 0) {
    io.out(TOOLS_HELP);
    return values.help ? 0 : 2;
  }
  const [sub, arg, ...rest] = positionals;
  if (rest.length > 0) throw new UsageError('too many arguments', TOOLS_HELP);
  const client = clientFrom(values, io);
  if (sub === 'show') {
    const doc =
      values.version === undefined ? await client.tools.current() : await client.tools.version(integerFlag('--version', values.version, 1));
    if (values.json) printJson(io, doc);
    else {
      io.out(`tool catalog v${doc.version} (${doc.strict ? 'strict' : 'not strict'}, default ${doc.default_decision}), ${doc.hash}`);
      for (const t of doc.tools) {
        const flags = [
          t.untrusted_content && 'untrusted',
          t.private_data_access && 'private',
          t.external_communication && 'external',
        ].filter(Boolean);
        io.out(
          `  ${t.name}  ${t.type}  ${t.blast_radius}  ${t.action_type}${flags.length ? `  [${flags.join(',')}]` : ''}${t.tags.length ? `  tags ${t.tags.join(',')}` : ''}`,
        );
      }
      io.out(`  rules: ${doc.rules.map((r) => `${r.id}->${r.decision}`).join(', ') || '(none)'}`);
    }
    return 0;
  }
  if (sub === 'publish') {
    if (arg === undefined) throw new UsageError('give the catalog file (or - for stdin, or inline JSON)', TOOLS_HELP);
    if (values.tenant === undefined) throw new UsageError('give --tenant <id>', TOOLS_HELP);
    const input = (await readJsonArg(arg, 'catalog')) as PublishToolsInput;
    const doc = await client.tools.publish(values.tenant, input);
    if (values.json) printJson(io, doc);
    else io.out(`PUBLISHED: tool catalog v${doc.version} (${doc.tools.length} tools), ${doc.hash}`);
    return 0;
  }
  throw new UsageError(`unknown subcommand "${sub}"`, TOOLS_HELP);
}

export async function runApprovals(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('approvals', {
    args: argv,
    allowPositionals: true,
    options: {
      status: { type: 'string' },
      actor: { type: 'string' },
      reason: { type: 'string' },
      'sign-with': { type: 'string' },
      ...SERVER_OPTIONS,
      ...COMMON_OPTIONS,
    },
  });
  if (values.help || positionals.length === 0) {
    io.out(APPROVALS_HELP);
    return values.help ? 0 : 2;
  }
  const [sub, id, ...rest] = positionals;
  if (rest.length > 0) throw new UsageError('too many arguments', APPROVALS_HELP);
  const client = clientFrom(values, io);
  if (sub === 'list') {
    const { approvals } = await client.tools.approvals(values.status as ApprovalStatus | undefined);
    if (values.json) printJson(io, { approvals });
    else if (approvals.length === 0) io.out('no approvals');
    else for (const a of approvals) io.out(`${a.id}  ${a.status}  ${a.tool ?? '(no tool)'}  until ${a.expires_at}  ${a.explanation}`);
    return 0;
  }
  if (sub === 'grants') {
    const { grants } = await client.tools.grants(values.status as GrantStatus | undefined);
    if (values.json) printJson(io, { grants });
    else if (grants.length === 0) io.out('no held delegations');
    else for (const g of grants) io.out(`${g.dr_hash}  ${g.status}  ${g.explanation}`);
    return 0;
  }
  if (sub === 'approve' || sub === 'reject') {
    if (id === undefined) throw new UsageError(`give the approval id (or the held delegation's hash) to ${sub}`, APPROVALS_HELP);
    const keyFile = values['sign-with'];
    if (keyFile !== undefined) {
      if (id.startsWith('sha256:'))
        throw new UsageError('--sign-with decides approvals of calls (apr_...), not held delegations', APPROVALS_HELP);
      if (values.actor !== undefined)
        throw new UsageError('--sign-with records the signing DID as the actor: leave out --actor', APPROVALS_HELP);
      if (!values.reason?.trim()) throw new UsageError('give --reason <text>: a decision needs a non-blank reason', APPROVALS_HELP);
      const signer = await readKeyFile(keyFile);
      const record = createApprovalDecision({ signer, approvalId: id, decision: sub, reason: values.reason });
      const decided = await client.tools.decideSigned(record);
      if (values.json) printJson(io, decided);
      else io.out(`${decided.status.toUpperCase()}: ${id} by ${signer.did} (signed): ${values.reason}`);
      return 0;
    }
    if (!values.actor?.trim()) throw new UsageError('give --actor <name>: who decides', APPROVALS_HELP);
    if (!values.reason?.trim()) throw new UsageError('give --reason <text>: a decision needs a non-blank reason', APPROVALS_HELP);
    const input = { actor: values.actor, reason: values.reason };
    const decided = id.startsWith('sha256:')
      ? await client.tools.decideGrant(id, sub, input)
      : sub === 'approve'
        ? await client.tools.approve(id, input)
        : await client.tools.reject(id, input);
    if (values.json) printJson(io, decided);
    else io.out(`${decided.status.toUpperCase()}: ${id} by ${input.actor}: ${input.reason}`);
    return 0;
  }
  throw new UsageError(`unknown subcommand "${sub}"`, APPROVALS_HELP);
}
