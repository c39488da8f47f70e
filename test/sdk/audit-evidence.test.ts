/**
 * The evidence rule of auditLog, as a third review probed it. Only two things are evidence against a
 * log: two notes it signed that disagree, and a note it signed with level-0 tiles that rebuild
 * another note's signed root without holding it. A proof answer (a refusal, even in Baton's
 * envelope, or a proof that does not verify) is a failed read, whoever forged it; a proof that
 * verifies may still settle a pair. The larger checkpoint's tiles are read before any pair is
 * judged, also when the replay stopped; a smaller latest is a stale view when a tree the log signed
 * holds both notes, a rollback when the larger's tiles do not hold it, and a failed read otherwise.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rootOf, type Hash } from '../../src/protocol/merkle.js';
import { auditLog, type AuditFinding, type AuditOptions, type AuditReport } from '../../src/sdk/audit.js';
import { BatonApiError } from '../../src/sdk/client.js';
import { signCheckpoint } from '../../src/service/log-tree.js';
import { setupTenant } from '../support/service.js';
import { readAsAuditor, recordIntoLog, startLiveService, type LiveService } from './live-service.js';

let live: LiveService;
/** The log's genuinely signed checkpoints of 3, 5 and 7 leaves, and its origin. */
let note3: string;
let note5: string;
let note7: string;
let origin: string;

const record = (n: number, from: number, tenantId = live.tenant.id) => recordIntoLog(live, n, from, tenantId);

const read = (path: string, key = live.tenant.keys.audit) => readAsAuditor(live, path, key);

beforeAll(async () => {
  live = await startLiveService();
  await record(3, 0);
  note3 = await read('/v1/log/checkpoint');
  await record(2, 3);
  note5 = await read('/v1/log/checkpoint');
  await record(2, 5);
  note7 = await read('/v1/log/checkpoint');
  origin = (JSON.parse(await read('/v1/log')) as { origin: string }).origin;
  expect([note3, note5, note7].map((n) => n.split('\n')[1])).toEqual(['3', '5', '7']);
});
afterAll(async () => {
  await live?.close();
});

const answer = (status: number, body: string | Uint8Array, type = 'application/json') =>
  Promise.resolve(new Response(body, { status, headers: { 'content-type': type } }));
const envelope = (code: string, message: string) => JSON.stringify({ error: { code, message }, request_id: 'req_x' });
const unavailable = () => answer(503, envelope('STORAGE_UNAVAILABLE', 'The database is not answering.'));
/** Baton's own refusal, as anyone in the path can forge it. */
const forgedRefusal = () =>
  answer(404, JSON.stringify({ error: { code: 'NOT_FOUND', message: 'The log has 4 leaves, fewer than 7.', details: { tree_size: 4 } } }));
/** The live proof with one bit of its first hash flipped. */
const bitFlipped = async (url: string, init: Parameters<typeof fetch>[1]) => {
  const served = (await (await fetch(url, init)).json()) as { from: number; to: number; proof: string[] };
  const first = Buffer.from(served.proof[0]!, 'base64');
  first[0] = first[0]! ^ 1;
  return answer(200, JSON.stringify({ ...served, proof: [first.toString('base64'), ...served.proof.slice(1)] }));
};
const forgedProofs: [string, (url: string, init: Parameters<typeof fetch>[1]) => Promise<Response>][] = [
  ["Baton's 404 envelope, forged", () => forgedRefusal()],
  ['a bit-flipped proof', bitFlipped],
];

/** The live service, except where `own` answers a request (by its pathname) itself. */
const through =
  (own: (path: string) => Promise<Response> | undefined): AuditOptions['fetch'] =>
  (url, init) =>
    own(new URL(url).pathname) ?? fetch(url, init);

const outcome = (o: Partial<AuditOptions>): Promise<AuditReport | BatonApiError> =>
  auditLog({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.audit, ...o }).then(
    (r) => r,
    (e: unknown) => {
      if (!(e instanceof BatonApiError)) throw e;
      return e;
    },
  );
const kinds = (r: AuditReport | BatonApiError) => (r instanceof BatonApiError ? [] : r.findings.map((f) => f.kind));
const splitViews = (r: AuditReport) =>
  r.findings.filter((f): f is Extract<AuditFinding, { kind: 'split-view' }> => f.kind === 'split-view');
