/**
 * Hostile input against every route, on real PostgreSQL:
 *
 * 1. The checked-in corpus (test/security/corpus/*.json, built by build.ts):
 *    every case must be refused with a 4xx in the one error envelope (or, on
 *    verify, the deny body), within the time limit, reading no more of a body
 *    than the limit, storing nothing and polluting no prototype.
 * 2. A seeded fuzzer (fast-check) that mutates valid requests: bytes,
 *    truncation, members deleted, duplicated or given hostile values, JWS
 *    parts broken, path parameters and queries garbled. A 2xx is accepted only
 *    when the oracle of that route can show the mutated request is equivalent
 *    to the stored original (or, on routes that create, is a valid request in
 *    its own right); everything else must be a 4xx that stores nothing.
 *
 * "Stores nothing" compares a digest of every row of every table before and
 * after each request. The one exception is by design: a verify deny records a
 * denial row and an 'invocation.denied' receipt for auditors.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVICE_ERROR_CODES } from '../../src/protocol/errors.js';
import { buildCorpus, corpusText } from './corpus/build.js';
import { CORPUS_DIR, caseRequest, loadCorpus, type CorpusCase } from './support/corpus.js';
import {
  Hang,
  appRoutes,
  buildWorld,
  closeSocketServer,
  describeReq,
  describeRes,
  envelopeProblems,
  prototypeProblems,
  send,
  snapshot,
  storageChanges,
  type Req,
  type Res,
  type Snapshot,
  type World,
} from './support/harness.js';
import { FUZZ_TARGETS, fuzzRequest, mutationArb, type FuzzTarget, type Verdict } from './support/fuzz.js';

const VERIFY_ROUTES = new Set(['POST /v1/verify', 'POST /v1/verify/dry-run', 'POST /verify']);

let world: World;
let baseline: Snapshot;

beforeAll(async () => {
  world = await buildWorld();
  baseline = await snapshot(world.svc);
}, 120_000);

afterAll(async () => {
  await closeSocketServer();
  await world?.svc.close();
});

interface Judged {
  readonly res: Res;
  readonly problems: string[];
}

/** Sends one request and applies the parts of the oracle every hostile request shares. */
async function judge(req: Req, opts: { verifyRoute: boolean; allow2xx?: (res: Res) => Verdict }): Promise<Judged> {
  let res: Res;
  try {
    res = await send(world.svc, req);
  } catch (e) {
    if (e instanceof Hang)
      return { res: { status: 0, headers: new Headers(), text: '', json: undefined, ms: Infinity }, problems: [e.message] };
    throw e;
  }
  const after = await snapshot(world.svc);
  const problems: string[] = [];
  const verdict: Verdict = res.status >= 200 && res.status < 300 && opts.allow2xx ? opts.allow2xx(res) : { ok: false };
  if (res.status >= 500) problems.push(`status ${res.status}: hostile input must never be a server error`);
  else if (res.status >= 200 && res.status < 300) {
    if (!verdict.ok) problems.push(`status ${res.status}: hostile input was accepted`);
  } else if (res.status < 400) problems.push(`status ${res.status} is not a refusal`);
  if (res.status >= 400) problems.push(...envelopeProblems(req, res, opts).map((p) => `envelope: ${p}`));
  const mayStore = verdict.ok && verdict.mayStore === true;
  if (!mayStore) problems.push(...storageChanges(baseline, after, { allowDenials: opts.verifyRoute }).map((p) => `stored: ${p}`));
  problems.push(...prototypeProblems());
  baseline = after;
  return { res, problems };
}

function report(req: Req, j: Judged): string {
  return `${j.problems.join('\n')}\n--- request\n${describeReq(req)}\n--- response\n${describeRes(j.res)}`;
}

// ---------------------------------------------------------------- corpus

const corpus = loadCorpus();

