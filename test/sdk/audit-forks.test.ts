/**
 * auditLog's split views are only ever proven ones: two notes the log signed, or a note and level-0
 * tiles that rebuild another note's signed root without holding it. A proof answer is never evidence
 * on its own (a proxy's page, Baton's own refusal, a proof that does not verify: anyone in the path
 * can forge each): it is a failed read, and it is only asked for when no rebuilt tree judges the pair.
 * With --tree-size, the audited checkpoint is compared with the latest's own leaves, each pair of
 * checkpoints on its own. An honest log behind a flaky proxy is never a split view.
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
/** The log's genuinely signed checkpoints of 3 and of 5 leaves, and its origin. */
let note3: string;
let note5: string;
let origin: string;

const record = (n: number, from: number, tenantId = live.tenant.id) => recordIntoLog(live, n, from, tenantId);

const read = (path: string) => readAsAuditor(live, path);

beforeAll(async () => {
  live = await startLiveService();
  await record(3, 0);
  note3 = await read('/v1/log/checkpoint');
  await record(2, 3);
  note5 = await read('/v1/log/checkpoint');
  origin = (JSON.parse(await read('/v1/log')) as { origin: string }).origin;
  expect(note3.split('\n')[1]).toBe('3');
  expect(note5.split('\n')[1]).toBe('5');
});
afterAll(async () => {
  await live?.close();
});

const answer = (status: number, body: string | Uint8Array, type = 'application/json') =>
  Promise.resolve(new Response(body, { status, headers: { 'content-type': type } }));
const envelope = (code: string, message: string) => JSON.stringify({ error: { code, message }, request_id: 'req_x' });
const unavailable = () => answer(503, envelope('STORAGE_UNAVAILABLE', 'The database is not answering.'));
/** Pages and bodies a proxy, gateway or misrouted path answers with: none is Baton's error envelope. */
const notBaton: [string, () => Promise<Response>][] = [
  ['a proxy 404 page', () => answer(404, '<html>Not Found</html>', 'text/html')],
  ['a proxy 400 page', () => answer(400, '<html>Bad Request</html>', 'text/html')],
  ['a 422 without an envelope', () => answer(422, '{"detail":"Unprocessable Entity"}')],
  ['a 404 with another JSON body', () => answer(404, '{"message":"no route"}')],
  ['a 404 whose envelope has another code', () => answer(404, envelope('ROUTE_MISSING', 'Not here.'))],
];

/** The live service, except where `own` answers a request (by its pathname and query) itself. */
const through =
  (own: (path: string, query: URLSearchParams) => Promise<Response> | undefined): AuditOptions['fetch'] =>
  (url, init) => {
    const u = new URL(url);
    return own(u.pathname, u.searchParams) ?? fetch(url, init);
  };

const audit = (o: Partial<AuditOptions>) => auditLog({ baseUrl: live.baseUrl, apiKey: live.tenant.keys.audit, ...o });
const outcome = (o: Partial<AuditOptions>): Promise<AuditReport | BatonApiError> =>
  audit(o).then(
    (r) => r,
    (e: unknown) => {
      if (!(e instanceof BatonApiError)) throw e;
      return e;
    },
  );
const kinds = (r: AuditReport) => r.findings.map((f) => f.kind);
const splitViews = (r: AuditReport) =>
  r.findings.filter((f): f is Extract<AuditFinding, { kind: 'split-view' }> => f.kind === 'split-view');
/** The sizes of the two checkpoints a split view joins, smaller first. */
const pairOf = (f: Extract<AuditFinding, { kind: 'split-view' }>): [number, number] => {
  const [a, b] = f.finding.kind === 'same-size-different-roots' ? f.finding.checkpoints : [f.finding.older, f.finding.newer];
  return [a.checkpoint.size, b.checkpoint.size].sort((x, y) => x - y) as [number, number];
};
const randomLeaves = (n: number): Hash[] => Array.from({ length: n }, () => new Uint8Array(randomBytes(32)));
const tileBytes = (leaves: readonly Hash[]) => Buffer.concat(leaves.map((l) => Buffer.from(l)));

