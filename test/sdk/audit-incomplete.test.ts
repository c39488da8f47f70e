/**
 * auditLog when a read fails after the checkpoints were verified: the findings already made (a
 * rollback or split view proven by the two signed notes) are kept in a report marked incomplete,
 * not dropped for a thrown "server failing"; with nothing found the failure is still thrown. A
 * level-0 tile the checkpoint commits to that the log answers 404 for is a finding, and a redirect
 * is never "the service cannot produce" an entry bundle. The report says whether the service keys
 * were pinned, --trust or not.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeBase64url } from '../../src/protocol/base64url.js';
import { rootOf } from '../../src/protocol/merkle.js';
import { auditLog, type AuditOptions, type AuditReport } from '../../src/sdk/audit.js';
import { BatonApiError } from '../../src/sdk/client.js';
import { signCheckpoint } from '../../src/service/log-tree.js';
import { randomBytes } from 'node:crypto';
import { readAsAuditor, recordIntoLog, startLiveService, type LiveService } from './live-service.js';

let live: LiveService;
/** The log's genuinely signed checkpoints of 3 and of 5 leaves. */
let note3: string;
let note5: string;

const record = (n: number, from: number) => recordIntoLog(live, n, from);

const read = (path: string) => readAsAuditor(live, path);

beforeAll(async () => {
  live = await startLiveService();
  await record(3, 0);
  note3 = await read('/v1/log/checkpoint');
  await record(2, 3);
  note5 = await read('/v1/log/checkpoint');
  expect(note3.split('\n')[1]).toBe('3');
  expect(note5.split('\n')[1]).toBe('5');
});
afterAll(async () => {
  await live?.close();
});

const envelope = (code: string, message: string, details?: object) =>
  JSON.stringify({ error: { code, message, ...(details ? { details } : {}) }, request_id: 'req_x' });
const answer = (status: number, body: string, headers: Record<string, string> = {}) =>
  Promise.resolve(new Response(body, { status, headers: { 'content-type': 'application/json', ...headers } }));
const unavailable = () => answer(503, envelope('STORAGE_UNAVAILABLE', 'The database is not answering.'));
/**
 * What a log rolled back to 3 leaves answers for the proof up to 5 (Baton's own 404, its size in
 * details). Anyone in the path can forge it: it is no evidence of a rollback on its own.
 */
const rolledBack = () => answer(404, envelope('NOT_FOUND', 'The log has 3 leaves, fewer than 5.', { tree_size: 3 }));
/** A checkpoint of 3 leaves the log signed over another history than the one its tiles of 5 hold: a real rollback. */
const rolledBack3 = async () => {
  const origin = (JSON.parse(await read('/v1/log')) as { origin: string }).origin;
  return signCheckpoint(live.svc.deps.signer, origin, 3, new Uint8Array(randomBytes(32)));
};

/** The live service, except where `own` answers a path (by its pathname) itself. */
const through =
  (own: (path: string) => Promise<Response> | undefined): AuditOptions['fetch'] =>
  (url, init) =>
    own(new URL(url).pathname) ?? fetch(url, init);

const audit = (o: Partial<AuditOptions>) => auditLog({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.audit, ...o });

