/** `baton tools` and `baton approvals` against a live service: publish, show, list, approve (calls and held grants). */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/sdk/client.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, makeBundle } from '../../src/sdk/records.js';
import { startLiveService, type LiveService } from '../sdk/live-service.js';
import { tool } from '../support/tools.js';
import { writeKeyFile } from '../sdk/chains.js';
import { run, tempDir } from './helpers.js';

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
    expect(ok.out.trim()).toBe(`APPROVED: ${id} by dana: Agreed.`);
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
    expect(ok.out.trim()).toBe(`APPROVED: ${id} by ${human.did} (signed): Agreed.`);
    expect((await verifier.verify(bundle)).valid).toBe(true);
    const outsider = writeKeyFile(tempDir(), generateKeyPair());
    const refused = await run(['approvals', 'reject', id, '--sign-with', outsider, '--reason', 'No.', ...S]);
    expect(refused.code).toBe(1);
  });
});