const randomLeaves = (n: number): Hash[] => Array.from({ length: n }, () => new Uint8Array(randomBytes(32)));
const tileBytes = (leaves: readonly Hash[]) => Buffer.concat(leaves.map((l) => Buffer.from(l)));
/** A failed audit that found nothing: thrown (the first failed read), or a report with no finding. */
const nothingFound = (r: AuditReport | BatonApiError, label: string) => {
  if (r instanceof BatonApiError) return;
  expect(r.findings, label).toEqual([]);
};

describe('auditLog: a proof answer is never evidence on its own', () => {
  it('H1: a replay stopped by a failed tile or entry bundle, then a forged proof answer, is no split view of an honest log', async () => {
    for (const stop of ['/v1/log/tile/0/000.p/7', '/v1/log/tile/entries/000.p/7'])
      for (const [what, proofAnswer] of forgedProofs) {
        const label = `${stop}, ${what}`;
        let asked = 0;
        const r = await outcome({
          previousCheckpoint: note3,
          fetch: (url, init) => {
            const p = new URL(url).pathname;
            if (p === stop) return unavailable();
            if (p === '/v1/log/consistency') return (asked++, proofAnswer(url, init));
            return fetch(url, init);
          },
        });
        expect(kinds(r), label).not.toContain('split-view');
        nothingFound(r, label);
        expect(r instanceof BatonApiError || !r.ok, label).toBe(true);
        // A failed entry bundle leaves the tile, read to the end of the tree: it judges the pair, no proof asked.
        expect(asked, label).toBe(stop.includes('entries') ? 0 : 1);
      }
  });

  it('H2 (B1): a hostile log whose tiles rebuild a forged checkpoint is a split view though the entry bundle and the proof fail', async () => {
    const leaves = randomLeaves(7);
    const forged7 = signCheckpoint(live.svc.deps.signer, origin, 7, rootOf(leaves));
    const hostile = (bundle: () => Promise<Response> | undefined) =>
      through((p) =>
        p === '/v1/log/checkpoint'
          ? answer(200, forged7, 'text/plain')
          : p === '/v1/log/tile/0/000.p/7'
            ? answer(200, tileBytes(leaves), 'application/octet-stream')
            : p === '/v1/log/consistency'
              ? unavailable()
              : p === '/v1/log/tile/entries/000.p/7'
                ? bundle()
                : undefined,
      );
    const r = await outcome({ previousCheckpoint: note3, fetch: hostile(unavailable) });
    expect(r).not.toBeInstanceOf(BatonApiError);
    const report = r as AuditReport;
    expect(kinds(report)).toEqual(['split-view']);
    expect(splitViews(report)[0]!.detail).toMatch(
      /checkpoints of sizes 3 and 7 do not agree .*the tiles of the larger do not hold the smaller/,
    );
    const evidence = splitViews(report)[0]!.finding;
    expect(evidence.kind === 'not-consistent' && [evidence.older.note, evidence.newer.note]).toEqual([note3, forged7]);
    expect(report.incomplete?.map((i) => i.source)).toEqual(['GET /v1/log/tile/entries/000.p/7']);
    // The same with the bundle served: found from the replay's tiles, the entries rewritten.
    const control = (await outcome({ previousCheckpoint: note3, fetch: hostile(() => undefined) })) as AuditReport;
    expect(splitViews(control)).toHaveLength(1);
  });
});

