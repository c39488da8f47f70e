/**
 * auditLog's split views are only ever proven ones. A consistency proof refused by something in front
 * of the log (a proxy's or gateway's 404, 400 or 422 page) is a failed read, as a 503 is; only Baton's
 * own refusal, in its error envelope, is the log refusing to join two checkpoints it signed. And with
 * --tree-size, the audited checkpoint is compared with the latest's own leaves: a log that signed an
 * audited checkpoint its latest tree does not hold is a split view (two notes as evidence), found from
 * the tiles when the proof cannot be read, each pair of checkpoints on its own. An honest log behind a
 * flaky proxy is never one.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rootOf, type Hash } from '../../src/protocol/merkle.js';
import { auditLog, type AuditFinding, type AuditOptions, type AuditReport } from '../../src/sdk/audit.js';
import { BatonApiError } from '../../src/sdk/client.js';
import { integrateOnce } from '../../src/service/log-integrator.js';
import { signCheckpoint } from '../../src/service/log-tree.js';
import { silentLogger } from '../../src/service/log.js';
import { recordServiceReceipt } from '../../src/service/service-receipts.js';
import { setupTenant } from '../support/service.js';
import { startLiveService, type LiveService } from './live-service.js';

let live: LiveService;
/** The log's genuinely signed checkpoints of 3 and of 5 leaves, and its origin. */
let note3: string;
let note5: string;
let origin: string;

async function record(n: number, from: number, tenantId = live.tenant.id): Promise<void> {
  for (let i = 0; i < n; i++)
    await recordServiceReceipt(live.svc.store.db, live.svc.deps.signer, {
      tenantId,
      kind: 'invocation.denied',
      subject: `inv:${from + i}`,
      data: { i: from + i },
      now: live.svc.clock.now,
    });
  await integrateOnce({ store: live.svc.store, signer: live.svc.deps.signer, log: silentLogger, logName: live.svc.deps.config.tlogName });
}

const read = async (path: string) =>
  (await fetch(`${live.baseUrl}${path}`, { headers: { authorization: `Bearer ${live.tenant.keys.audit}` } })).text();

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