async function thrown(o: Partial<AuditOptions>): Promise<BatonApiError> {
  const e = await audit(o).then(
    (r: AuditReport) => r,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(BatonApiError);
  return e as BatonApiError;
}

describe('auditLog: a read that fails after the notes are verified keeps the findings made', () => {
  it('a rollback stands when GET /v1/service-receipts then answers 503: the report is incomplete, not thrown', async () => {
    const forged3 = await rolledBack3();
    const report = await audit({
      previousCheckpoint: note5,
      fetch: through((path) =>
        path === '/v1/log/checkpoint'
          ? answer(200, forged3)
          : path === '/v1/log/consistency'
            ? rolledBack()
            : path === '/v1/service-receipts'
              ? unavailable()
              : undefined,
      ),
    });
    expect(report.ok).toBe(false);
    // The tiles of 5 rebuild its root and do not hold the 3 served (nor do the tiles served for 3 rebuild it).
    expect(report.findings.map((f) => f.kind)).toEqual(['rollback', 'root-mismatch']);
    expect(report.findings[0]!.detail).toMatch(/the log shrank from 5 to 3 leaves, and not to a prefix/);
    // The tree served was replayed before the listing failed.
    expect(report.entriesChecked).toBe(3);
    expect(report.incomplete).toEqual([
      {
        source: 'GET /v1/service-receipts?after=0&limit=500',
        status: 503,
        code: 'STORAGE_UNAVAILABLE',
        detail: 'The database is not answering.',
        notChecked: expect.stringMatching(/not-listed.*not-in-log/) as unknown,
      },
    ]);
    // The rest of the report's shape is as before.
    expect(report).toMatchObject({ checkpointRead: true, treeSize: 3, checkpoint: forged3, trustedOnFirstUse: true });
  });

  it('a smaller latest whose larger tiles cannot be read is a stale view or a rollback: a failed read, never a finding', async () => {
    // The genuine note of 3 served after the one of 5, the tiles of 5 failing and the proof refused
    // (forged or not): nothing tells a stale view from a rollback. A tile of 3 answered 404 is a
    // finding of its own, so the report is returned and shows what was left.
    const report = await audit({
      previousCheckpoint: note5,
      fetch: through((path) =>
        path === '/v1/log/checkpoint'
          ? answer(200, note3)
          : path === '/v1/log/consistency'
            ? rolledBack()
            : path === '/v1/log/tile/0/000.p/5'
              ? unavailable()
              : path === '/v1/log/tile/0/000.p/3'
                ? answer(404, envelope('NOT_FOUND', 'No such tile.'))
                : undefined,
      ),
    });
    expect(report.findings.map((f) => f.kind)).toEqual(['malformed']);
    expect(report.ok).toBe(false);
    expect(report.incomplete).toEqual([
      expect.objectContaining({
        source: 'GET /v1/log/tile/0/000.p/5',
        status: 503,
        notChecked: expect.stringMatching(
          /is a stale view or a rollback of the earlier one \(5 leaves\): keep both notes, and audit again/,
        ) as unknown,
      }),
      expect.objectContaining({ source: 'GET /v1/log/consistency?from=3&to=5', status: 404, code: 'NOT_FOUND' }),
    ]);
  });

  it('a rollback stands when the first level-0 tile fails, and when the entry bundle does', async () => {
    const forged3 = await rolledBack3();
    for (const failing of ['/v1/log/tile/0/000.p/3', '/v1/log/tile/entries/000.p/3']) {
      const report = await audit({
        previousCheckpoint: note5,
        fetch: through((path) =>
          path === '/v1/log/checkpoint'
            ? answer(200, forged3)
            : path === '/v1/log/consistency'
              ? rolledBack()
              : path === failing
                ? unavailable()
                : undefined,
        ),
      });
      expect(report.ok, failing).toBe(false);
      // The tiles of 5 (read for the pair) show it; after a failed entry bundle the tile of 3, read to
      // its end, does not rebuild the 3 served.
      expect(
        report.findings.map((f) => f.kind),
        failing,
      ).toEqual(failing.includes('entries') ? ['rollback', 'root-mismatch'] : ['rollback']);
      expect(report.incomplete, failing).toEqual([
        expect.objectContaining({
          source: `GET ${failing}`,
          status: 503,
          code: 'STORAGE_UNAVAILABLE',
          notChecked: expect.stringMatching(/^entries 0 to 2 of the 3 audited .*the root, and GET \/v1\/service-receipts/) as unknown,
        }),
      ]);
    }
  });

  it('a split view the tiles show stands when the entry bundle then fails; a refused proof alone shows none', async () => {
    // B1: the log signed a checkpoint of 5 over other leaves, and serves their tile, then fails the
    // entry bundle and refuses the proof. The tile, read on after the replay stopped, rebuilds the
    // forged root and does not hold the 3 given: that, not the refusal, is the evidence.
    const origin = (JSON.parse(await read('/v1/log')) as { origin: string }).origin;
    const leaves = Array.from({ length: 5 }, () => new Uint8Array(randomBytes(32)));
    const forged5 = signCheckpoint(live.svc.deps.signer, origin, 5, rootOf(leaves));
    const refused = () => answer(404, envelope('NOT_FOUND', 'The log has 2 leaves, fewer than 5.', { tree_size: 2 }));
    const failingBundle = () => answer(500, '<html>oops</html>', { 'content-type': 'text/html' });
    for (const proofAnswer of [refused, unavailable]) {
      const report = await audit({
        previousCheckpoint: note3,
        fetch: through((path) =>
          path === '/v1/log/checkpoint'
            ? answer(200, forged5)
            : path === '/v1/log/tile/0/000.p/5'
              ? Promise.resolve(new Response(Buffer.concat(leaves), { status: 200 }))
              : path === '/v1/log/consistency'
                ? proofAnswer()
                : path.startsWith('/v1/log/tile/entries/')
                  ? failingBundle()
                  : undefined,
        ),
      });
      expect(report.ok).toBe(false);
      expect(report.findings.map((f) => f.kind)).toEqual(['split-view']);
      expect(report.findings[0]!.detail).toMatch(
        /checkpoints of sizes 3 and 5 do not agree \(not-consistent\): the tiles of the larger do not hold the smaller/,
      );
      // The tiles judged the pair: no proof was asked.
      expect(report.incomplete).toEqual([expect.objectContaining({ source: 'GET /v1/log/tile/entries/000.p/5', status: 500 })]);
      expect(report.entriesChecked).toBe(0);
    }
    // The honest log behind the same refusal and failing bundle: its tile holds the 3 given, nothing is found.
    const honest = await thrown({
      previousCheckpoint: note3,
      fetch: through((path) =>
        path === '/v1/log/consistency' ? refused() : path.startsWith('/v1/log/tile/entries/') ? failingBundle() : undefined,
      ),
    });
    expect(honest).toMatchObject({ status: 500 });
  });

  it('with nothing found, a failed read is still thrown (the service failing, not a clean or failed audit)', async () => {
    const tile = await thrown({ fetch: through((path) => (path === '/v1/log/tile/0/000.p/5' ? unavailable() : undefined)) });
    expect(tile).toMatchObject({ status: 503, code: 'STORAGE_UNAVAILABLE' });
    // A consistency proof the log cannot serve right now proves nothing either way; with the tiles
    // of 5 read, it is not even asked, so an honest audit stays clean (L1).
    const clean = await audit({
      previousCheckpoint: note3,
      fetch: through((path) => (path === '/v1/log/consistency' ? unavailable() : undefined)),
    });
    expect(clean).toMatchObject({ ok: true, findings: [] });
    const proof = await thrown({
      previousCheckpoint: note3,
      fetch: through((path) => (path === '/v1/log/consistency' || path === '/v1/log/tile/0/000.p/5' ? unavailable() : undefined)),
    });
    expect(proof).toMatchObject({ status: 503, code: 'STORAGE_UNAVAILABLE' });
  });

  it('a fork from an earlier checkpoint is found from the tiles when the consistency proof cannot be read', async () => {
    // The log signed a 3-leaf checkpoint of another tree: the 5 leaves it serves now do not hold it.
    const origin = (JSON.parse(await read('/v1/log')) as { origin: string }).origin;
    const forked3 = signCheckpoint(live.svc.deps.signer, origin, 3, new Uint8Array(randomBytes(32)));
    for (const proofAnswer of [undefined, unavailable] as const) {
      const report = await audit({
        previousCheckpoint: forked3,
        fetch: through((path) => (path === '/v1/log/consistency' && proofAnswer ? proofAnswer() : undefined)),
      });
      expect(report.ok).toBe(false);
      expect(report.findings.map((f) => f.kind)).toEqual(['split-view']);
      if (proofAnswer !== undefined) {
        expect(report.findings[0]!.detail).toMatch(/the tiles of the larger do not hold the smaller/);
        // The tiles judged the pair: the failing proof was never asked.
        expect(report.incomplete).toBeUndefined();
      }
    }
    // Auditing an earlier checkpoint (--tree-size 3) whose tiles hold the fork's size: found from them,
    // though the proof and a later tile both fail.
    const forked2 = signCheckpoint(live.svc.deps.signer, origin, 2, new Uint8Array(randomBytes(32)));
    const earlier = await audit({
      treeSize: 3,
      previousCheckpoint: forked2,
      fetch: through((path) => (path === '/v1/log/consistency' || path === '/v1/log/tile/0/000.p/5' ? unavailable() : undefined)),
    });
    expect(earlier.ok).toBe(false);
    expect(earlier.findings.map((f) => f.kind)).toEqual(['split-view']);
    // And when the audited checkpoint's own tiles do not rebuild it (a root-mismatch), the fork is
    // still found from the tiles that rebuild the latest; so is the audited checkpoint's own (the
    // log signed it, and the latest's leaves do not hold it), each pair on its own.
    const forgedAudited = signCheckpoint(live.svc.deps.signer, origin, 3, new Uint8Array(randomBytes(32)));
    const mismatched = await audit({
      treeSize: 3,
      previousCheckpoint: forked2,
      fetch: through((path) =>
        path === '/v1/log/checkpoints/3' ? answer(200, forgedAudited) : path === '/v1/log/consistency' ? unavailable() : undefined,
      ),
    });
    expect(mismatched.findings.map((f) => f.kind).sort()).toEqual(['root-mismatch', 'split-view', 'split-view']);
  });
});

describe('auditLog: what the log owes as signed', () => {
  it('a level-0 tile the checkpoint commits to answered 404 is a finding; its entries are checked from the entry bundle', async () => {
    const report = await audit({
      fetch: through((path) =>
        path === '/v1/log/tile/0/000.p/5' ? answer(404, envelope('NOT_FOUND', 'The log does not reach this tile yet.')) : undefined,
      ),
    });
    expect(report.ok).toBe(false);
    expect(report.incomplete).toBeUndefined();
    expect(report.findings).toEqual([
      {
        kind: 'malformed',
        index: 0,
        source: 'GET /v1/log/tile/0/000.p/5',
        detail: expect.stringMatching(
          /^the log does not serve a level-0 tile that its checkpoint commits to \(HTTP 404 NOT_FOUND\); its entries were checked, and the root recomputed, from the entry bundle's$/,
        ) as unknown,
      },
    ]);
    expect(report.entriesChecked).toBe(5);
    // A proxy's 404 page is not the log's answer: it says nothing about the log, and is thrown; so for
    // an entry bundle (not every entry "missing").
    const bundle = await thrown({
      fetch: through((path) =>
        path.startsWith('/v1/log/tile/entries/') ? answer(404, '<html>Not Found</html>', { 'content-type': 'text/html' }) : undefined,
      ),
    });
    expect(bundle).toMatchObject({ status: 404, code: 'UNEXPECTED_RESPONSE' });
    const proxied = await thrown({
      fetch: through((path) =>
        path === '/v1/log/tile/0/000.p/5' ? answer(404, '<html>Not Found</html>', { 'content-type': 'text/html' }) : undefined,
      ),
    });
    expect(proxied).toMatchObject({ status: 404, code: 'UNEXPECTED_RESPONSE' });
  });

  it('a redirect on an entry bundle is not the service saying it cannot produce it, whatever its body names', async () => {
    const e = await thrown({
      fetch: through((path) =>
        path.startsWith('/v1/log/tile/entries/')
          ? answer(302, envelope('INTERNAL', 'gone', { missing_indexes: [0, 1, 2, 3, 4] }), { location: 'http://elsewhere.test/' })
          : undefined,
      ),
    });
    expect(e).toMatchObject({ status: 302, code: 'UNEXPECTED_RESPONSE' });
  });

  it('says whether the service keys were pinned: --trust alone leaves receipts judged by the keys the service serves', async () => {
    const info = JSON.parse(await read('/v1/log')) as { origin: string; verifier_keys: string[] };
    const trust = { origin: info.origin, logKeys: info.verifier_keys };
    const keys = (JSON.parse(await read('/v1/keys')) as { keys: { kid: string; public_key: string }[] }).keys.map((k) => ({
      kid: k.kid,
      publicKey: decodeBase64url(k.public_key, 'key'),
    }));
    expect(await audit({ trust })).toMatchObject({ ok: true, trustedOnFirstUse: false, serviceKeysPinned: false });
    expect(await audit({ trust, serviceKeys: keys })).toMatchObject({ ok: true, trustedOnFirstUse: false, serviceKeysPinned: true });
    expect(await audit({})).toMatchObject({ ok: true, trustedOnFirstUse: true, serviceKeysPinned: false });
  });
});
