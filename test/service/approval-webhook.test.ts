/**
 * Pending approvals pushed to the tenant's webhook, against a real local HTTP
 * listener: one POST per new approval carrying the approval and its signed
 * approval.requested receipt; a slow or absent receiver never delays or
 * changes the verify answer; a webhook URL that is not a plain http(s) URL is
 * refused and stores nothing.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { approvalBinding, type ApprovalSubject } from '../../src/sdk/index.js';
import { generateKeyPair } from '../../src/sdk/keys.js';
import type { Policy } from '../../src/protocol/policy.js';
import { WEBHOOK_TIMEOUT_MS } from '../../src/service/approval-webhook.js';
import { buildChain, T0 } from '../support/fixtures.js';
import { setupTenant, startTestService, type TestService, type TestTenant } from '../support/service.js';
import { tool } from '../support/tools.js';

const ORG_WRITE = tool('crm_export', { type: 'write', blast_radius: 'organizational', action_type: 'crm:export' });
const ARGS = { tool: 'crm_export', estimated_cost_usd: 0.01, pii_access: false, write_access: true };
const POLICY: Policy = { allowed_tools: ['*'], max_cost_usd: 1, max_calls: 1000, write_access: true };

interface Hook {
  readonly url: string;
  readonly received: { method: string; headers: IncomingMessage['headers']; body: string }[];
  close(): Promise<void>;
}

/** A real HTTP receiver on 127.0.0.1; `answer` decides what it does with each request. */
async function listen(answer: (res: ServerResponse) => void = (res) => res.writeHead(204).end()): Promise<Hook> {
  const received: Hook['received'] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      received.push({ method: req.method ?? '', headers: req.headers, body });
      answer(res);
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks/approvals`,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const end = performance.now() + ms;
  while (!cond() && performance.now() < end) await new Promise((r) => setTimeout(r, 20));
  return cond();
}

let svc: TestService;
beforeAll(async () => {
  svc = await startTestService();
});
afterAll(async () => svc?.close());

async function tenantWithHook(webhookUrl: string | undefined): Promise<TestTenant> {
  const tenant = await setupTenant(svc);
  const published = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
    key: svc.adminKey,
    json: { base_version: 0, strict: true, tools: [ORG_WRITE], ...(webhookUrl === undefined ? {} : { webhook_url: webhookUrl }) },
  });
  expect(published.status, JSON.stringify(published.body)).toBe(201);
  expect(published.body.webhook_url).toBe(webhookUrl ?? null);
  return tenant;
}

function gatedCall(tenant: TestTenant) {
  const chain = buildChain([POLICY, POLICY], { keys: [tenant.root, generateKeyPair(), generateKeyPair()] });
  return chain.invoke(ARGS, { iat: T0 }).bundle;
}

const payloadOf = (jws: string) => JSON.parse(Buffer.from(jws.split('.')[1]!, 'base64url').toString('utf8')) as Record<string, unknown>;

describe('approval webhook', () => {
  it('POSTs each new pending approval once, with its signed approval.requested service receipt', async () => {
    const hook = await listen();
    try {
      const tenant = await tenantWithHook(hook.url);
      const bundle = gatedCall(tenant);
      const first = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
      expect(first.status).toBe(403);
      expect(first.body.error.code).toBe('APPROVAL_REQUIRED');
      const id = first.body.approval.id as string;

      expect(await until(() => hook.received.length > 0, WEBHOOK_TIMEOUT_MS), 'no webhook call arrived').toBe(true);
      const [call] = hook.received;
      expect(call!.method).toBe('POST');
      expect(call!.headers['content-type']).toBe('application/json');
      const event = JSON.parse(call!.body) as { event: string; approval: Record<string, unknown>; service_receipt: string };
      expect(event.event).toBe('approval.pending');
      expect(event.approval).toEqual(first.body.approval);
      expect(payloadOf(event.service_receipt)).toMatchObject({ baton_receipt: 'approval.requested', subject: id, tenant: tenant.id });
      // The receipt binds the call the approver is shown: a receiver recomputes its binding from the approval (SDK).
      const { args, catalog_version, cmd, dr_chain, tool_server } = event.approval as unknown as ApprovalSubject;
      const bound = (payloadOf(event.service_receipt).data as { binding: string }).binding;
      expect(approvalBinding({ args, catalog_version, cmd, dr_chain, tool_server })).toBe(bound);
      expect(approvalBinding({ args: { ...args, write_access: false }, catalog_version, cmd, dr_chain, tool_server })).not.toBe(bound);

      // A retry while the human decides finds the same approval: nobody is pushed twice.
      const retry = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: bundle });
      expect(retry.body.approval.id).toBe(id);
      await new Promise((r) => setTimeout(r, 300));
      expect(hook.received).toHaveLength(1);
    } finally {
      await hook.close();
    }
  });

  it('never delays the verify answer: a receiver that does not answer, or does not exist', async () => {
    const silent = await listen(() => undefined); // reads the request, never answers
    try {
      const tenant = await tenantWithHook(silent.url);
      const started = performance.now();
      const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: gatedCall(tenant) });
      const ms = performance.now() - started;
      expect(r.body.error.code).toBe('APPROVAL_REQUIRED');
      expect(await until(() => silent.received.length > 0, WEBHOOK_TIMEOUT_MS), 'the push never started').toBe(true);
      // The push is still hanging (no answer ever comes), and verify has answered regardless.
      expect(ms).toBeLessThan(WEBHOOK_TIMEOUT_MS);
    } finally {
      await silent.close();
    }

    const gone = await listen();
    await gone.close(); // nothing listens on this port any more
    const tenant = await tenantWithHook(gone.url);
    const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: gatedCall(tenant) });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('APPROVAL_REQUIRED');
  });

  it('logs a failed push with its cause: a refused connection is told as such, not only "fetch failed"', async () => {
    const lines: { msg: string; fields: Record<string, unknown> }[] = [];
    const capture = (msg: string, fields: Record<string, unknown> = {}) => void lines.push({ msg, fields });
    const logged = await startTestService({ log: { debug: () => {}, info: () => {}, warn: capture, error: capture } });
    try {
      const gone = await listen();
      await gone.close(); // nothing listens on this port any more
      const tenant = await setupTenant(logged);
      const published = await logged.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
        key: logged.adminKey,
        json: { base_version: 0, strict: true, tools: [ORG_WRITE], webhook_url: gone.url },
      });
      expect(published.status).toBe(201);
      const r = await logged.call('POST', '/v1/verify', { key: tenant.keys.verify, json: gatedCall(tenant) });
      const failed = () => lines.find((l) => l.msg === 'approval webhook failed');
      expect(await until(() => failed() !== undefined, WEBHOOK_TIMEOUT_MS), 'no failure logged').toBe(true);
      expect(failed()!.fields).toMatchObject({
        tenant: tenant.id,
        approval: r.body.approval.id,
        cause: 'ECONNREFUSED',
        webhook_url: 'http://…',
        suggestion: expect.stringContaining('GET /v1/admin/tenants/{tenant}/tools'),
      });
      // Neither the address nor the path: the URL is shown whole to the admin key only.
      const { port, pathname } = new URL(gone.url);
      expect(JSON.stringify(failed())).not.toMatch(new RegExp(`127\\.0\\.0\\.1|:${port}|${pathname}`));
    } finally {
      await logged.close();
    }
  });

  // A webhook URL is often its own credential (docs/tools-and-approvals.md), and log readers are not
  // all admins: a failed push is logged by its code and the URL's scheme, never its host or path.
  it('never logs the webhook URL: a host name not found, a receiver that answers an error status', async () => {
    const lines: { msg: string; fields: Record<string, unknown> }[] = [];
    const capture = (msg: string, fields: Record<string, unknown> = {}) => void lines.push({ msg, fields });
    const logged = await startTestService({ log: { debug: capture, info: capture, warn: capture, error: capture } });
    const refusing = await listen((res) => res.writeHead(503).end('down'));
    try {
      const pushFrom = async (webhookUrl: string) => {
        const tenant = await setupTenant(logged);
        const published = await logged.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
          key: logged.adminKey,
          json: { base_version: 0, strict: true, tools: [ORG_WRITE], webhook_url: webhookUrl },
        });
        expect(published.status).toBe(201);
        const r = await logged.call('POST', '/v1/verify', { key: tenant.keys.verify, json: gatedCall(tenant) });
        expect(r.body.error.code).toBe('APPROVAL_REQUIRED');
        const failed = () => lines.find((l) => l.msg === 'approval webhook failed' && l.fields['tenant'] === tenant.id);
        expect(await until(() => failed() !== undefined, WEBHOOK_TIMEOUT_MS + 1_000), `no failure logged for ${webhookUrl}`).toBe(true);
        return failed()!.fields;
      };

      // No resolver answers for .invalid (RFC 6761): ENOTFOUND, or EAI_AGAIN where DNS is unreachable.
      const unknownHost = await pushFrom('https://lambdasecrethosttoken.invalid/hook');
      expect(unknownHost).toMatchObject({ cause: expect.stringMatching(/^(ENOTFOUND|EAI_AGAIN)$/), webhook_url: 'https://…' });
      expect(unknownHost['status']).toBeUndefined();

      const errorStatus = await pushFrom(`${refusing.url}/SECRETPATHTOKEN?token=SECRETQUERY`);
      expect(errorStatus).toMatchObject({ cause: 'HTTP_503', status: 503, webhook_url: 'http://…' });
      expect(refusing.received).toHaveLength(1); // the push did go out

      const logText = JSON.stringify(lines);
      for (const secret of ['lambdasecrethosttoken', 'SECRETPATHTOKEN', 'SECRETQUERY', `:${new URL(refusing.url).port}`]) {
        expect(logText, secret).not.toContain(secret);
      }
    } finally {
      await refusing.close();
      await logged.close();
    }
  });

  it('a tenant without a webhook serves webhook_url null and gets the same verify answer', async () => {
    const tenant = await tenantWithHook(undefined);
    const doc = await svc.call('GET', '/v1/tools', { key: tenant.keys.audit });
    expect(doc.body.webhook_url).toBeNull();
    const r = await svc.call('POST', '/v1/verify', { key: tenant.keys.verify, json: gatedCall(tenant) });
    expect(r.body.error.code).toBe('APPROVAL_REQUIRED');
  });

  it('shows the webhook URL whole to the admin key only: tenant keys see that one is set, as the URL is often its own secret', async () => {
    const secret = 'https://hooks.example.com/services/T000/B000/SECRETTOKEN123?token=abc';
    const tenant = await tenantWithHook(secret); // the publish answer (admin) is whole: checked there
    const admin = await svc.call('GET', `/v1/admin/tenants/${tenant.id}/tools`, { key: svc.adminKey });
    expect(admin.body.webhook_url).toBe(secret);
    const readers: string[] = [];
    for (const [scope, key] of Object.entries(tenant.keys)) {
      for (const path of ['/v1/tools', '/v1/tools/versions/1']) {
        const r = await svc.call('GET', path, { key });
        if (r.status === 403) continue; // a scope that reads no catalog
        readers.push(scope);
        expect(r.status, `${scope} ${path}`).toBe(200);
        expect(r.body.webhook_url, `${scope} ${path}`).toBe('https://…');
        expect(JSON.stringify(r.body), `${scope} ${path}`).not.toContain('SECRETTOKEN123');
      }
    }
    expect(new Set(readers)).toEqual(new Set(['issue', 'verify', 'audit'])); // the test tenant's keys that read catalogs
    // A secret in the host name is withheld as well.
    const inHost = await tenantWithHook('https://abcdef0123456789abcdef0123456789.lambda-url.eu-west-1.on.aws/');
    expect((await svc.call('GET', '/v1/tools', { key: inHost.keys.audit })).body.webhook_url).toBe('https://…');
  });

  it('refuses a webhook URL that is not a plain absolute http(s) URL, storing nothing', async () => {
    const tenant = await setupTenant(svc);
    for (const bad of [
      'not a url',
      '/relative/path',
      'ftp://example.com/hook',
      'file:///etc/passwd',
      'javascript:alert(1)',
      'https://user:secret@example.com/hook',
      'HTTPS://Example.com/hook', // not in normal form: what is stored must be what is called
      'https://example.com/ hook',
      `https://example.com/${'a'.repeat(2048)}`,
      '',
    ]) {
      const r = await svc.call('POST', `/v1/admin/tenants/${tenant.id}/tools`, {
        key: svc.adminKey,
        json: { base_version: 0, strict: false, tools: [ORG_WRITE], webhook_url: bad },
      });
      expect(r.status, bad).toBe(400);
    }
    expect((await svc.call('GET', '/v1/tools', { key: tenant.keys.audit })).status).toBe(404);
  });
});
