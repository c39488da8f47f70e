/**
 * The quickstart (`npm run demo`, `baton demo`) run end to end, as a user
 * runs it: embedded PGlite in a temp folder, a real HTTP listener, the MCP
 * example server and agents. Asserts on the story it prints.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';

/** The demo's temporary folders, in a folder of this test's own: another demo running on the machine never shows. */
const demoDirs = (dir: string) => readdirSync(dir).filter((d) => d.startsWith('baton-demo-'));

async function baton(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(argv, { out: (t) => (out += `${t}\n`), err: (t) => (err += `${t}\n`), env: {} });
  return { code, out, err };
}

describe('baton demo', () => {
  it('tells the whole story and exits 0, leaving nothing behind', async () => {
    const own = mkdtempSync(join(tmpdir(), 'baton-demo-test-'));
    const previousTmp = process.env['TMPDIR'];
    process.env['TMPDIR'] = own; // os.tmpdir(), where the demo makes its folder, reads it at each call
    let r: Awaited<ReturnType<typeof baton>>;
    let left: string[];
    try {
      r = await baton(['demo']);
      left = demoDirs(own);
    } finally {
      if (previousTmp === undefined) delete process.env['TMPDIR'];
      else process.env['TMPDIR'] = previousTmp;
      rmSync(own, { recursive: true, force: true });
    }
    expect(r.code, r.out + r.err).toBe(0);
    const out = r.out;

    // The steps, in order.
    const steps = [
      '1. The operator sets up a tenant',
      '2. The operator roots agent A',
      '3. Agent A sub-delegates to sub-agent B with a narrower policy',
      '4. B calls web_search through the MCP tool server',
      '5. B tries file_write, a tool outside its policy',
      '6. B keeps searching until its max_calls (3) runs out',
      '7. The auditor prints the chain',
      "8. The operator declares its tools; sub-agent C's organisation-wide write waits for a human",
    ];
    const at = steps.map((s) => out.indexOf(s));
    expect(
      at.every((i) => i >= 0),
      out,
    ).toBe(true);
    expect([...at].sort((a, b) => a - b)).toEqual(at);
    const section = (n: number) => out.slice(at[n - 1], n < steps.length ? at[n] : undefined);

    // A narrower policy for B.
    expect(section(3)).toMatch(/sub DR +sha256:\S+ +tools \[web_search\] · max_cost \$0\.01\/call · max_calls 3 · max_spend \$0\.02/);

    // Allowed, with the metered cost reported by the tool server.
    expect(section(4)).toMatch(/\[tool server\] Baton ALLOWED web_search \(inv:[0-9a-f-]+\); calls used: A 1\/10, B 1\/3/);
    expect(section(4)).toMatch(/\[tool server\] reported the metered cost of inv:\S+: \$0\.002 \(source api-usage; declared \$0\.003\)/);
    expect(section(4)).toContain('1. delegation receipts for AI agents: an overview');

    // Denied, with Baton's explanation.
    expect(section(5)).toContain('[tool server] Baton DENIED file_write: POLICY_VIOLATION -> the tool does not run');
    expect(section(5)).toContain('This call to "file_write" was refused: POLICY_VIOLATION (block D)');
    expect(section(5)).toContain('args.tool: required ["web_search"], got file_write');
    expect(section(5)).toContain('args.write_access: required false, got true');
    expect(section(5)).toMatch(/What to do: .+/);

    // max_calls runs out.
    expect(section(6)).toMatch(/B 3\/3; NEAR_LIMIT on B max_calls/);
    expect(section(6)).toContain('Baton DENIED web_search: CALLS_EXHAUSTED');
    expect(section(6)).toContain('This call to "web_search" was refused: CALLS_EXHAUSTED (block G)');
    expect(section(6).match(/Baton ALLOWED/g)).toHaveLength(2);

    // The auditor's tree (the chain printer): declared vs metered spend.
    const audit = section(7);
    expect(audit).toMatch(/└─ sha256:\S+ +\[active/);
    expect(audit).toContain('calls   3/3 used');
    expect(audit).toContain('spend   declared $0.009, metered $0.006 (3 metered, 0 unmetered, calibration 0.6667)');
    expect(audit).toContain("Spend under A's root DR: declared $0.009, metered $0.006 over 3 allowed call(s)");

    // A human in the loop: the organisation-wide write waits, is approved with a reason, runs once.
    const human = section(8);
    expect(human).toContain('file_write (write, blast radius organizational)');
    const held = /Baton HELD file_write for a human: APPROVAL_REQUIRED \(approval (apr_[0-9a-f]{32})\) -> the tool does not run yet/.exec(
      human,
    );
    expect(held, human).not.toBeNull();
    const id = held![1]!;
    expect(human).toContain(`rule #1 (organizational-blast-radius) decides require_approval`);
    expect(human).toContain(`A human must approve this call first: approval ${id} (pending`);
    expect(human).toContain(`dana lists the pending approvals: ${id} (file_write, rule organizational-blast-radius)`);
    expect(human).toContain('dana approves it (confirm: true), reason: "Q3 report reviewed; publishing it to the shared drive is agreed."');
    // Approved: allowed once, counted on C and on A above it.
    expect(human).toMatch(/Baton ALLOWED file_write \(inv:[0-9a-f-]+\); calls used: A 4\/10, C 1\/2 -> running the tool/);
    expect(human).toContain('C <- result: wrote 12 characters to /shared/q3-report.md');
    expect(human.match(/Baton ALLOWED/g)).toHaveLength(1);
    // The same call again: the spent approval is not reused; a new one waits.
    const again = new RegExp(`approval ${id} is used \\(once only\\); the new call waits as (apr_[0-9a-f]{32})`).exec(human);
    expect(again, human).not.toBeNull();
    expect(again![1]).not.toBe(id);
    expect(human.match(/Baton HELD file_write/g)).toHaveLength(2);

    expect(out).toMatch(/Done in \d+\.\d s\. Baton stopped; its temporary folder is deleted\./);
    expect(left).toEqual([]);
  }, 120_000);

  it('--help explains the story and the exit codes', async () => {
    const r = await baton(['demo', '--help']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^Usage: baton demo/);
    expect(r.out).toContain('Exit codes');
    expect((await baton(['--help'])).out).toMatch(/^ {2}demo +run the whole story/m);
  });
});
