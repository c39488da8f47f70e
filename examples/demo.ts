/**
 * `npm run demo` / `baton demo`: the whole Baton story in a few seconds, on
 * the embedded database, leaving nothing behind.
 *
 *   operator  creates a tenant, trusts its root key, makes API keys, roots agent A
 *   agent A   sub-delegates to sub-agent B with a narrower policy
 *   agent B   calls web_search through the MCP tool server (allowed), tries
 *             file_write (denied, with Baton's explanation), and searches
 *             until its max_calls runs out (CALLS_EXHAUSTED)
 *   tool server  verifies every call with Baton and reports the metered cost
 *   auditor   prints the chain as a tree: declared vs metered spend
 *   human     the operator declares its tools; sub-agent C's write to the
 *             organisation's shared drive waits for a human, who approves it
 *             with a reason; the call then goes through once
 *
 * Baton runs in-process on PGlite in a fresh temp folder, on a free port of
 * 127.0.0.1, with a generated admin key; the folder is deleted at the end.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { BatonClient, generateKeyPair, type ToolDeclaration } from 'baton';
import { refusalOf, type BatonMcpEvent, type BatonRefusal } from 'baton/mcp';
import { runChain } from '../src/cli/chain.js';
import { formatPolicy, formatUsd, shortHash } from '../src/cli/common.js';
import { processIo, type CliIo } from '../src/cli/io.js';
import { loadConfig } from '../src/config.js';
import { startServer, type RunningServer } from '../src/server.js';
import { silentLogger } from '../src/service/log.js';
import { connectInProcess, DelegatedAgent, delegateToB, delegateToC, POLICY_B, rootAgentA, SEARCH_ESTIMATE_USD, textOf } from './agents.js';
import { createToolServer, TOOL_SERVER } from './mcp-tool-server.js';

export const DEMO_HELP = `Usage: baton demo

Runs the whole Baton story end to end and prints it step by step: an
operator roots agent A, A sub-delegates to sub-agent B with a narrower
policy, B calls tools on an MCP tool server guarded by Baton (one allowed,
one denied with Baton's explanation, then max_calls runs out), the tool
server reports metered cost, and an auditor prints the chain with declared
vs metered spend. Then the operator declares its tools, and sub-agent C's
write to the organisation's shared drive waits for a human, who approves it
with a reason: the call goes through once, and the same call again needs a
new approval.

Baton runs in-process on embedded PGlite in a fresh temporary folder, on a
free port of 127.0.0.1, with a generated admin key. Nothing is left behind.
Also: npm run demo.

Options:
  -h, --help   show this help

Exit codes: 0 the story ran as told, 1 a step did not turn out as expected,
3 the embedded service could not start.`;

export async function runDemo(argv: string[] = [], io: CliIo = processIo): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { help: { type: 'boolean', short: 'h', default: false } } });
  if (values.help) {
    io.out(DEMO_HELP);
    return 0;
  }

  const started = performance.now();
  const out = (text = '') => io.out(text);
  const step = (n: number, title: string) => out(`\n${n}. ${title}`);
  const problems: string[] = [];
  const expect = (ok: boolean, what: string) => {
    if (!ok) problems.push(what);
  };

  out('Baton demo: an operator, three agents, an MCP tool server, an auditor and a human approver');
  out('==========================================================================================');

  // ------------------------------------------------------------ Baton, embedded
  const dataDir = mkdtempSync(join(tmpdir(), 'baton-demo-'));
  const removeDataDir = () => rmSync(dataDir, { recursive: true, force: true });
  const onSignal = () => {
    removeDataDir();
    process.exit(130);
  };
  process.once('SIGINT', onSignal);
  const adminKey = `demo-admin-${randomBytes(24).toString('hex')}`;
  let baton: RunningServer;
  try {
    const config = loadConfig({
      PORT: '0',
      HOST: '127.0.0.1',
      BATON_DATA_DIR: dataDir,
      BATON_ADMIN_KEY: adminKey,
      BATON_MASTER_KEY: randomBytes(32).toString('hex'),
      BATON_LOG_LEVEL: 'silent',
    });
    baton = await startServer(config, silentLogger, () => undefined);
  } catch (e) {
    process.removeListener('SIGINT', onSignal);
    removeDataDir();
    io.err(`baton demo: the embedded Baton service did not start: ${e instanceof Error ? e.message : String(e)}`);
    return 3;
  }
  out(`\nBaton is running at ${baton.url} on embedded PGlite (temporary folder, deleted at the end), started in ${seconds(started)}.`);

  const closers: (() => Promise<void>)[] = [];
  try {
    // ---------------------------------------------------------- 1. operator
    step(1, 'The operator sets up a tenant');
    const admin = new BatonClient({ baseUrl: baton.url, apiKey: adminKey });
    const tenant = await admin.admin.createTenant('acme');
    const operator = generateKeyPair();
    await admin.admin.addRoot(tenant.id, operator.did, 'acme operator');
    const toolKey = await admin.admin.createApiKey(tenant.id, {
      scopes: ['verify', 'report'],
      name: 'demo tool server',
      tool_server: TOOL_SERVER,
    });
    const auditKey = await admin.admin.createApiKey(tenant.id, { scopes: ['audit'], name: 'auditor' });
    out(`   tenant "${tenant.name}" (${tenant.id})`);
    out(`   trusted root key  ${operator.did}`);
    out(`   API keys          tool server (verify + report, bound to ${TOOL_SERVER}), auditor (audit, read-only)`);

    // ---------------------------------------------------------- 2. root A
    step(2, 'The operator roots agent A');
    const agentA = generateKeyPair();
    const root = rootAgentA(operator, agentA);
    out(`   agent A  ${agentA.did}`);
    out(`   root DR  ${shortHash(root.hash)}  ${formatPolicy(root.payload.policy)}`);

    // ---------------------------------------------------------- 3. A -> B
    step(3, 'Agent A sub-delegates to sub-agent B with a narrower policy');
    const agentB = generateKeyPair();
    const sub = delegateToB(root, agentA, agentB);
    out(`   agent B  ${agentB.did}`);
    out(`   sub DR   ${shortHash(sub.hash)}  ${formatPolicy(sub.payload.policy)}`);
    out('   (checked against the root before signing: a wider policy throws POLICY_ESCALATION)');
    const submitted = await new BatonClient({ baseUrl: baton.url }).submit([root, sub]);
    out(`   A submits both records to Baton (no API key: the signatures are the proof): ${submitted.delegations.length} stored`);

    // ---------------------------------------------------------- tool server + B's MCP client
    const labels = new Map<string, string>([
      [root.hash, 'A'],
      [sub.hash, 'B'],
    ]);
    const onEvent = (e: BatonMcpEvent) => out(`   [tool server] ${describeEvent(e, labels)}`);
    const { server } = createToolServer({ baton: { baseUrl: baton.url, verifyKey: toolKey.key }, onEvent });
    const mcp = await connectInProcess(server, 'agent-b');
    closers.push(mcp.close);
    const b = new DelegatedAgent(agentB, [root, sub], TOOL_SERVER);
    const tools = await mcp.client.listTools();
    out(`\n   B connects to the MCP tool server ${TOOL_SERVER} (tools: ${tools.tools.map((t) => t.name).join(', ')})`);

    // ---------------------------------------------------------- 4. allowed
    step(4, 'B calls web_search through the MCP tool server');
    out(
      `   B signs an invocation {tool: "web_search", query, estimated_cost_usd: ${SEARCH_ESTIMATE_USD}, pii_access: false, write_access: false}`,
    );
    out('     and sends it with the call in _meta["X-DRS-Bundle"]');
    const first = await b.search(mcp.client, 'delegation receipts for AI agents');
    expect(!first.isError && refusalOf(first) === null, 'the first web_search was not allowed');
    out(`   B <- ${first.isError ? 'REFUSED' : 'result'}:`);
    out(indent(textOf(first), 8));

    // ---------------------------------------------------------- 5. denied
    step(5, 'B tries file_write, a tool outside its policy');
    const write = await b.writeFile(mcp.client, '/notes/findings.md', '# Findings\n');
    const writeRefusal = refusalOf(write);
    expect(
      write.isError === true && writeRefusal?.code === 'POLICY_VIOLATION',
      `file_write was not denied with POLICY_VIOLATION (got ${writeRefusal?.code ?? 'an allow'})`,
    );
    out(`   B <- DENIED, with Baton's explanation:`);
    out(indent(textOf(write), 8));

    // ---------------------------------------------------------- 6. max_calls
    step(6, `B keeps searching until its max_calls (${POLICY_B.max_calls}) runs out`);
    let exhausted: BatonRefusal | null = null;
    for (let call = 2; call <= (POLICY_B.max_calls ?? 3) + 1; call++) {
      out(`   B: search #${call}`);
      const r = await b.search(mcp.client, `agent budgets, part ${call}`);
      const refusal = refusalOf(r);
      if (refusal) {
        exhausted = refusal;
        out(`   B <- DENIED:`);
        out(indent(textOf(r), 8));
        break;
      }
      out(`   B <- result: ${textOf(r).split('\n').length} results`);
    }
    expect(
      exhausted?.code === 'CALLS_EXHAUSTED',
      `the search after max_calls was not denied with CALLS_EXHAUSTED (got ${exhausted?.code ?? 'an allow'})`,
    );

    // ---------------------------------------------------------- 7. auditor
    step(7, 'The auditor prints the chain: policies, calls, declared vs metered spend');
    const auditor = new BatonClient({ baseUrl: baton.url, apiKey: auditKey.key });
    const printed: string[] = [];
    const code = await runChain([root.hash, '--server', baton.url, '--api-key', auditKey.key], {
      out: (t) => printed.push(t),
      err: () => undefined,
      env: {},
    });
    expect(code === 0, `baton chain exited ${code}`);
    out(indent(printed.join('\n'), 3));
    const usageA = (await auditor.getDelegation(root.hash)).usage;
    const usageB = (await auditor.getDelegation(sub.hash)).usage;
    expect(
      usageB.metered_invocations === POLICY_B.max_calls,
      `B's subtree has ${usageB.metered_invocations} metered invocations, expected ${POLICY_B.max_calls}`,
    );
    out('');
    out(
      `   Spend under A's root DR: declared ${formatUsd(usageA.declared_usd)}, metered ${formatUsd(usageA.metered_usd)} over ${usageA.calls_used} allowed call(s)`,
    );
    out(
      `   (B declared ${formatUsd(SEARCH_ESTIMATE_USD)} per search; the search API metered ${formatUsd(usageB.metered_usd / Math.max(1, usageB.metered_invocations))}: calibration ${usageB.calibration ?? 'n/a'})`,
    );

    // ---------------------------------------------------------- 8. a human in the loop
    step(8, "The operator declares its tools; sub-agent C's organisation-wide write waits for a human");
    const catalog = await admin.tools.publish(tenant.id, { base_version: 0, strict: false, tools: DEMO_TOOLS });
    out(
      `   catalog version ${catalog.version}: ${DEMO_TOOLS.map((t) => `${t.name} (${t.type}, blast radius ${t.blast_radius})`).join(', ')}`,
    );
    out('   the default rules send every call of an organisation-wide tool to a human');
    const humanKey = await admin.admin.createApiKey(tenant.id, { scopes: ['approve'], name: 'dana (approver)' });
    out('   API key           dana, a human approver (approve scope)');
    const agentC = generateKeyPair();
    const subC = delegateToC(root, agentA, agentC);
    labels.set(subC.hash, 'C');
    await new BatonClient({ baseUrl: baton.url }).submit([root, subC]);
    out(`   agent C  ${agentC.did}`);
    out(`   sub DR   ${shortHash(subC.hash)}  ${formatPolicy(subC.payload.policy)}`);
    const serverC = createToolServer({ baton: { baseUrl: baton.url, verifyKey: toolKey.key }, onEvent });
    const mcpC = await connectInProcess(serverC.server, 'agent-c');
    closers.push(mcpC.close);
    const c = new DelegatedAgent(agentC, [root, subC], TOOL_SERVER);
    const report = ['/shared/q3-report.md', '# Q3 report\n'] as const;

    out(`   C: file_write ${report[0]}`);
    const held = await c.writeFile(mcpC.client, ...report);
    const waiting = refusalOf(held);
    const approvalId = waiting?.approval?.id;
    expect(
      held.isError === true && waiting?.code === 'APPROVAL_REQUIRED' && approvalId !== undefined,
      `C's first write did not wait for a human (got ${waiting?.code ?? 'an allow'})`,
    );
    out("   C <- WAITING for a human, with Baton's explanation:");
    out(indent(textOf(held), 8));

    const human = new BatonClient({ baseUrl: baton.url, apiKey: humanKey.key });
    const pending = (await human.tools.approvals('pending')).approvals;
    expect(
      pending.some((a) => a.id === approvalId),
      `the approval ${String(approvalId)} is not listed as pending`,
    );
    out(`   dana lists the pending approvals: ${pending.map((a) => `${a.id} (${a.tool ?? '?'}, rule ${a.rule})`).join(', ')}`);
    const decision = await human.tools.approve(approvalId ?? '', { actor: 'dana@acme.example', reason: APPROVAL_REASON });
    expect(decision.status === 'approved', `the approval is ${decision.status} after approving it`);
    out(`   dana approves it (confirm: true), reason: "${decision.decision?.reason ?? ''}"`);

    out(`   C retries the same call: file_write ${report[0]}`);
    const allowed = await c.writeFile(mcpC.client, ...report);
    expect(!allowed.isError && serverC.disk.get(report[0]) === report[1], 'the approved write did not go through');
    out(`   C <- ${allowed.isError ? 'REFUSED' : 'result'}: ${textOf(allowed)}`);
    const spent = await human.tools.approval(approvalId ?? '');
    expect(spent.status === 'used', `the approval is ${spent.status} after the call, expected used`);

    out('   C tries the same call once more');
    const again = await c.writeFile(mcpC.client, ...report);
    const againRefusal = refusalOf(again);
    expect(
      againRefusal?.code === 'APPROVAL_REQUIRED' && againRefusal.approval?.id !== approvalId,
      `a second use of the approval was not refused (got ${againRefusal?.code ?? 'an allow'})`,
    );
    out(
      `   C <- WAITING again: approval ${String(approvalId)} is ${spent.status} (once only); the new call waits as ${againRefusal?.approval?.id ?? '?'}`,
    );
  } catch (e) {
    problems.push(`the demo failed: ${e instanceof Error ? e.message : String(e)}`);
  } finally {
    for (const close of closers) await close().catch(() => undefined);
    await baton.close().catch(() => undefined);
    removeDataDir();
    process.removeListener('SIGINT', onSignal);
  }

  if (problems.length > 0) {
    out('\nThe demo did not go as told:');
    for (const p of problems) out(`  - ${p}`);
    return 1;
  }
  out(`\nDone in ${seconds(started)}. Baton stopped; its temporary folder is deleted.`);
  out('Next: examples/agents.ts and examples/mcp-tool-server.ts are the code behind this story.');
  return 0;
}

/** The tools the operator declares in step 8 (file_write lands on the organisation's shared drive). */
const DEMO_TOOLS: ToolDeclaration[] = [
  {
    name: 'web_search',
    type: 'read',
    blast_radius: 'read',
    untrusted_content: true,
    private_data_access: false,
    external_communication: false,
    tags: [],
    action_type: 'web:search',
  },
  {
    name: 'file_write',
    type: 'write',
    blast_radius: 'organizational',
    untrusted_content: false,
    private_data_access: false,
    external_communication: false,
    tags: [],
    action_type: 'drive:write',
  },
];

