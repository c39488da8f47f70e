/**
 * The decision log: every verify decision (allow, retry, deny, dry run) is
 * one structured event on the log stream with who asked, for what, through
 * which chain, the outcome code(s), the latency and the service receipt id.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, createSubDelegation, makeBundle } from '../../src/sdk/records.js';
import { createLogger } from '../../src/service/log.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { T0 } from '../support/fixtures.js';

const lines: Record<string, unknown>[] = [];
let svc: TestService;
let tenant: TestTenant;

beforeAll(async () => {
  svc = await startTestService({ log: createLogger('info', (l) => lines.push(JSON.parse(l) as Record<string, unknown>)) });
  tenant = await setupTenant(svc);
});
afterAll(async () => svc?.close());

const decisions = () => lines.filter((l) => l['msg'] === 'verify decision');

describe('decision log', () => {
  it('logs one event per decision: allow, retry, deny and dry run, with the service receipt each answer carries', async () => {
    const agent = generateKeyPair();
    const holder = generateKeyPair();
    const root = createRootDelegation({
      issuer: tenant.root,
      audience: agent.did,
      policy: { allowed_tools: ['web_search'], max_calls: 5 },
      iat: T0,
      nbf: T0 - 10,
    });
    const leaf = createSubDelegation({
      parent: root,
      issuer: agent,
      audience: holder.did,
      policy: { allowed_tools: ['web_search'], max_calls: 5 },
      iat: T0,
    });
    const invoke = (tool: string) =>
      createInvocation({
        chain: [root, leaf],
        invoker: holder,
        args: { tool, pii_access: false, write_access: false },
        toolServer: 'mcp://t',
        iat: T0,
      });
    const verify = (body: unknown, query = '') => svc.call('POST', `/v1/verify${query}`, { key: tenant.keys.verify, json: body });

    const allowed = invoke('web_search');
    const bundle = makeBundle(allowed, [root, leaf]);
    const first = await verify(bundle);
    const again = await verify(bundle);
    const refused = invoke('delete_db');
    const denied = await verify(makeBundle(refused, [root, leaf]));
    const dry = await verify(makeBundle(invoke('web_search'), [root, leaf]), '/dry-run');
    expect([first.status, again.status, denied.status, dry.status]).toEqual([200, 200, 403, 200]);

    const events = decisions();
    expect(events).toHaveLength(4);
    const keyId = events[0]!['key_id'];
    expect(typeof keyId).toBe('string');
    const common = { level: 'info', tenant_id: tenant.id, key_id: keyId, invoker: holder.did, dr_chain: [root.hash, leaf.hash] };
    expect(events[0]).toMatchObject({
      ...common,
      tool: 'web_search',
      jti: allowed.payload.jti,
      outcome: 'allow',
      codes: ['ALLOWED'],
      dry_run: false,
      service_receipt_id: first.body.service_receipt.id,
    });
    expect(events[1]).toMatchObject({ ...common, outcome: 'allow', codes: ['RETRY'], service_receipt_id: first.body.service_receipt.id });
    expect(events[2]).toMatchObject({ ...common, tool: 'delete_db', jti: refused.payload.jti, outcome: 'deny', dry_run: false });
    expect((events[2]!['codes'] as string[])[0]).toBe(denied.body.error.code);
    const [deniedReceipt] = await svc.store.query("select id from receipts where kind = 'invocation.denied' and subject = $1", [
      refused.payload.jti,
    ]);
    expect(events[2]!['service_receipt_id']).toBe(Number(deniedReceipt!['id']));
    expect(events[3]).toMatchObject({ ...common, outcome: 'allow', codes: ['ALLOWED'], dry_run: true, service_receipt_id: null });
    for (const e of events) expect(typeof e['ms']).toBe('number');
    // Each names its request, whose own log line holds the status the caller got.
    const answers = [first, again, denied, dry];
    events.forEach((e, i) => expect(e['request_id'], `decision ${i}`).toBe(answers[i]!.headers.get('x-request-id')));

    // A stranger's invocation under the holder's jti and chain (block B): logged as its claims, not as that jti's.
    const stranger = createInvocation({
      chain: [root, leaf],
      invoker: generateKeyPair(),
      args: { tool: 'web_search', pii_access: false, write_access: false },
      toolServer: 'mcp://t',
      iat: T0,
      jti: allowed.payload.jti,
    });
    expect((await verify(makeBundle(stranger, [root, leaf]))).body.error.code).toBe('ISSUER_AUDIENCE_GAP');
    expect(decisions()[4]).toMatchObject({
      outcome: 'deny',
      jti: null,
      dr_chain: [],
      claimed_jti: allowed.payload.jti,
      claimed_dr_chain: [root.hash, leaf.hash],
    });
  });
});
