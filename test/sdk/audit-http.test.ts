/**
 * auditLog's HTTP reads fail as BatonClient's calls do: a BatonApiError with NETWORK_ERROR or
 * TIMEOUT when no answer comes, the service's own code when it refuses or fails, and
 * UNEXPECTED_RESPONSE for an answer that is not Baton's; never a raw fetch error, and a failure
 * that says nothing about the log is never reported as a finding.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditLog, type AuditOptions } from '../../src/sdk/audit.js';
import { BatonApiError } from '../../src/sdk/client.js';
import { integrateOnce } from '../../src/service/log-integrator.js';
import { silentLogger } from '../../src/service/log.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';
import { closedPortUrl, startLiveService, startSilentServer, type LiveService } from './live-service.js';

const BASE = 'http://baton.test';

async function failure(o: Partial<AuditOptions>): Promise<BatonApiError> {
  const e = await auditLog({ baseUrl: BASE, apiKey: 'bt_x', ...o }).then(
    () => {
      throw new Error('the audit did not fail');
    },
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(BatonApiError);
  return e as BatonApiError;
}

const answer = (status: number, body: string, type = 'application/json', headers: Record<string, string> = {}) =>
  Promise.resolve(new Response(body, { status, headers: { 'content-type': type, ...headers } }));

describe('auditLog: failures are BatonApiErrors', () => {
  it('nothing listening: NETWORK_ERROR (status 0) naming the URL and the socket error', async () => {
    const url = await closedPortUrl();
    const e = await failure({ baseUrl: url });
    expect(e).toMatchObject({ status: 0, code: 'NETWORK_ERROR', method: 'GET', url: `${url}/v1/log`, retryable: true });
    expect(e.message).toContain(url);
    expect(e.message).toContain('ECONNREFUSED');
    expect(e.suggestion).toMatch(/baton serve/);
  });

  it('a server that never answers: TIMEOUT after timeoutMs, and the request is aborted', async () => {
    const silent = await startSilentServer();
    try {
      const e = await failure({ baseUrl: silent.url, timeoutMs: 150 });
      expect(e).toMatchObject({ status: 0, code: 'TIMEOUT' });
      expect(e.message).toMatch(/within 150 ms/);
    } finally {
      await silent.close();
    }
    // A fetch that ignores its signal is bounded too; one that listens is told to stop.
    let signal: AbortSignal | undefined;
    const started = Date.now();
    const e = await failure({
      timeoutMs: 100,
      fetch: (_url, init) => {
        signal = init.signal;
        return new Promise<Response>(() => undefined);
      },
    });
    expect(e.code).toBe('TIMEOUT');
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(signal?.aborted).toBe(true);
  });

  it('a body that stalls after the headers is under the same deadline', async () => {
    const stalled = new ReadableStream<Uint8Array>({ start: () => undefined });
    const e = await failure({ timeoutMs: 100, fetch: () => Promise.resolve(new Response(stalled, { status: 200 })) });
    expect(e.code).toBe('TIMEOUT');
  });

  it("a refusal is the service's envelope (code, status, details, request id), naming the audit scope", async () => {
    const envelope = (code: string, message: string, details?: object) =>
      JSON.stringify({ error: { code, message, suggestion: 'Send a good key.', ...(details ? { details } : {}) }, request_id: 'req_1' });
    const u = await failure({ fetch: () => answer(401, envelope('UNAUTHORIZED', 'The request has no valid API key.')) });
    expect(u).toMatchObject({ status: 401, code: 'UNAUTHORIZED', requestId: 'req_1', message: 'The request has no valid API key.' });
    expect(u.suggestion).toMatch(/audit scope.*Send a good key\./);
    const f = await failure({
      fetch: () =>
        answer(403, envelope('FORBIDDEN', 'This route needs an API key with one of the scopes: audit.', { required_scopes: ['audit'] })),
    });
    expect(f).toMatchObject({ status: 403, code: 'FORBIDDEN', details: { required_scopes: ['audit'] } });
    expect(f.suggestion).toMatch(/audit scope/);
    const s = await failure({ fetch: () => answer(503, envelope('STORAGE_UNAVAILABLE', 'The database is not answering.')) });
    expect(s).toMatchObject({ status: 503, code: 'STORAGE_UNAVAILABLE', suggestion: 'Send a good key.', retryable: true });
  });

  it("an answer that is not Baton's is UNEXPECTED_RESPONSE", async () => {
    const proxy = await failure({ fetch: () => answer(502, '<html>Bad gateway</html>', 'text/html', { 'x-request-id': 'req_p' }) });
    expect(proxy).toMatchObject({ status: 502, code: 'UNEXPECTED_RESPONSE', requestId: 'req_p' });
    expect(proxy.message).toContain('Bad gateway');
    const notJson = await failure({ fetch: () => answer(200, 'hello', 'text/plain') });
    expect(notJson).toMatchObject({ status: 200, code: 'UNEXPECTED_RESPONSE' });
    // An answer another auditor's reader (keeping the first of two equal keys) would read otherwise.
    const repeated = await failure({ fetch: () => answer(200, '{"tree_size":1,"tree_size":2}', 'application/json') });
    expect(repeated).toMatchObject({ status: 200, code: 'UNEXPECTED_RESPONSE' });
    expect(repeated.message).toContain('repeats the key "tree_size"');
    // JSON of another shape: named, not a TypeError deep in the audit.
    const log = { origin: 'example.com/baton/t', tree_size: 0, root_hash: 'x', verifier_keys: [] };
    const otherShape = await failure({
      fetch: (url) => answer(200, JSON.stringify(String(url).endsWith('/v1/log') ? log : { hello: 'world' }), 'application/json'),
    });
    expect(otherShape).toMatchObject({ status: 200, code: 'UNEXPECTED_RESPONSE' });
    expect(otherShape.message).toMatch(/GET \/v1\/keys is not the answer of that route: `keys` is missing/);
  });
});

describe('auditLog against a live service: a failed entry bundle', () => {
  let live: LiveService;
  beforeAll(async () => {
    live = await startLiveService();
    for (let i = 0; i < 3; i++)
      await recordServiceReceipt(live.svc.store.db, live.svc.deps.signer, {
        tenantId: live.tenant.id,
        kind: 'invocation.denied',
        subject: `inv:${i}`,
        data: { i },
        now: live.svc.clock.now,
      });
    await integrateOnce({ store: live.svc.store, signer: live.svc.deps.signer, log: silentLogger, logName: live.svc.deps.config.tlogName });
  });
  afterAll(async () => {
    await live?.close();
  });

  /** The live service, except that entry bundles answer `status` with `body`. */
  const entriesAnswer =
    (status: number, body: object): AuditOptions['fetch'] =>
    (url, init) =>
      url.includes('/tile/entries/') ? answer(status, JSON.stringify(body)) : fetch(url, init);

  it('the clean log passes through the same reads', async () => {
    const report = await auditLog({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.audit });
    expect(report).toMatchObject({ ok: true, treeSize: 3, entriesChecked: 3 });
  });

  it('storage unavailable is thrown, not reported as missing entries', async () => {
    const e = await auditLog({
      baseUrl: live.baseUrl,
      apiKey: live.tenant.keys.audit,
      fetch: entriesAnswer(503, { error: { code: 'STORAGE_UNAVAILABLE', message: 'down' } }),
    }).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(BatonApiError);
    expect(e).toMatchObject({ status: 503, code: 'STORAGE_UNAVAILABLE' });
  });

  it('entries the service says it cannot produce (details.missing_indexes) are findings', async () => {
    const report = await auditLog({
      baseUrl: live.baseUrl,
      apiKey: live.tenant.keys.audit,
      fetch: entriesAnswer(500, { error: { code: 'INTERNAL', message: 'gone', details: { missing_indexes: [1], oversized_indexes: [] } } }),
    });
    expect(report.ok).toBe(false);
    expect(report.findings).toContainEqual(expect.objectContaining({ kind: 'missing', index: 1 }));
    // Nothing names the receipts at 0 and 2, so the report says they went unchecked rather than pass them.
    expect(report.findings).toContainEqual(
      expect.objectContaining({ kind: 'unchecked', index: 0, detail: expect.stringMatching(/^2 entries .* not checked \(0, 2\)/) }),
    );
    expect(report.entriesChecked).toBe(0);
  });

  it('the receipts the service names beside a missing entry are checked at their indexes; what it names wrongly is not taken', async () => {
    const leaves = (await live.svc.store.query(
      `select receipt_id::int, leaf_index::int from log_leaves where tenant_id = $1 order by leaf_index`,
      [live.tenant.id],
    )) as { receipt_id: number }[];
    const [at0, at1, at2] = leaves.map((l) => l.receipt_id);
    const named = (present: unknown[], missing = [1], oversized: number[] = []) =>
      auditLog({
        baseUrl: live.baseUrl,
        apiKey: live.tenant.keys.audit,
        fetch: entriesAnswer(500, {
          error: {
            code: 'INTERNAL',
            message: 'gone',
            details: { missing_indexes: missing, oversized_indexes: oversized, present_entries: present },
          },
        }),
      });
    const honest = await named([
      { index: 0, service_receipt_id: at0 },
      { index: 2, service_receipt_id: at2 },
    ]);
    expect(honest.findings.map((f) => f.kind)).toEqual(['missing']);
    expect(honest.entriesChecked).toBe(2);
    // Two receipts named at each other's index: each entry is another index's leaf.
    const swapped = await named([
      { index: 0, service_receipt_id: at2 },
      { index: 2, service_receipt_id: at0 },
    ]);
    expect(swapped.findings.map((f) => [f.kind, 'index' in f ? f.index : null])).toEqual([
      ['reordered', 0],
      ['missing', 1],
      ['reordered', 2],
    ]);
    // A bundle refused with nothing missing: every entry is checked one by one, and the refusal itself is a finding.
    const allThere = await named(
      [
        { index: 0, service_receipt_id: at0 },
        { index: 1, service_receipt_id: at1 },
        { index: 2, service_receipt_id: at2 },
      ],
      [],
    );
    expect(allThere.findings.map((f) => [f.kind, 'index' in f ? f.index : null])).toEqual([['missing', 0]]);
    expect(allThere.findings[0]!.detail).toMatch(/refused entry bundle 0 .* names no entry missing/);
    expect(allThere.entriesChecked).toBe(3);
    // An entry too long for a bundle: checked, and named for what it is.
    const tooLong = await named(
      [
        { index: 0, service_receipt_id: at0 },
        { index: 1, service_receipt_id: at1 },
        { index: 2, service_receipt_id: at2 },
      ],
      [],
      [2],
    );
    expect(tooLong.findings.map((f) => [f.kind, 'index' in f ? f.index : null, f.detail])).toEqual([
      ['missing', 2, 'entry 2 is over 65,535 bytes, more than an entry bundle can carry'],
    ]);
    // The missing one named as present, an index outside the bundle, a second name for 0: ignored, so 2 is unchecked.
    const wrong = await named([
      { index: 1, service_receipt_id: at1 },
      { index: 0, service_receipt_id: at0 },
      { index: 0, service_receipt_id: at2 },
      { index: 7, service_receipt_id: at2 },
      { index: 2, service_receipt_id: 'x' },
    ]);
    expect(wrong.findings.map((f) => [f.kind, 'index' in f ? f.index : null])).toEqual([
      ['missing', 1],
      ['unchecked', 2],
    ]);
  });
});