describe('auditLog: a smaller latest is judged by tiles, never by a proof answer', () => {
  const staleLatest = (proof: () => Promise<Response>, more: (p: string) => Promise<Response> | undefined = () => undefined) =>
    through((p) => (p === '/v1/log/checkpoint' ? answer(200, note3, 'text/plain') : p === '/v1/log/consistency' ? proof() : more(p)));

  it('A2: --tree-size 7, --previous 5, the genuine 3 served stale: a stale view whatever the proof answers', async () => {
    for (const [what, proof] of [
      ['503', unavailable],
      ['forged refusal', forgedRefusal],
    ] as const) {
      const r = await outcome({ treeSize: 7, previousCheckpoint: note5, fetch: staleLatest(proof) });
      expect(r, what).toBeInstanceOf(BatonApiError);
      expect((r as BatonApiError).message, what).toMatch(
        /served a stale view: the log served its checkpoint of 3 leaves after the one of 7/,
      );
    }
  });

  it('A3: --previous 5, the genuine 3 served stale, the proof a forged refusal: the tiles of 5 show a stale view, no rollback', async () => {
    const r = await outcome({ previousCheckpoint: note5, fetch: staleLatest(forgedRefusal) });
    expect(r).toBeInstanceOf(BatonApiError);
    expect((r as BatonApiError).message).toMatch(
      /served a stale view: the log served its checkpoint of 3 leaves after the one of 5 leaves, which extends it \(the tiles of the larger show it\)/,
    );
  });

  it('M1: the tiles of 5 unreadable, a forged refusal: a stale view or a rollback, a failed read; a forged smaller note the tiles do not hold: a rollback', async () => {
    const unknown = await outcome({
      previousCheckpoint: note5,
      fetch: staleLatest(forgedRefusal, (p) => (p === '/v1/log/tile/0/000.p/5' ? unavailable() : undefined)),
    });
    expect(unknown).toBeInstanceOf(BatonApiError);
    // The log signed 3 leaves of another history: the tiles of 5 rebuild its root and do not hold it.
    const leaves = randomLeaves(3);
    const forged3 = signCheckpoint(live.svc.deps.signer, origin, 3, rootOf(leaves));
    const rolled = (await outcome({
      previousCheckpoint: note5,
      fetch: through((p) =>
        p === '/v1/log/checkpoint'
          ? answer(200, forged3, 'text/plain')
          : p === '/v1/log/tile/0/000.p/3'
            ? answer(200, tileBytes(leaves), 'application/octet-stream')
            : p === '/v1/log/consistency'
              ? unavailable()
              : undefined,
      ),
    })) as AuditReport;
    const rollback = rolled.findings.find((f): f is Extract<AuditFinding, { kind: 'rollback' }> => f.kind === 'rollback');
    expect(rollback?.detail).toMatch(/the log shrank from 5 to 3 leaves, and not to a prefix/);
    expect([rollback?.finding.older.note, rollback?.finding.newer.note]).toEqual([note5, forged3]);
    expect(kinds(rolled)).not.toContain('split-view');
  });
});

describe('auditLog: honest trees across tile boundaries stay clean', () => {
  it('256/257/512/515 leaves, every --tree-size and --previous: clean; stopped or stale: nothing found', async () => {
    const t = await setupTenant(live.svc, 'evidence-tiles');
    const checkpoint = () => read('/v1/log/checkpoint', t.keys.audit);
    await record(256, 0, t.id);
    const n256 = await checkpoint();
    await record(1, 256, t.id);
    const n257 = await checkpoint();
    await record(255, 257, t.id);
    const n512 = await checkpoint();
    await record(3, 512, t.id);
    const n515 = await checkpoint();
    const audit = (o: Partial<AuditOptions>) => outcome({ apiKey: t.keys.audit, ...o });
    for (const treeSize of [undefined, 256, 257, 512, 515])
      for (const previous of [undefined, n256, n257, n512, n515]) {
        const base = { ...(treeSize ? { treeSize } : {}), ...(previous ? { previousCheckpoint: previous } : {}) };
        const label = `tree size ${treeSize}, previous ${previous?.split('\n')[1]}`;
        const clean = await audit(base);
        expect(clean, label).not.toBeInstanceOf(BatonApiError);
        expect(clean, label).toMatchObject({ ok: true, findings: [] });
        const stopped = await audit({ ...base, fetch: through((p) => (p === '/v1/log/tile/entries/000' ? unavailable() : undefined)) });
        nothingFound(stopped, `${label}, stopped`);
        for (const stale of [n256, n257]) {
          const r = await audit({
            ...base,
            fetch: through((p) =>
              p === '/v1/log/checkpoint' ? answer(200, stale, 'text/plain') : p === '/v1/log/consistency' ? unavailable() : undefined,
            ),
          });
          nothingFound(r, `${label}, stale ${stale.split('\n')[1]}`);
        }
      }
  }, 240_000);
});
