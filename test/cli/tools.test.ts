/** `baton tools` and `baton approvals` against a live service: publish, show, list, approve (calls and held grants). */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { approvals as approvalRows } from '../../src/store/schema/index.js';
import { setupTenant } from '../support/service.js';
import { BatonClient } from '../../src/sdk/client.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, makeBundle } from '../../src/sdk/records.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { tool } from '../support/tools.js';
import { writeKeyFile } from '../sdk/chains.js';
import { run, tempDir } from './helpers.js';

/** Characters that print as nothing or drive the terminal: none may reach an approver's screen raw. */
const INVISIBLE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/;

let live: LiveService;
let S: string[];
let approver: string;
beforeAll(async () => {
  live = await startLiveService();
  S = ['--server', live.baseUrl];
  const admin = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.svc.adminKey });
  approver = (await admin.admin.createApiKey(live.tenant.id, { scopes: ['approve'] })).key;
});
afterAll(async () => live?.close());

describe('baton tools / approvals', () => {
  it('publishes and shows the catalog; an approver lists and approves a waiting call', async () => {
    const catalog = {
      base_version: 0,
      strict: true,
      tools: [
        tool('crm_export', { type: 'write', blast_radius: 'organizational', action_type: 'crm:export' }),
        tool('web_fetch', { untrusted_content: true, action_type: 'web:fetch' }),
        tool('mail_send', { type: 'external', private_data_access: true, action_type: 'mail:send' }),
      ],
    };
    const pub = await run(['tools', 'publish', JSON.stringify(catalog), '--tenant', live.tenant.id, ...S, '--api-key', live.svc.adminKey]);
    expect(pub.code, pub.err).toBe(0);
    expect(pub.out).toMatch(/^PUBLISHED: tool catalog v1 \(3 tools\)/);
    const stale = await run([
      'tools',
      'publish',
      JSON.stringify(catalog),
      '--tenant',
      live.tenant.id,
      ...S,
      '--api-key',
      live.svc.adminKey,
    ]);
    expect(stale.code).toBe(1);
    const show = await run(['tools', 'show', ...S, '--api-key', live.tenant.keys.verify]);
    expect(show.code, show.err).toBe(0);
    expect(show.out).toContain('crm_export  write  organizational  crm:export');
    // The operator reads back what it published, the next base_version with it.
    const asAdmin = await run(['tools', 'show', '--tenant', live.tenant.id, ...S, '--api-key', live.svc.adminKey]);
    expect(asAdmin.code, asAdmin.err).toBe(0);
    expect(asAdmin.out).toEqual(show.out);
    expect(asAdmin.out).toMatch(/^tool catalog v1 /);
    const both = await run(['tools', 'show', '--tenant', live.tenant.id, '--version', '1', ...S, '--api-key', live.svc.adminKey]);
    expect(both.code).toBe(2);

    const agent = generateKeyPair();
    const root = createRootDelegation({
      issuer: live.tenant.root,
      audience: agent.did,
      policy: { allowed_tools: ['crm_export'], max_cost_usd: 1, write_access: true },
    });
    const args = { tool: 'crm_export', estimated_cost_usd: 0.01, pii_access: false, write_access: true };
    const verifier = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify });
    const bundle = makeBundle(createInvocation({ chain: [root], invoker: agent, args, toolServer: 'mcp://crm' }), [root]);
    const waiting = await verifier.verify(bundle);
    expect(waiting.valid).toBe(false);
    const id = (waiting as { approval?: { id: string } }).approval!.id;

    const list = await run(['approvals', 'list', '--status', 'pending', ...S, '--api-key', approver]);
    expect(list.out).toContain(id);
    const blank = await run(['approvals', 'approve', id, '--actor', 'dana', '--reason', '  ', ...S, '--api-key', approver]);
    expect(blank.code).toBe(2);
    const ok = await run(['approvals', 'approve', id, '--actor', 'dana', '--reason', 'Agreed.', ...S, '--api-key', approver]);
    expect(ok.code, ok.err).toBe(0);
    expect(ok.out.split('\n')[0]).toBe(`APPROVED: ${id} by dana: Agreed.`);
    expect((await verifier.verify(bundle)).valid).toBe(true);

    // A delegation reaching all three risks is held; the approver releases it by hash.
    const wide = createRootDelegation({ issuer: live.tenant.root, audience: agent.did, policy: { max_cost_usd: 1 } });
    await new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.issue }).submit(wide);
    const grants = await run(['approvals', 'grants', '--status', 'pending', ...S, '--api-key', approver]);
    expect(grants.out).toContain(wide.hash);
    const release = await run(['approvals', 'approve', wide.hash, '--actor', 'dana', '--reason', 'Reviewed.', ...S, '--api-key', approver]);
    expect(release.code, release.err).toBe(0);
    expect(release.out).toMatch(/^APPROVED: sha256:/);
  });

  it('submit and delegate --submit say why a delegation is held, and name baton approvals grants', async () => {
    // The catalog published above has tools that together form the lethal trifecta: a delegation reaching them all is held.
    const dir = tempDir();
    const agent = generateKeyPair();
    const wide = createRootDelegation({ issuer: live.tenant.root, audience: agent.did, policy: { max_cost_usd: 1 } });
    writeFileSync(join(dir, 'wide.jws'), wide.jws);
    const I = [...S, '--api-key', live.tenant.keys.issue];
    const submitted = await run(['submit', join(dir, 'wide.jws'), ...I]);
    expect(submitted.code, submitted.err).toBe(0);
    expect(submitted.out).toMatch(new RegExp(`${wide.hash} {2}depth 0 {2}held `));
    expect(submitted.out).toContain('held: a held delegation grants tools that together form the lethal trifecta');
    expect(submitted.out).toContain('See why: baton approvals grants');

    const rootKey = writeKeyFile(dir, live.tenant.root);
    const policy = ['--policy', '{"max_cost_usd":1}', '--pii', '--write'];
    const delegated = await run(['delegate', '--key', rootKey, '--to', agent.did, ...policy, '--submit', ...I]);
    expect(delegated.code, delegated.err).toBe(0);
    expect(delegated.err).toMatch(/stored: \S+ depth 0, held, tenant /);
    expect(delegated.err).toContain('See why: baton approvals grants');
  });

  it('approvals approve --sign-with: an approver DID the tenant lists decides without an API key', async () => {
    const human = generateKeyPair();
    const admin = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.svc.adminKey });
    const current = await new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify }).tools.current();
    await admin.tools.publish(live.tenant.id, {
      base_version: current.version,
      strict: true,
      tools: current.tools,
      approvers: [human.did],
    });
    const agent = generateKeyPair();
    const root = createRootDelegation({
      issuer: live.tenant.root,
      audience: agent.did,
      policy: { allowed_tools: ['crm_export'], max_cost_usd: 1, write_access: true },
    });
    const args = { tool: 'crm_export', estimated_cost_usd: 0.02, pii_access: false, write_access: true };
    const verifier = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify });
    const bundle = makeBundle(createInvocation({ chain: [root], invoker: agent, args, toolServer: 'mcp://crm' }), [root]);
    const id = ((await verifier.verify(bundle)) as { approval?: { id: string } }).approval!.id;
    const keyFile = writeKeyFile(tempDir(), human);
    const withActor = await run(['approvals', 'approve', id, '--sign-with', keyFile, '--actor', 'x', '--reason', 'Agreed.', ...S]);
    expect(withActor.code).toBe(2);
    const ok = await run(['approvals', 'approve', id, '--sign-with', keyFile, '--reason', 'Agreed.', ...S]);
    expect(ok.code, ok.err).toBe(0);
    expect(ok.out.split('\n')[0]).toBe(`APPROVED: ${id} by ${human.did} (signed): Agreed.`);
    expect((await verifier.verify(bundle)).valid).toBe(true);
    const outsider = writeKeyFile(tempDir(), generateKeyPair());
    const refused = await run(['approvals', 'reject', id, '--sign-with', outsider, '--reason', 'No.', ...S]);
    expect(refused.code).toBe(1);
  });

  it('approvals list / show / approve show what is approved: tool, server, cmd, args as signed, requester, UTC deadline', async () => {
    const agent = generateKeyPair();
    const root = createRootDelegation({
      issuer: live.tenant.root,
      audience: agent.did,
      policy: { allowed_tools: ['crm_export'], max_cost_usd: 1, write_access: true },
    });
    const extra = Object.fromEntries(Array.from({ length: 14 }, (_, i) => [`k${String(i).padStart(2, '0')}`, i]));
    const args = {
      tool: 'crm_export',
      estimated_cost_usd: 0.03,
      pii_access: false,
      write_access: true,
      'path\u200b': 'a\u00adb',
      note: 'x\u2060y\ufeff\u202e\u061c\nz',
      blob: 'q'.repeat(400),
      ...extra,
    };
    const verifier = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify });
    const bundle = makeBundle(createInvocation({ chain: [root], invoker: agent, args, toolServer: 'mcp://crm' }), [root]);
    const id = ((await verifier.verify(bundle)) as { approval?: { id: string } }).approval!.id;
    // A look-alike of a declared tool, as a non-strict tenant could have asked about it: stored directly,
    // so the display is tested whatever verify decides about look-alikes.
    const db = live.svc.store.db;
    await db
      .update(approvalRows)
      .set({ tool: 'crm_export\u200b' })
      .where(and(eq(approvalRows.tenantId, live.tenant.id), eq(approvalRows.id, id)));

    const api = (await new BatonClient({ baseUrl: live.baseUrl, apiKey: approver }).tools.approvals('pending')).approvals;
    const served = api.find((a) => a.id === id)!;
    const until = new Date(served.expires_at * 1000).toISOString().replace('T', ' ').replace('.000Z', ' UTC');

    const list = await run(['approvals', 'list', '--status', 'pending', ...S, '--api-key', approver]);
    expect(list.code, list.err).toBe(0);
    expect(list.out).not.toMatch(INVISIBLE);
    const block = list.out.slice(list.out.indexOf(id)).split(/\n(?=apr_)/)[0]!;
    const lines = block.trimEnd().split('\n');
    // One header line, the rest indented under it.
    expect(lines[0]).toBe(`${id}  pending  tool "crm_export\\u200b" on "mcp://crm"  asked by ${agent.did}  until ${until}`);
    expect(lines.slice(1).every((l) => l.startsWith('    '))).toBe(true);
    expect(block).toContain(`    cmd   ${JSON.stringify(root.payload.cmd)}\n`);
    expect(block).toContain('"path\\u200b": "a\\u00adb"');
    expect(block).toContain('"note": "x\\u2060y\\ufeff\\u202e\\u061c\\nz"');
    expect(block).toContain('"tool": "crm_export"');
    expect(block).not.toContain('q'.repeat(161));
    expect(block).toContain(`"${'q'.repeat(159)}…[242 more characters: baton approvals show ${id}, or --json]`);
    for (const [k, v] of Object.entries(extra)) expect(block).toContain(`  "${k}": ${v}\n`);
    expect(block).toContain('    why   rule #');
    expect(block).not.toContain(String(served.expires_at));

    // --json is the API's JSON, raw deadline and all.
    const json = await run(['approvals', 'list', '--status', 'pending', '--json', ...S, '--api-key', approver]);
    expect(json.out).not.toMatch(INVISIBLE);
    expect(JSON.parse(json.out)).toEqual({ approvals: api });

    // show prints all of it.
    const show = await run(['approvals', 'show', id, ...S, '--api-key', approver]);
    expect(show.code, show.err).toBe(0);
    expect(show.out).not.toMatch(INVISIBLE);
    expect(show.out).toContain(`"blob": "${'q'.repeat(400)}"`);
    for (const k of Object.keys(extra)) expect(show.out).toContain(`"${k}": `);
    expect(show.out).toContain('    rule  organizational-blast-radius (catalog v');
    expect(JSON.parse((await run(['approvals', 'show', id, '--json', ...S, '--api-key', approver])).out)).toEqual(served);

    // Approving prints what was approved, after the decision line.
    const ok = await run(['approvals', 'approve', id, '--actor', 'dana', '--reason', 'Agreed.', ...S, '--api-key', approver]);
    expect(ok.code, ok.err).toBe(0);
    const [first, header] = ok.out.split('\n');
    expect(first).toBe(`APPROVED: ${id} by dana: Agreed.`);
    expect(header).toBe(`${id}  approved  tool "crm_export\\u200b" on "mcp://crm"  asked by ${agent.did}  until ${until}`);
    expect(ok.out).toMatch(/ {4}decided \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC by "dana" \(key_\w+\): "Agreed\."/);

    // Approvals stored before cmd and args were kept say so rather than showing nothing.
    await db
      .update(approvalRows)
      .set({ cmd: null, args: null })
      .where(and(eq(approvalRows.tenantId, live.tenant.id), eq(approvalRows.id, id)));
    const old = await run(['approvals', 'show', id, ...S, '--api-key', approver]);
    expect(old.out).toContain('    cmd   (not recorded: approval made before the service kept it)');
    expect(old.out).toContain('    args  (not recorded: approval made before the service kept it)');
  });

  it('a decided approval and a missing catalog say what to do next', async () => {
    const agent = generateKeyPair();
    const root = createRootDelegation({
      issuer: live.tenant.root,
      audience: agent.did,
      policy: { allowed_tools: ['crm_export'], max_cost_usd: 1, write_access: true },
    });
    const args = { tool: 'crm_export', estimated_cost_usd: 0.04, pii_access: false, write_access: true };
    const verifier = new BatonClient({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.verify });
    const bundle = makeBundle(createInvocation({ chain: [root], invoker: agent, args, toolServer: 'mcp://crm' }), [root]);
    const id = ((await verifier.verify(bundle)) as { approval?: { id: string } }).approval!.id;
    const decide = (sub: string) => run(['approvals', sub, id, '--actor', 'dana', '--reason', 'No.', ...S, '--api-key', approver]);
    expect((await decide('reject')).code).toBe(0);
    const again = await decide('approve');
    expect(again.code).toBe(1);
    expect(again.err).toContain('CONFLICT');
    expect(again.err).toContain(`GET /v1/approvals/${id} (baton approvals show ${id})`);
    expect(again.err).toContain('answered APPROVAL_REJECTED until');
    expect(again.err).not.toContain('fresh identifier');

    const bare = await setupTenant(live.svc, 'no-catalog');
    const show = await run(['tools', 'show', ...S, '--api-key', bare.keys.verify]);
    expect(show.code).toBe(1);
    expect(show.err).toContain('NOT_FOUND');
    expect(show.err).toContain(`baton tools publish <file.json> --tenant ${bare.id}`);
    expect(show.err).toContain('"base_version": 0');
    expect(show.err).not.toContain('Check the identifier');
  });
});