describe('auditLog: only the log itself refusing a consistency proof is a split view', () => {
  it("a proxy's 404, 400 or 422 on the proof between two genuine notes is a failed read, never a split view", async () => {
    for (const [what, page] of notBaton) {
      const e = await outcome({
        previousCheckpoint: note3,
        fetch: through((path) => (path === '/v1/log/consistency' ? page() : undefined)),
      });
      // Nothing found and a read failed: thrown, as a 503 is.
      expect(e, what).toBeInstanceOf(BatonApiError);
      expect((e as BatonApiError).url, what).toMatch(/\/v1\/log\/consistency\?from=3&to=5$/);
      expect((e as BatonApiError).message, what).not.toMatch(/would not prove/);
    }
  });

  it('with something else found, that failed read is listed as incomplete, and the finding is not a split view', async () => {
    for (const [what, page] of notBaton) {
      const report = await audit({
        previousCheckpoint: note3,
        fetch: through((path) =>
          path === '/v1/log/consistency'
            ? page()
            : path === '/v1/log/tile/0/000.p/5'
              ? answer(404, envelope('NOT_FOUND', 'The log does not reach this tile yet.'))
              : undefined,
        ),
      });
      expect(kinds(report), what).toEqual(['malformed']);
      expect(report.ok, what).toBe(false);
      expect(report.incomplete, what).toEqual([
        expect.objectContaining({
          source: 'GET /v1/log/consistency?from=3&to=5',
          notChecked: expect.stringMatching(/extends the earlier one given/) as unknown,
        }),
      ]);
    }
  });

  it("Baton's own refusal (its 404 NOT_FOUND: fewer leaves than a note it signed) is a split view when the tiles cannot judge the pair", async () => {
    // The log signed a note of 7 leaves it does not have: the live service's real answers (the
    // proof's 404 saying tree_size 5, the tile of 7's 404) are all there is to judge it by.
    const forged7 = signCheckpoint(live.svc.deps.signer, origin, 7, new Uint8Array(randomBytes(32)));
    const report = await audit({
      previousCheckpoint: note3,
      fetch: through((path) => (path === '/v1/log/checkpoint' ? answer(200, forged7, 'text/plain') : undefined)),
    });
    expect(splitViews(report).map(pairOf)).toEqual([[3, 7]]);
    expect(splitViews(report)[0]!.detail).toMatch(
      /would not prove its checkpoints of sizes 3 and 7 consistent \(HTTP 404 NOT_FOUND: The log has 5 leaves/,
    );
    expect(report.ok).toBe(false);
  });

  it('a 400 INVALID_REQUEST, or a 404 that does not say a size below the one asked, is a failed read: the audit asks well-formed sizes', async () => {
    // R1: a proxy dropping the query string (nginx proxy_pass $uri), or adding a parameter; the
    // live service's 404 for a query rewritten past its size (it has the 5 leaves asked for).
    const rewrites: [string, (u: URL) => string][] = [
      ['query dropped', (u) => `${u.origin}${u.pathname}`],
      ['parameter added', (u) => `${u.href}&utm_source=gw`],
      ['sizes swapped', (u) => `${u.origin}${u.pathname}?from=5&to=3`],
      ['asked past its size', (u) => `${u.origin}${u.pathname}?from=3&to=99`],
    ];
    for (const [what, rewrite] of rewrites)
      for (const o of [{ previousCheckpoint: note3 }, { treeSize: 3 }, { treeSize: 3, previousCheckpoint: note3 }]) {
        const label = `${what}, ${JSON.stringify(Object.keys(o))}`;
        const r = await outcome({
          ...o,
          fetch: (url, init) => {
            const u = new URL(url);
            return fetch(u.pathname === '/v1/log/consistency' ? rewrite(u) : url, init);
          },
        });
        // Nothing found, a read failed: thrown, as a 503 is.
        expect(r, label).toBeInstanceOf(BatonApiError);
        expect((r as BatonApiError).url, label).toMatch(/\/v1\/log\/consistency\?from=3&to=5$/);
      }
  });
});

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

  it('R2: a proof answer a proxy forged is no split view when the tiles rebuild the newer root and hold the older: a malformed proof', async () => {
    for (const [what, proofAnswer] of forgedProofs)
      for (const o of [{ treeSize: 3 }, { previousCheckpoint: note3 }, { treeSize: 3, previousCheckpoint: note3 }]) {
        const label = `${what}, ${JSON.stringify(Object.keys(o))}`;
        const report = await audit({
          ...o,
          fetch: (url, init) => (new URL(url).pathname === '/v1/log/consistency' ? proofAnswer(url, init) : fetch(url, init)),
        });
        expect(kinds(report), label).not.toContain('split-view');
        expect(kinds(report), label).toContain('malformed');
        const malformed = report.findings.find((f) => f.kind === 'malformed')!;
        expect('source' in malformed && malformed.source, label).toBe('GET /v1/log/consistency?from=3&to=5');
        expect(malformed.detail, label).toMatch(
          /tiles rebuild the root of 5 leaves and hold the one of 3 as their prefix: not a split view/,
        );
      }
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
      expect(
        report.incomplete?.map((i) => i.source),
        stopping,
      ).toEqual(['GET /v1/log/consistency?from=3&to=5', `GET ${stopping}`]);
      // The entries and the listing need the replay: not judged.
      expect(kinds(report), stopping).toEqual(['split-view']);
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
    expect(report.incomplete).toEqual([expect.objectContaining({ source: 'GET /v1/log/consistency?from=3&to=5', status: 503 })]);
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
      const e = await outcome({ ...o, fetch: through((path) => (path === '/v1/log/consistency' ? unavailable() : undefined)) });
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