const APPROVAL_REASON = 'Q3 report reviewed; publishing it to the shared drive is agreed.';

function describeEvent(e: BatonMcpEvent, labels: Map<string, string>): string {
  switch (e.type) {
    case 'allowed': {
      const counters = e.counters.map((c) => `${labels.get(c.dr) ?? shortHash(c.dr)} ${c.calls_used}/${c.max_calls}`).join(', ');
      const warn =
        e.warnings.length > 0
          ? `; ${e.warnings.map((w) => `NEAR_LIMIT on ${labels.get(w.dr) ?? shortHash(w.dr)} ${w.field} (${w.used}/${w.limit})`).join(', ')}`
          : '';
      return `Baton ALLOWED ${e.tool} (${e.invocationId}); calls used: ${counters}${warn} -> running the tool`;
    }
    case 'refused':
      return e.refusal.approval
        ? `Baton HELD ${e.tool} for a human: ${e.refusal.code} (approval ${e.refusal.approval.id}) -> the tool does not run yet`
        : `Baton DENIED ${e.tool}: ${e.refusal.code} -> the tool does not run`;
    case 'reported':
      return `reported the metered cost of ${e.invocationId}: ${formatUsd(e.recorded.cost_usd ?? 0)} (source ${e.recorded.source}; declared ${formatUsd(e.recorded.declared_usd)})`;
    case 'report-failed':
      return `could not report the cost of ${e.invocationId}: ${e.error instanceof Error ? e.error.message : String(e.error)}`;
  }
}

function indent(text: string, n: number): string {
  const pad = ' '.repeat(n);
  return text
    .split('\n')
    .map((l) => (l.length > 0 ? pad + l : l))
    .join('\n');
}

function seconds(since: number): string {
  return `${((performance.now() - since) / 1000).toFixed(1)} s`;
}

// `tsx examples/demo.ts` (npm run demo)
if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  runDemo(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
      process.exit(1);
    },
  );
}
