/**
 * `baton chain <hash>`: the auditor's view. Fetches the chain above a DR, the
 * tree below it and every record's usage, and prints one indented tree with
 * policies, status, calls used of max, and declared against metered spend.
 */
import { parseCliArgs } from './args.js';
import type { BatonClient, ChainResult, DelegationDetail, DelegationView, TreeNode, Usage } from '../sdk/client.js';
import {
  clientFrom,
  COMMON_OPTIONS,
  EXIT_HELP,
  formatPolicy,
  formatUsd,
  printJson,
  requireHash,
  SERVER_HELP,
  SERVER_OPTIONS,
  shortDid,
  shortHash,
  unixTimeText,
} from './common.js';
import { oneLine, UsageError, type CliIo } from './io.js';

export const CHAIN_HELP = `Usage: baton chain <hash> [--whole-tree] [--full] [--json] [options]

Prints a stored delegation record (DR) in context: the chain from its root
down to it, and every DR delegated below it, as an indented tree. For each
DR: its parties, status (active, revoked, expired, not_yet_valid), policy,
calls used of max_calls, and the spend of its subtree as agents declared it
next to what tool servers metered (with the calibration metered/declared).

Needs an API key of the DR's tenant with issue, verify, report or audit scope
(a verify or report key bound to a tool server reads no delegation unless it
also holds issue, audit or approve).

Options:
  --whole-tree         show the whole tree under the chain's root, not only
                       the records above and below <hash>
  --full               print full DIDs and hashes instead of shortened ones
  --json               print {hash, root_principal, receipts, chain, tree}
                       with the usage of every record
  -h, --help           show this help

${SERVER_HELP}

${EXIT_HELP}
Refused (exit 1): unknown DR for this tenant (404), key without a read scope.`;

const USAGE_CONCURRENCY = 6;

interface Node {
  readonly view: DelegationView;
  readonly children: Node[];
}

export async function runChain(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseCliArgs('chain', {
    args: argv,
    allowPositionals: true,
    options: {
      'whole-tree': { type: 'boolean', default: false },
      full: { type: 'boolean', default: false },
      ...SERVER_OPTIONS,
      ...COMMON_OPTIONS,
    },
  });
  if (values.help) {
    io.out(CHAIN_HELP);
    return 0;
  }
  if (positionals.length > 1) throw new UsageError('give exactly one delegation hash', CHAIN_HELP);
  const hash = requireHash(positionals[0], 'hash of a stored delegation record', CHAIN_HELP);
  const client = clientFrom(values, io);

  io.err(`fetching the chain of ${shortHash(hash)} from ${client.baseUrl} ...`);
  const chain = await client.getChain(hash);
  const top = values['whole-tree'] ? chain.records[0]!.hash : hash;
  const tree = await client.getTree(top);
  io.err(`fetched the tree under ${shortHash(top)}: ${tree.count} record(s)${tree.truncated ? ' (truncated)' : ''}`);

  const display = values['whole-tree'] ? toNode(tree.tree) : pathTo(chain, tree.tree);
  const hashes = [...new Set([...chain.records.map((r) => r.hash), ...flatten(tree.tree).map((n) => n.hash)])];
  io.err(`fetching the usage of ${hashes.length} record(s) ...`);
  const details = await usageOf(client, hashes);

  if (values.json) {
    printJson(io, {
      hash,
      root_principal: chain.root_principal,
      receipts: chain.receipts,
      chain: chain.records.map((r) => ({
        ...r,
        usage: details.get(r.hash)?.usage ?? null,
        revoked_reason: details.get(r.hash)?.revoked_reason ?? null,
      })),
      tree: withUsage(tree.tree, details),
      tree_count: tree.count,
      truncated: tree.truncated,
    });
    return 0;
  }

  const full = values.full;
  const onPath = new Set(chain.records.map((r) => r.hash));
  // With --whole-tree the tree fetched is the root's: the records below <hash> are its subtree there.
  const below = values['whole-tree'] ? belowIn(tree.tree, hash) : tree.count - 1;
  const lines = [
    `Delegation ${shortHash(hash, full)}: ${chain.records.length} record(s) from the root, ${below} below it` +
      `${values['whole-tree'] ? `, ${tree.count} in the root's whole tree` : ''}${tree.truncated ? ' (tree truncated)' : ''}`,
    `Root principal ${shortDid(chain.root_principal, full)}`,
    '',
  ];
  render(display, '', true, true, lines, { target: hash, onPath, details, full });
  lines.push('', "calls: used of max_calls, counted over the subtree; spend: the subtree's declared estimates vs metered actuals.");
  // The lines hold the service's text (a revocation reason, tool names in a policy): each kept on its one line.
  io.out(lines.map(oneLine).join('\n'));
  return 0;
}