describe('auditLog: the tiles outrank a proof answer, and two signed notes outrank any read', () => {
  const forgedRefusal = () =>
    answer(404, JSON.stringify({ error: { code: 'NOT_FOUND', message: 'The log has 4 leaves.', details: { tree_size: 4 } } }));
  const bitFlipped = async (url: string, init: Parameters<typeof fetch>[1]) => {
    const served = (await (await fetch(url, init)).json()) as { from: number; to: number; proof: string[] };
    const first = Buffer.from(served.proof[0]!, 'base64');
    first[0] = first[0]! ^ 1;
    return answer(200, JSON.stringify({ ...served, proof: [first.toString('base64'), ...served.proof.slice(1)] }));
  };
  const forgedProofs: [string, (url: string, init: Parameters<typeof fetch>[1]) => Promise<Response>][] = [
    ["Baton's 404 envelope, forged", () => forgedRefusal()],
    ['400 MALFORMED_LOG_PROOF, forged', () => answer(400, envelope('MALFORMED_LOG_PROOF', 'The proof is malformed.'))],
    ['a bit-flipped proof', bitFlipped],
  ];

  /** Answers to the proof that are not Baton's envelope, and queries rewritten on the way (R1). */
  const proxyAnswers: [string, (url: string, init: Parameters<typeof fetch>[1]) => Promise<Response>][] = [
    ...notBaton.map(([what, page]): [string, () => Promise<Response>] => [what, page]),
    ['query dropped', (url, init) => fetch(`${new URL(url).origin}/v1/log/consistency`, init)],
    ['parameter added', (url, init) => fetch(`${url}&utm_source=gw`, init)],
    ['asked past its size', (url, init) => fetch(`${new URL(url).origin}/v1/log/consistency?from=3&to=99`, init)],
  ];

  it('R2: when the tiles rebuild the larger root, no proof is asked: a forged or failing answer changes nothing', async () => {
    for (const [what, proofAnswer] of [...forgedProofs, ...proxyAnswers, ['503', () => unavailable()] as const])
      for (const o of [{ treeSize: 3 }, { previousCheckpoint: note3 }, { treeSize: 3, previousCheckpoint: note3 }]) {
        const label = `${what}, ${JSON.stringify(Object.keys(o))}`;
        let asked = 0;
        const report = await audit({
          ...o,
          fetch: (url, init) => (new URL(url).pathname === '/v1/log/consistency' ? (asked++, proofAnswer(url, init)) : fetch(url, init)),
        });
        expect(report.findings, label).toEqual([]);
        expect(report.ok, label).toBe(true);
        expect(asked, label).toBe(0);
      }
  });

  it('a proof answer alone is never evidence: with the tiles of the larger unreadable, any answer but a verifying proof is a failed read', async () => {
    // The tile and entry bundle of 5 answered with Baton's 404: findings of their own, and no tree of 5 to judge by.
    const noTree = (p: string) =>
      p === '/v1/log/tile/0/000.p/5' || p === '/v1/log/tile/entries/000.p/5'
        ? answer(404, envelope('NOT_FOUND', 'No such tile.'))
        : undefined;
    for (const [what, proofAnswer] of [...forgedProofs, ...proxyAnswers]) {
      const report = await audit({
        previousCheckpoint: note3,
        fetch: (url, init) =>
          new URL(url).pathname === '/v1/log/consistency' ? proofAnswer(url, init) : (noTree(new URL(url).pathname) ?? fetch(url, init)),
      });
      expect(kinds(report), what).not.toContain('split-view');
      expect(kinds(report), what).toContain('malformed');
      expect(report.ok, what).toBe(false);
      expect(report.incomplete, what).toEqual([
        expect.objectContaining({
          source: 'GET /v1/log/consistency?from=3&to=5',
          notChecked: expect.stringMatching(/extends the earlier one given .*a proof answer alone is no evidence/) as unknown,
        }),
      ]);
    }
    // The proof that verifies settles the pair: nothing in the path can forge one.
    const settled = await audit({ previousCheckpoint: note3, fetch: through(noTree) });
    expect(settled.incomplete).toBeUndefined();
    expect(kinds(settled)).not.toContain('split-view');
  });

  it("Baton's own refusal (its 404 NOT_FOUND: fewer leaves than a note it signed) is a failed read too: anyone in the path can forge it", async () => {
    // The log signed a note of 7 leaves it does not have: the live service's real answers (the
    // proof's 404 saying tree_size 5, the tile of 7's 404) are all there is to judge it by.
    const forged7 = signCheckpoint(live.svc.deps.signer, origin, 7, new Uint8Array(randomBytes(32)));
    const report = await audit({
      previousCheckpoint: note3,
      fetch: through((path) => (path === '/v1/log/checkpoint' ? answer(200, forged7, 'text/plain') : undefined)),
    });
    expect(splitViews(report)).toEqual([]);
    expect(report.incomplete).toContainEqual(
      expect.objectContaining({ source: 'GET /v1/log/consistency?from=3&to=7', status: 404, code: 'NOT_FOUND' }),
    );
    expect(report.ok).toBe(false);
  });

  it('R3: with --tree-size, a --previous of the same size and another root is a split view before any read', async () => {
    const forked3 = signCheckpoint(live.svc.deps.signer, origin, 3, new Uint8Array(randomBytes(32)));
    const failing = (p: string) => (p === '/v1/log/consistency' || p.startsWith('/v1/log/tile/') ? unavailable() : undefined);
    // The --previous forked; then the audited checkpoint forged, the --previous genuine.
    const cases: [string, Partial<AuditOptions>][] = [
      ['previous forked', { previousCheckpoint: forked3, fetch: through(failing) }],
      [
        'audited forged',
        {
          previousCheckpoint: note3,
          fetch: through((p) => (p === '/v1/log/checkpoints/3' ? answer(200, forked3, 'text/plain') : failing(p))),
        },
      ],
    ];
    for (const [what, o] of cases) {
      const report = await audit({ treeSize: 3, ...o });
      const found = splitViews(report);
      expect(found.map(pairOf), what).toContainEqual([3, 3]);
      expect(found.find((f) => f.finding.kind === 'same-size-different-roots')!.detail, what).toMatch(/the two signed notes are the proof/);
      expect(report.incomplete, what).toBeDefined();
      expect(report.ok, what).toBe(false);
    }
  });

  it('R4: a forged audited checkpoint is found from the latest tiles when the replay of the audited ones stops', async () => {
    const forged3 = signCheckpoint(live.svc.deps.signer, origin, 3, new Uint8Array(randomBytes(32)));
    for (const stopping of ['/v1/log/tile/0/000.p/3', '/v1/log/tile/entries/000.p/3']) {
      const report = await audit({
        treeSize: 3,
        fetch: through((p) =>
          p === '/v1/log/checkpoints/3'
            ? answer(200, forged3, 'text/plain')
            : p === '/v1/log/consistency' || p === stopping
              ? unavailable()
              : undefined,
        ),
      });
      expect(splitViews(report).map(pairOf), stopping).toEqual([[3, 5]]);
      expect(splitViews(report)[0]!.detail, stopping).toMatch(/the tiles of the larger do not hold the smaller/);
      // The latest's tiles judged the pair: no proof was asked.
      expect(
        report.incomplete?.map((i) => i.source),
        stopping,
      ).toEqual([`GET ${stopping}`]);
      // The entries and the listing need the replay: not judged. The audited tiles, read to their end
      // after a failed entry bundle, do not rebuild the forged root.
      expect(kinds(report), stopping).toEqual(stopping.includes('entries') ? ['split-view', 'root-mismatch'] : ['split-view']);
    }
    // An honest log behind the same failures: nothing found, the failure thrown.
    const e = await outcome({
      treeSize: 3,
      fetch: through((p) => (p === '/v1/log/consistency' || p === '/v1/log/tile/0/000.p/3' ? unavailable() : undefined)),
    });
    expect(e).toBeInstanceOf(BatonApiError);
  });

  it('R5: an older genuine note served as the latest (a cache ignoring no-cache) is a stale view, not a rollback', async () => {
    const stale = (p: string) => (p === '/v1/log/checkpoint' ? answer(200, note3, 'text/plain') : undefined);
    for (const o of [{ previousCheckpoint: note5 }, { treeSize: 5 }, { treeSize: 5, previousCheckpoint: note5 }]) {
      const label = JSON.stringify(Object.keys(o));
      const r = await outcome({ ...o, fetch: through(stale) });
      expect(r, label).toBeInstanceOf(BatonApiError);
      expect((r as BatonApiError).message, label).toMatch(
        /served a stale view: the log served its checkpoint of 3 leaves after the one of 5 leaves, which extends it/,
      );
      // With the proof unreadable too, the tiles of 5 (read when auditing it) still show it.
      if ('treeSize' in o) {
        const t = await outcome({ ...o, fetch: through((p) => (p === '/v1/log/consistency' ? unavailable() : stale(p))) });
        expect(t, label).toBeInstanceOf(BatonApiError);
      }
    }
    // With something else found, the stale view is listed as incomplete, never a rollback.
    const report = await audit({
      previousCheckpoint: note5,
      fetch: through((p) => (p === '/v1/log/tile/0/000.p/3' ? answer(404, envelope('NOT_FOUND', 'No such tile.')) : stale(p))),
    });
    expect(kinds(report)).toEqual(['malformed']);
    expect(report.incomplete).toEqual([
      expect.objectContaining({
        source: 'GET /v1/log/checkpoint',
        code: 'UNEXPECTED_RESPONSE',
        detail: expect.stringMatching(/stale view/) as unknown,
      }),
    ]);
  });
});