describe('hostile corpus', () => {
  it('is exactly what corpus/build.ts generates (reproducible from the fixed keys)', () => {
    const built = buildCorpus();
    expect([...built.keys()].sort()).toEqual([...corpus.keys()].sort());
    for (const [name, f] of built) {
      expect(
        readFileSync(join(CORPUS_DIR, name), 'utf8') === corpusText(f),
        `${name} differs from build.ts output: run npx tsx test/security/corpus/build.ts`,
      ).toBe(true);
    }
  });

  it('has unique case names and aims at routes that exist, every route at least once', () => {
    const routes = new Set(appRoutes(world));
    const names = new Set<string>();
    const aimed = new Set<string>();
    for (const f of corpus.values()) {
      for (const c of f.cases) {
        expect(names.has(c.name), `duplicate case ${c.name}`).toBe(false);
        names.add(c.name);
        expect(c.expect_status_class).toBe('4xx');
        if (c.route !== null) {
          expect(routes.has(c.route), `${c.name} aims at ${c.route}, which is not a route`).toBe(true);
          aimed.add(c.route);
        }
        for (const code of c.expect_code ?? []) expect(SERVICE_ERROR_CODES, `${c.name}: ${code}`).toContain(code);
      }
    }
    expect(
      [...routes].filter((r) => !aimed.has(r)),
      'routes without corpus cases',
    ).toEqual([]);
  });

  for (const [file, f] of corpus) {
    describe(file, () => {
      for (const c of f.cases) it(c.name, () => runCase(c));
    });
  }
});

async function runCase(c: CorpusCase): Promise<void> {
  const req = caseRequest(c, world);
  const verifyRoute = c.route !== null && VERIFY_ROUTES.has(c.route) && c.method === 'POST';
  const j = await judge(req, { verifyRoute });
  const { res, problems } = j;
  if (res.status !== 0) {
    if (c.expect_status && !c.expect_status.includes(res.status))
      problems.push(`status ${res.status}, expected one of ${c.expect_status.join(', ')}`);
    const code = (res.json as { error?: { code?: string } } | undefined)?.error?.code;
    if (c.expect_code && res.status >= 400 && !c.expect_code.includes(String(code)))
      problems.push(`code ${String(code)}, expected one of ${c.expect_code.join(', ')}`);
    if (c.expect_max_bytes_read !== undefined && (res.bytesPulled ?? 0) > c.expect_max_bytes_read) {
      problems.push(`read ${res.bytesPulled} bytes of a streamed body before answering; at most ${c.expect_max_bytes_read} allowed`);
    }
  }
  if (problems.length > 0) throw new Error(`${c.name}${c.note ? ` (${c.note})` : ''}\n${report(req, j)}`);
}

// ---------------------------------------------------------------- fuzzer

describe('seeded fuzzer', () => {
  for (const target of FUZZ_TARGETS) {
    it(`${target.name}: ${target.runs} mutations, seed ${target.seed}`, () => fuzz(target), 120_000);
  }
});

async function fuzz(target: FuzzTarget): Promise<void> {
  const base = target.base(world);
  const baseRes = await send(world.svc, base);
  // The unmutated request is the reference: it must answer as the target says.
  expect(target.baseStatus, `${target.name} base: ${describeRes(baseRes)}`).toContain(baseRes.status);
  baseline = await snapshot(world.svc);
  const stats = { runs: 0, refused: 0, equivalent: 0, variant: 0 };
  await fc.assert(
    fc.asyncProperty(mutationArb(target), async (m) => {
      const req = fuzzRequest(target, base, m);
      if (req === null) return; // the mutation could not apply (e.g. no JWS in this body)
      stats.runs++;
      let verdictKind: Verdict['kind'] | undefined;
      const j = await judge(req, {
        verifyRoute: target.verifyRoute,
        allow2xx: (res) => {
          const v = target.judge2xx(req, res, world, baseRes);
          verdictKind = v.kind;
          return v;
        },
      });
      if (j.res.status >= 400 && j.res.status < 500) stats.refused++;
      else if (verdictKind === 'equivalent') stats.equivalent++;
      else if (verdictKind === 'variant') stats.variant++;
      if (j.problems.length > 0)
        throw new Error(`${target.name} (seed ${target.seed})\nmutation: ${JSON.stringify(m).slice(0, 500)}\n${report(req, j)}`);
    }),
    { seed: target.seed, numRuns: target.runs, endOnFailure: true },
  );
  // A fuzzer that never reaches the service's checks proves nothing: most runs must be applicable.
  expect(stats.runs, `${target.name}: ${JSON.stringify(stats)}`).toBeGreaterThan(target.runs * 0.8);
  console.log(`[fuzz] ${target.name} seed=${target.seed} ${JSON.stringify(stats)}`);
}