function toNode(t: TreeNode): Node {
  return { view: t, children: t.children.map(toNode) };
}

/** The chain root -> target as a single path, with the target's own subtree below it. */
function pathTo(chain: ChainResult, target: TreeNode): Node {
  let node: Node = toNode(target);
  for (let i = chain.records.length - 2; i >= 0; i--) node = { view: chain.records[i]!, children: [node] };
  return node;
}

function flatten(t: TreeNode): TreeNode[] {
  return [t, ...t.children.flatMap(flatten)];
}

/** How many records the tree holds below the one with `hash` (0 when it is not in the tree). */
function belowIn(tree: TreeNode, hash: string): number {
  const node = flatten(tree).find((n) => n.hash === hash);
  return node === undefined ? 0 : flatten(node).length - 1;
}

function withUsage(t: TreeNode, details: Map<string, DelegationDetail>): unknown {
  return { ...t, usage: details.get(t.hash)?.usage ?? null, children: t.children.map((c) => withUsage(c, details)) };
}

async function usageOf(client: BatonClient, hashes: readonly string[]): Promise<Map<string, DelegationDetail>> {
  const out = new Map<string, DelegationDetail>();
  let next = 0;
  const worker = async () => {
    while (next < hashes.length) {
      const h = hashes[next++]!;
      out.set(h, await client.getDelegation(h));
    }
  };
  await Promise.all(Array.from({ length: Math.min(USAGE_CONCURRENCY, hashes.length) }, worker));
  return out;
}

interface RenderCtx {
  readonly target: string;
  readonly onPath: ReadonlySet<string>;
  readonly details: Map<string, DelegationDetail>;
  readonly full: boolean;
}

function render(node: Node, prefix: string, isLast: boolean, isTop: boolean, out: string[], ctx: RenderCtx): void {
  const v = node.view;
  const connector = isTop ? '' : isLast ? '└─ ' : '├─ ';
  const marker = v.hash === ctx.target ? '   ◀ this record' : '';
  out.push(
    `${prefix}${connector}${shortHash(v.hash, ctx.full)}  ${statusText(v, ctx)}  ${shortDid(v.iss, ctx.full)} -> ${shortDid(v.aud, ctx.full)}${marker}`,
  );
  const childPrefix = prefix + (isTop ? '' : isLast ? '   ' : '│  ');
  const bar = node.children.length > 0 ? '│  ' : '   ';
  for (const line of detailLines(v, ctx.details.get(v.hash))) out.push(`${childPrefix}${bar}${line}`);
  node.children.forEach((c, i) => render(c, childPrefix, i === node.children.length - 1, false, out, ctx));
}

function statusText(v: DelegationView, ctx: RenderCtx): string {
  const exp = v.exp === null ? 'no expiry' : `exp ${unixTimeText(v.exp)}`;
  if (v.status === 'revoked') {
    const by = v.revoked_by && v.revoked_by !== v.hash ? ` via ${shortHash(v.revoked_by, ctx.full)}` : '';
    return `[REVOKED${by}]`;
  }
  return `[${v.status}, ${exp}]`;
}

function detailLines(v: DelegationView, detail: DelegationDetail | undefined): string[] {
  const lines = [`policy  ${formatPolicy(v.policy)}`];
  if (detail) lines.push(...usageLines(detail.usage));
  if (detail?.revoked_reason) lines.push(`revoked ${detail.revoked_at ?? ''}: ${detail.revoked_reason}`);
  return lines;
}

function usageLines(u: Usage): string[] {
  const calls = u.max_calls === null ? `calls   ${u.calls_used} (no max_calls)` : `calls   ${u.calls_used}/${u.max_calls} used`;
  const metered = `${u.metered_invocations} metered, ${u.unmetered_invocations} unmetered${u.unavailable_invocations ? ` (${u.unavailable_invocations} reported unavailable)` : ''}`;
  const calibration = u.calibration === null ? '' : `, calibration ${u.calibration}`;
  const flag = u.calibration_flag === 'metered_above_declared' ? '  ⚠ metered runs above declared' : '';
  const lines = [
    calls,
    `spend   declared ${formatUsd(u.declared_usd)}, metered ${formatUsd(u.metered_usd)} (${metered}${calibration})${flag}`,
  ];
  if (u.max_spend_usd !== null)
    lines.push(`budget  ${formatUsd(u.spend_reserved_usd ?? 0)} of ${formatUsd(u.max_spend_usd)} max_spend used or reserved`);
  return lines;
}