describe('auditLog --tree-size: the audited checkpoint against the latest tree', () => {
  it("an audited checkpoint (signed) that the latest's leaves do not hold is a split view, though the proof cannot be read", async () => {
    const forged3 = signCheckpoint(live.svc.deps.signer, origin, 3, new Uint8Array(randomBytes(32)));
    const report = await audit({
      treeSize: 3,
      fetch: through((path) =>
        path === '/v1/log/checkpoints/3' ? answer(200, forged3, 'text/plain') : path === '/v1/log/consistency' ? unavailable() : undefined,
      ),
    });
    // The audited tiles do not rebuild the forged root; the latest's do rebuild its own, and hold another 3.
    expect(kinds(report)).toEqual(['split-view', 'root-mismatch']);
    expect(pairOf(splitViews(report)[0]!)).toEqual([3, 5]);
    expect(splitViews(report)[0]!.detail).toMatch(/the tiles of the larger do not hold the smaller/);
    // The latest's tiles judged the pair: the failing proof was never asked.
    expect(report.incomplete).toBeUndefined();
  });

  it("a hostile log's partial tile that matches the forged audited checkpoint does not hide the latest tile's earlier leaves", async () => {
    const forgedLeaves = randomLeaves(3);
    const forged3 = signCheckpoint(live.svc.deps.signer, origin, 3, rootOf(forgedLeaves));
    const report = await audit({
      treeSize: 3,
      fetch: through((path) =>
        path === '/v1/log/checkpoints/3'
          ? answer(200, forged3, 'text/plain')
          : path === '/v1/log/tile/0/000.p/3'
            ? answer(200, tileBytes(forgedLeaves), 'application/octet-stream')
            : path === '/v1/log/consistency'
              ? unavailable()
              : undefined,
      ),
    });
    // The entries are not the forged leaves (rewritten); the split view is the two signed notes.
    expect(splitViews(report).map(pairOf)).toEqual([[3, 5]]);
    expect(kinds(report)).not.toContain('root-mismatch');
    expect(report.ok).toBe(false);
  });

  it('each pair is found on its own: a forged audited checkpoint and a forked --previous are two split views', async () => {
    const forged3 = signCheckpoint(live.svc.deps.signer, origin, 3, new Uint8Array(randomBytes(32)));
    const forked2 = signCheckpoint(live.svc.deps.signer, origin, 2, new Uint8Array(randomBytes(32)));
    const report = await audit({
      treeSize: 3,
      previousCheckpoint: forked2,
      fetch: through((path) =>
        path === '/v1/log/checkpoints/3' ? answer(200, forged3, 'text/plain') : path === '/v1/log/consistency' ? unavailable() : undefined,
      ),
    });
    expect(
      splitViews(report)
        .map(pairOf)
        .sort((a, b) => a[0] - b[0]),
    ).toEqual([
      [2, 5],
      [3, 5],
    ]);
  });

  it('an honest log of more than one tile: audited at a tile boundary and past it, clean, and no fork when the proof fails', async () => {
    const t = await setupTenant(live.svc, 'forks-tiles');
    await record(256, 0, t.id);
    await record(2, 256, t.id);
    await record(5, 258, t.id);
    for (const treeSize of [256, 258]) {
      const o = { apiKey: t.keys.audit, treeSize };
      const clean = await audit(o);
      expect(clean.findings, String(treeSize)).toEqual([]);
      expect(clean, String(treeSize)).toMatchObject({ ok: true, entriesChecked: treeSize, pendingServiceReceipts: 263 - treeSize });
      // The latest's tiles judge the pair: a failing proof, never asked, leaves the audit clean (L1).
      const failing = await audit({ ...o, fetch: through((path) => (path === '/v1/log/consistency' ? unavailable() : undefined)) });
      expect(failing, String(treeSize)).toMatchObject({ ok: true, findings: [] });
      // With the latest's last tile failing too, the failed proof is what is left: thrown, never a fork.
      const e = await outcome({
        ...o,
        fetch: through((path) => (path === '/v1/log/consistency' || path === '/v1/log/tile/0/001.p/7' ? unavailable() : undefined)),
      });
      expect(e, String(treeSize)).toMatchObject({ status: 503, code: 'STORAGE_UNAVAILABLE' });
    }
  });

  it('an honest log behind a flaky proxy is never a split view', async () => {
    const garbled = (n: number) => answer(200, tileBytes(randomLeaves(n)), 'application/octet-stream');
    const flaky: [string, (path: string) => Promise<Response> | undefined][] = [
      ['proof 503', (p) => (p === '/v1/log/consistency' ? unavailable() : undefined)],
      ...notBaton.map(([what, page]): [string, (path: string) => Promise<Response> | undefined] => [
        `proof: ${what}`,
        (p) => (p === '/v1/log/consistency' ? page() : undefined),
      ]),
      [
        'audited tile garbled, proof 503',
        (p) => (p === '/v1/log/tile/0/000.p/3' ? garbled(3) : p === '/v1/log/consistency' ? unavailable() : undefined),
      ],
      [
        'latest tile garbled, proof 503',
        (p) => (p === '/v1/log/tile/0/000.p/5' ? garbled(5) : p === '/v1/log/consistency' ? unavailable() : undefined),
      ],
      [
        'both tiles garbled, proof a proxy 404',
        (p) =>
          p === '/v1/log/tile/0/000.p/3'
            ? garbled(3)
            : p === '/v1/log/tile/0/000.p/5'
              ? garbled(5)
              : p === '/v1/log/consistency'
                ? notBaton[0]![1]()
                : undefined,
      ],
      ['latest tile 503', (p) => (p === '/v1/log/tile/0/000.p/5' ? unavailable() : undefined)],
    ];
    for (const [what, own] of flaky)
      for (const previousCheckpoint of [undefined, note3, note5]) {
        const r = await outcome({ treeSize: 3, ...(previousCheckpoint ? { previousCheckpoint } : {}), fetch: through(own) });
        const label = `${what}, previous ${previousCheckpoint?.split('\n')[1] ?? 'none'}`;
        if (r instanceof BatonApiError) continue;
        expect(kinds(r), label).not.toContain('split-view');
      }
  });
});
