/**
 * The seeded fuzzer: targets (one valid request per route), mutation plans
 * (fast-check arbitraries, so every run is reproducible from its seed), and
 * per-route judges that decide when a 2xx is acceptable.
 *
 * Judging a 2xx. A mutation can leave a request valid, so "never 2xx" would be
 * wrong on some routes; "any 2xx" would hide bugs. Each target says exactly:
 * - never: verify (the base invocation is already consumed, and no mutation
 *   can forge a new one), signed revocations, DELETEs of missing rows;
 * - equivalent: the mutated request means the same as the stored original,
 *   shown independently of the service (its JWS are ones already stored, its
 *   decoded path parameter is the original, its actual normalises to the
 *   recorded one, the reason is a valid reason for an already revoked DR) and
 *   the service answers "already done" (created false, already_revoked,
 *   200 not 201) while storing nothing;
 * - variant (create routes only: issue, admin tenants/roots/keys, receipts
 *   paging): the mutated body is a valid request of the route's published
 *   schema, so creating something is correct; storage is re-baselined.
 */
import fc from 'fast-check';
import { AddRootRequest, CreateApiKeyRequest, CreateTenantRequest } from '../../../src/api/admin.js';
import { IssueRequest } from '../../../src/api/delegations.js';
import { publicKeyFromDidKey } from '../../../src/protocol/did-key.js';
import {
  ACTUAL_BASE,
  CHAIN_A,
  ISSUE_BASE,
  KEYS,
  WEAK_POINTS,
  b64u,
  bundle,
  didKeyOf,
  drA0,
  drA1,
  drB0,
  drLive,
  drRevoked,
  invB,
  invConsumed,
  invMetered,
  jcs,
  revRevoked,
  signBytes,
  unb64u,
} from './fixtures.js';
import type { Req, Res, World } from './harness.js';
import {
  addMember,
  allPaths,
  deepEqual,
  deleteAt,
  getAt,
  jwsPaths,
  memberPaths,
  objectPaths,
  parseStrict,
  raw,
  serialize,
  toPlain,
  updateAt,
  type JNode,
} from './json.js';
import { ENCODING_ATTACKS, splitJws } from './jws-attacks.js';

export type Verdict =
  | { readonly ok: false; readonly kind?: undefined }
  | { readonly ok: true; readonly kind: 'equivalent' | 'variant'; readonly mayStore?: boolean };
const NO: Verdict = { ok: false };
const EQUIVALENT: Verdict = { ok: true, kind: 'equivalent' };
const VARIANT: Verdict = { ok: true, kind: 'variant', mayStore: true };

// ---------------------------------------------------------------- mutation plans

export type ByteOp =
  | { readonly op: 'flip'; readonly at: number; readonly bit: number }
  | { readonly op: 'set'; readonly at: number; readonly byte: number }
  | { readonly op: 'insert'; readonly at: number; readonly bytes: readonly number[] }
  | { readonly op: 'delete'; readonly at: number; readonly len: number }
  | { readonly op: 'truncate'; readonly at: number }
  | { readonly op: 'duplicate'; readonly at: number; readonly len: number };

/** A hostile JSON value, as raw text so it can be anything at all. */
export type Hostile = string;

export type TreeOp =
  | { readonly op: 'delete'; readonly at: number }
  | { readonly op: 'duplicate-key'; readonly at: number; readonly value: Hostile | null }
  | { readonly op: 'swap'; readonly at: number; readonly value: Hostile }
  | { readonly op: 'add'; readonly at: number; readonly key: string; readonly value: Hostile }
  | { readonly op: 'wrap'; readonly at: number; readonly depth: number };

export type JwsOp =
  | { readonly op: 'attack'; readonly name: string }
  | { readonly op: 'char'; readonly at: number; readonly char: string }
  | { readonly op: 'payload-swap'; readonly tree: TreeOp }
  | { readonly op: 'payload-bytes'; readonly bytes: readonly ByteOp[] }
  | { readonly op: 'resign-stranger' }
  | { readonly op: 'replace'; readonly with: number };

export type QueryOp =
  | { readonly op: 'add'; readonly name: string; readonly value: string }
  | { readonly op: 'duplicate'; readonly at: number }
  | { readonly op: 'delete'; readonly at: number }
  | { readonly op: 'set'; readonly at: number; readonly value: string };

export type ParamOp =
  | { readonly op: 'keep' }
  | { readonly op: 'bytes'; readonly bytes: readonly ByteOp[] }
  | { readonly op: 'replace'; readonly text: string }
  | { readonly op: 'percent-encode'; readonly at: number }
  | { readonly op: 'suffix'; readonly text: string };

export type Mutation =
  | { readonly kind: 'bytes'; readonly bytes: readonly ByteOp[] }
  | { readonly kind: 'tree'; readonly tree: readonly TreeOp[]; readonly bytes: readonly ByteOp[] }
  | { readonly kind: 'jws'; readonly at: number; readonly jws: JwsOp; readonly tree: readonly TreeOp[] }
  /** X-DRS-Bundle: mutate the bundle JSON (as body mutations do) or the encoded header text. */
  | {
      readonly kind: 'header';
      readonly inner: Exclude<Mutation, { kind: 'header' | 'path' }> | { readonly kind: 'encoded'; readonly bytes: readonly ByteOp[] };
    }
  | { readonly kind: 'path'; readonly param: number; readonly op: ParamOp; readonly query: readonly QueryOp[] };

const at = fc.nat({ max: 1 << 20 });

const byteOp: fc.Arbitrary<ByteOp> = fc.oneof(
  fc.record({ op: fc.constant('flip' as const), at, bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({
    op: fc.constant('set' as const),
    at,
    byte: fc.oneof(
      fc.integer({ min: 0, max: 255 }),
      fc.constantFrom(0x00, 0x22, 0x5c, 0x7b, 0x7d, 0x5b, 0x5d, 0x2c, 0x3a, 0x80, 0xc0, 0xed, 0xff),
    ),
  }),
  fc.record({ op: fc.constant('insert' as const), at, bytes: fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 1, maxLength: 8 }) }),
  fc.record({ op: fc.constant('delete' as const), at, len: fc.integer({ min: 1, max: 16 }) }),
  fc.record({ op: fc.constant('truncate' as const), at }),
  fc.record({ op: fc.constant('duplicate' as const), at, len: fc.integer({ min: 1, max: 64 }) }),
);

const weakDid = didKeyOf(WEAK_POINTS.identity);
const KNOWN_JWS = [drA0, drA1, drB0, drRevoked, drLive, invConsumed, invMetered, invB, revRevoked].map((r) => r.jws);

const hostileValue: fc.Arbitrary<Hostile> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.constantFrom(
      'null',
      'true',
      'false',
      '0',
      '-1',
      '-0',
      '1.0',
      '0.1e1',
      '1e400',
      '-1e400',
      '9007199254740993',
      '-9007199254740993',
      '1e-400',
      '123456789012345678901234567890',
      '""',
      '" "',
      '"\\u0000"',
      '"a\\u0000b"',
      '"\\u001b[2J"',
      '"\\ud800"',
      '"\\u202e"',
      '"__proto__"',
      '"constructor"',
      '"*"',
      '"web_*"',
      '"../../admin"',
      '[]',
      '{}',
      '[null]',
      '[[]]',
      '{"__proto__":{"polluted":"yes"}}',
      '{"constructor":{"prototype":{"polluted":"yes"}}}',
      '["*"]',
      '["admin"]',
      JSON.stringify(weakDid),
      JSON.stringify(KEYS.stranger.did),
      JSON.stringify(`sha256:${'0'.repeat(64)}`),
      '"inv:x"',
      '"dr:x"',
      '"4.0"',
      '4.0',
    ),
  },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 80_000 }).map((n) => JSON.stringify('A'.repeat(n))) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 120 }).map((d) => `${'['.repeat(d)}0${']'.repeat(d)}`) },
  { weight: 1, arbitrary: fc.constantFrom(...KNOWN_JWS).map((j) => JSON.stringify(j)) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 24 }).map((s) => JSON.stringify(s)) },
  { weight: 1, arbitrary: fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true })).map((n) => JSON.stringify(n)) },
);

const memberKey = fc.oneof(
  fc.constantFrom(
    '__proto__',
    'constructor',
    'prototype',
    'x',
    '',
    'receipts',
    'receipt',
    'invocation',
    'bundle_version',
    'dry_run',
    'body',
    'confirm',
    'reason',
    'revocation',
    'source',
    'cost_usd',
    'name',
    'did',
    'scopes',
    'tenant_id',
    'admin',
  ),
  fc.string({ unit: 'binary', maxLength: 12 }),
);

const treeOp: fc.Arbitrary<TreeOp> = fc.oneof(
  fc.record({ op: fc.constant('delete' as const), at }),
  fc.record({ op: fc.constant('duplicate-key' as const), at, value: fc.option(hostileValue, { nil: null }) }),
  { weight: 3, arbitrary: fc.record({ op: fc.constant('swap' as const), at, value: hostileValue }) },
  fc.record({ op: fc.constant('add' as const), at, key: memberKey, value: hostileValue }),
  fc.record({ op: fc.constant('wrap' as const), at, depth: fc.integer({ min: 1, max: 80 }) }),
);

const jwsOp: fc.Arbitrary<JwsOp> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...Object.keys(ENCODING_ATTACKS)).map((name) => ({ op: 'attack' as const, name })) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('char' as const),
      at,
      char: fc.oneof(
        fc.constantFrom('A', '-', '_', '+', '/', '=', '.', ' ', '\n', '%', '\u00e9'),
        fc.string({ unit: 'binary-ascii', minLength: 1, maxLength: 1 }),
      ),
    }),
  },
  { weight: 2, arbitrary: treeOp.map((tree) => ({ op: 'payload-swap' as const, tree })) },
  fc.array(byteOp, { minLength: 1, maxLength: 3 }).map((bytes) => ({ op: 'payload-bytes' as const, bytes })),
  fc.constant({ op: 'resign-stranger' as const }),
  fc.nat({ max: KNOWN_JWS.length - 1 }).map((w) => ({ op: 'replace' as const, with: w })),
);

const bodyMutation: fc.Arbitrary<Exclude<Mutation, { kind: 'header' | 'path' }>> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('bytes' as const), bytes: fc.array(byteOp, { minLength: 1, maxLength: 4 }) }) },
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('tree' as const),
      tree: fc.array(treeOp, { minLength: 1, maxLength: 3 }),
      bytes: fc.array(byteOp, { maxLength: 1 }),
    }),
  },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('jws' as const), at, jws: jwsOp, tree: fc.array(treeOp, { maxLength: 1 }) }) },
);

const pathText = fc.constantFrom(
  '',
  '%00',
  'x%00',
  '%',
  '%zz',
  '%C0%AF',
  '%FF',
  '%E2%80%AE',
  '..',
  '..%2F..%2Fv1%2Fadmin',
  '.',
  '%2e%2e',
  '*',
  "'--",
  '%27%20OR%201%3D1',
  'sha256:',
  `sha256:${'0'.repeat(64)}`,
  `sha256:${'A'.repeat(64)}`,
  'inv:',
  'ten_',
  'key_',
  '__proto__',
  'constructor',
  KEYS.stranger.did,
  weakDid,
  drB0.hash,
  'inv:sec-b',
  'a'.repeat(5000),
);

const queryName = fc.constantFrom(
  'limit',
  'after',
  'cursor',
  'x',
  '__proto__',
  'constructor',
  'tenant',
  'tenant_id',
  'limit%00',
  'li%6Dit',
  'LIMIT',
  '',
);
const queryValue = fc.oneof(
  fc.constantFrom(
    '',
    '0',
    '1',
    '01',
    '-1',
    '1e3',
    '1.5',
    '200',
    '201',
    '500',
    '501',
    '9999999999999999',
    '9007199254740993',
    '%00',
    '%zz',
    'abc',
    '+1',
    '%2B1',
    '0x10',
    ' 1',
    '1%20',
    '%E2%80%AE',
    'A'.repeat(600),
    '__proto__',
  ),
  fc.integer({ min: -5, max: 1000 }).map(String),
  fc.string({ unit: 'binary-ascii', maxLength: 12 }).map(encodeURIComponent),
);
const queryOp: fc.Arbitrary<QueryOp> = fc.oneof(
  fc.record({ op: fc.constant('add' as const), name: queryName, value: queryValue }),
  fc.record({ op: fc.constant('duplicate' as const), at }),
  fc.record({ op: fc.constant('delete' as const), at }),
  { weight: 2, arbitrary: fc.record({ op: fc.constant('set' as const), at, value: queryValue }) },
);
const paramOp: fc.Arbitrary<ParamOp> = fc.oneof(
  { weight: 1, arbitrary: fc.constant({ op: 'keep' as const }) },
  { weight: 4, arbitrary: fc.array(byteOp, { minLength: 1, maxLength: 3 }).map((bytes) => ({ op: 'bytes' as const, bytes })) },
  { weight: 2, arbitrary: pathText.map((text) => ({ op: 'replace' as const, text })) },
  { weight: 1, arbitrary: at.map((a) => ({ op: 'percent-encode' as const, at: a })) },
  {
    weight: 1,
    arbitrary: fc.constantFrom('%00', '/', '/x', '%2F', '.', '..', '%20', ';x', '~').map((text) => ({ op: 'suffix' as const, text })),
  },
);

export function mutationArb(t: FuzzTarget): fc.Arbitrary<Mutation> {
  const body = t.jws ? bodyMutation : bodyMutation.filter((m) => m.kind !== 'jws');
  if (t.mode === 'path') {
    // A route without path parameters (service receipts) is fuzzed through its query alone.
    const query = fc.array(queryOp, t.queryOnly ? { minLength: 1, maxLength: 4 } : { maxLength: 2 });
    return fc
      .record({ kind: fc.constant('path' as const), param: fc.nat({ max: 7 }), op: paramOp, query })
      .filter((m) => m.op.op !== 'keep' || m.query.length > 0);
  }
  if (t.mode === 'header') {
    return fc.oneof(
      { weight: 3, arbitrary: body.map((inner) => ({ kind: 'header' as const, inner })) },
      {
        weight: 1,
        arbitrary: fc
          .array(byteOp, { minLength: 1, maxLength: 3 })
          .map((bytes) => ({ kind: 'header' as const, inner: { kind: 'encoded' as const, bytes } })),
      },
    );
  }
  return body;
}

// ---------------------------------------------------------------- applying plans

export function applyBytes(input: Uint8Array, ops: readonly ByteOp[]): Buffer {
  let b = Buffer.from(input);
  for (const o of ops) {
    const i = b.length === 0 ? 0 : o.at % (b.length + (o.op === 'insert' || o.op === 'truncate' ? 1 : 0));
    switch (o.op) {
      case 'flip':
        if (b.length > 0) b[i] = b[i]! ^ (1 << o.bit);
        break;
      case 'set':
        if (b.length > 0) b[i] = o.byte;
        break;
      case 'insert':
        b = Buffer.concat([b.subarray(0, i), Buffer.from(o.bytes), b.subarray(i)]);
        break;
      case 'delete':
        b = Buffer.concat([b.subarray(0, i), b.subarray(i + o.len)]);
        break;
      case 'truncate':
        b = b.subarray(0, i);
        break;
      case 'duplicate':
        b = Buffer.concat([b.subarray(0, i + o.len), b.subarray(i, i + o.len), b.subarray(i + o.len)]);
        break;
    }
  }
  return b;
}

const pick = <T>(xs: readonly T[], n: number): T | undefined => (xs.length === 0 ? undefined : xs[n % xs.length]);

export function applyTree(tree: JNode, op: TreeOp): JNode {
  switch (op.op) {
    case 'delete': {
      const p = pick(memberPaths(tree).concat(allPaths(tree).filter((x) => x.length > 0)), op.at);
      return p ? deleteAt(tree, p) : tree;
    }
    case 'duplicate-key': {
      const p = pick(memberPaths(tree), op.at);
      if (!p) return tree;
      const parent = getAt(tree, p.slice(0, -1));
      const entry = parent?.t === 'obj' ? parent.entries[p[p.length - 1] as number] : undefined;
      if (!entry) return tree;
      return addMember(tree, p.slice(0, -1), { key: entry.key, value: op.value === null ? entry.value : raw(op.value) });
    }
    case 'swap': {
      const p = pick(allPaths(tree), op.at);
      return p ? updateAt(tree, p, () => raw(op.value)) : tree;
    }
    case 'add': {
      const p = pick(objectPaths(tree), op.at);
      return p ? addMember(tree, p, { key: op.key, value: raw(op.value) }, op.at % 2 === 0) : tree;
    }
    case 'wrap': {
      const p = pick(allPaths(tree), op.at);
      return p ? updateAt(tree, p, (n) => raw(`${'['.repeat(op.depth)}${serialize(n)}${']'.repeat(op.depth)}`)) : tree;
    }
  }
}

function applyJws(jws: string, op: JwsOp): string {
  switch (op.op) {
    case 'attack':
      return ENCODING_ATTACKS[op.name]!(jws) ?? `${jws}.`;
    case 'char': {
      const i = op.at % jws.length;
      return jws.slice(0, i) + op.char + jws.slice(i + 1);
    }
    case 'payload-swap':
    case 'payload-bytes': {
      const [h, p, s] = splitJws(jws);
      const bytes = unb64u(p);
      let out: Uint8Array;
      if (op.op === 'payload-bytes') out = applyBytes(bytes, op.bytes);
      else {
        const parsed = parseStrict(bytes);
        out = Buffer.from(parsed.ok ? serialize(applyTree(parsed.node, op.tree)) : '', 'utf8');
      }
      return `${h}.${b64u(out)}.${s}`;
    }
    case 'resign-stranger': {
      // A well-signed record from someone who holds nothing.
      const [h, p] = splitJws(jws);
      let payload: Record<string, unknown>;
      try {
        payload = JSON.parse(unb64u(p).toString('utf8')) as Record<string, unknown>;
      } catch {
        payload = {};
      }
      const np = b64u(jcs({ ...payload, iss: KEYS.stranger.did }));
      return `${h}.${np}.${b64u(signBytes(KEYS.stranger, `${h}.${np}`))}`;
    }
    case 'replace':
      return KNOWN_JWS[op.with]!;
  }
}

function applyBody(body: Uint8Array, m: Exclude<Mutation, { kind: 'header' | 'path' }>): Buffer | null {
  if (m.kind === 'bytes') return applyBytes(body, m.bytes);
  const parsed = parseStrict(body);
  if (!parsed.ok) throw new Error(`fuzz base body is not valid JSON: ${parsed.reason}`);
  let tree = parsed.node;
  if (m.kind === 'jws') {
    const p = pick(jwsPaths(tree), m.at);
    if (!p) return null;
    const node = getAt(tree, p);
    if (node?.t !== 'str') return null;
    tree = updateAt(tree, p, () => ({ t: 'str', v: applyJws(node.v, m.jws) }));
  }
  for (const op of m.tree) tree = applyTree(tree, op);
  const text = Buffer.from(serialize(tree), 'utf8');
  return m.kind === 'tree' ? applyBytes(text, m.bytes) : text;
}

/** Header values cannot carry CR, LF or NUL, nor code points above U+00FF: those become '?'. */
const headerSafe = (s: string) => s.replace(/[\r\n\0]|[^\u0000-\u00ff]/g, '?');

const UNRESERVED = /^[A-Za-z0-9\-._~!$&'()*+,;=:@]$/;
function encodeSegment(bytes: Uint8Array): string {
  let out = '';
  for (const b of bytes) {
    const c = String.fromCharCode(b);
    out += b < 0x80 && UNRESERVED.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

function applyParam(value: string, op: ParamOp): string {
  switch (op.op) {
    case 'keep':
      return value;
    case 'bytes':
      return encodeSegment(applyBytes(Buffer.from(value, 'utf8'), op.bytes));
    case 'replace':
      return op.text;
    case 'percent-encode': {
      // An equivalent spelling: one character written as %XX.
      const i = op.at % value.length;
      return `${value.slice(0, i)}%${value.charCodeAt(i).toString(16).toUpperCase().padStart(2, '0')}${value.slice(i + 1)}`;
    }
    case 'suffix':
      return value + op.text;
  }
}

export function applyQuery(pairs: readonly (readonly [string, string])[], ops: readonly QueryOp[]): [string, string][] {
  let q = pairs.map(([n, v]) => [n, v] as [string, string]);
  for (const o of ops) {
    if (o.op === 'add') q.push([o.name, o.value]);
    else if (q.length === 0) continue;
    else if (o.op === 'duplicate') q.push([...q[o.at % q.length]!]);
    else if (o.op === 'delete') q = q.filter((_, i) => i !== o.at % q.length);
    else q[o.at % q.length] = [q[o.at % q.length]![0], o.value];
  }
  return q;
}

// ---------------------------------------------------------------- targets

interface PathShape {
  readonly method: string;
  /** Path segments; {0}, {1} … are the parameters. */
  readonly template: string;
  readonly params: (w: World) => string[];
  readonly query?: readonly (readonly [string, string])[];
  readonly body?: unknown;
  readonly key: (w: World) => string;
}

export interface FuzzTarget {
  readonly name: string;
  readonly seed: number;
  readonly runs: number;
  readonly mode: 'body' | 'header' | 'path';
  /** The base body carries JWS, so JWS mutations apply. */
  readonly jws?: boolean;
  readonly queryOnly?: boolean;
  readonly verifyRoute: boolean;
  /** What the unmutated request must answer (it is sent once before the run). */
  readonly baseStatus: readonly number[];
  base(w: World): Req;
  readonly shape?: PathShape;
  judge2xx(req: Req, res: Res, w: World, baseRes: Res): Verdict;
}

const jsonHeaders = (key?: string): Record<string, string> => ({
  'content-type': 'application/json',
  ...(key ? { authorization: `Bearer ${key}` } : {}),
});
const bodyReq = (path: string, body: unknown, key?: string): Req => ({
  method: 'POST',
  path,
  headers: jsonHeaders(key),
  body: Buffer.from(JSON.stringify(body)),
});

/** The body as the reference reader sees it, or undefined when it is not acceptable JSON. */
function plainBody(req: Req): Record<string, unknown> | undefined {
  if (req.body === undefined) return undefined;
  const r = parseStrict(typeof req.body === 'string' ? Buffer.from(req.body) : req.body);
  if (!r.ok) return undefined;
  const v = toPlain(r.node);
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

const keysAre = (o: Record<string, unknown>, allowed: readonly string[]) => Object.keys(o).every((k) => allowed.includes(k));
const resJson = (res: Res) => (res.json ?? {}) as Record<string, unknown>;

const STORED_DRS = new Set([drA0.jws, drA1.jws, drLive.jws, drB0.jws]);

function submitJudge(req: Req, res: Res): Verdict {
  const b = plainBody(req);
  if (!b) return NO;
  const list =
    Object.keys(b).length === 1 && Array.isArray(b['receipts'])
      ? (b['receipts'] as unknown[])
      : Object.keys(b).length === 1 && 'receipt' in b
        ? [b['receipt']]
        : null;
  if (!list || list.length === 0 || !list.every((j) => typeof j === 'string' && STORED_DRS.has(j))) return NO;
  return resJson(res)['created'] === false ? EQUIVALENT : NO;
}

const schemaVariant =
  (schema: { safeParse(v: unknown): { success: boolean } }) =>
  (req: Req): Verdict => {
    const b = plainBody(req);
    return b !== undefined && schema.safeParse(b).success ? VARIANT : NO;
  };

/** Ceil to whole micro-dollars from the shortest decimal form, as exact integers. */
export function ceilMicros(n: number): bigint | null {
  if (!Number.isFinite(n) || n < 0) return null;
  const m = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(n));
  if (!m) return null;
  const digits = BigInt(`${m[1]}${m[2] ?? ''}`);
  const shift = Number(m[3] ?? '0') - (m[2] ?? '').length + 6;
  if (shift >= 0) return digits * 10n ** BigInt(shift);
  const d = 10n ** BigInt(-shift);
  return digits / d + (digits % d === 0n ? 0n : 1n);
}

function actualJudge(req: Req, res: Res): Verdict {
  const b = plainBody(req);
  if (!b || res.status !== 200 || !keysAre(b, ['cost_usd', 'tokens_in', 'tokens_out', 'source', 'unavailable_reason'])) return NO;
  const same =
    b['source'] === ACTUAL_BASE.source &&
    typeof b['cost_usd'] === 'number' &&
    ceilMicros(b['cost_usd']) === ceilMicros(ACTUAL_BASE.cost_usd) &&
    b['tokens_in'] === ACTUAL_BASE.tokens_in &&
    b['tokens_out'] === ACTUAL_BASE.tokens_out &&
    (b['unavailable_reason'] === undefined || b['unavailable_reason'] === null);
  return same ? EQUIVALENT : NO;
}

function revokeKeyJudge(req: Req, res: Res): Verdict {
  const b = plainBody(req);
  if (!b || !keysAre(b, ['confirm', 'reason']) || b['confirm'] !== true) return NO;
  const reason = b['reason'];
  const valid = typeof reason === 'string' && reason.trim().length > 0 && reason.length <= 500;
  return valid && resJson(res)['already_revoked'] === true ? EQUIVALENT : NO;
}

function revokeSignedJudge(req: Req, res: Res): Verdict {
  const b = plainBody(req);
  return b && keysAre(b, ['revocation']) && b['revocation'] === revRevoked.jws && resJson(res)['already_revoked'] === true
    ? EQUIVALENT
    : NO;
}

function rootJudge(req: Req): Verdict {
  const b = plainBody(req);
  if (!b || !AddRootRequest.safeParse(b).success) return NO;
  try {
    publicKeyFromDidKey(String(b['did']));
  } catch {
    return NO;
  }
  return b['did'] === KEYS.rootA.did ? EQUIVALENT : VARIANT;
}

// Path targets ---------------------------------------------------------------

function safeDecode(s: string): string | null {
  try {
    return decodeURIComponent(s);
  } catch {
    return null;
  }
}

const QUERY_GRAMMARS: Record<string, (q: URLSearchParams) => boolean> = {
  invocations: (q) => {
    const names = [...q.keys()].filter((n) => n !== '');
    if (new Set(names).size !== names.length || !names.every((n) => n === 'cursor' || n === 'limit')) return false;
    const limit = q.get('limit');
    if (limit !== null && !(/^[1-9][0-9]{0,2}$/.test(limit) && Number(limit) <= 200)) return false;
    const cursor = q.get('cursor');
    return cursor === null || cursorValid(cursor);
  },
  serviceReceipts: (q) => {
    const names = [...q.keys()].filter((n) => n !== '');
    if (new Set(names).size !== names.length || !names.every((n) => n === 'after' || n === 'limit')) return false;
    const dec = /^(0|[1-9][0-9]{0,14})$/;
    const after = q.get('after');
    const limit = q.get('limit');
    return (after === null || dec.test(after)) && (limit === null || (dec.test(limit) && Number(limit) >= 1 && Number(limit) <= 500));
  },
};

function cursorValid(c: string): boolean {
  if (c.length < 1 || c.length > 512 || !/^[A-Za-z0-9_-]*$/.test(c) || c.length % 4 === 1 || b64u(unb64u(c)) !== c) return false;
  try {
    const v = JSON.parse(unb64u(c).toString('utf8')) as unknown;
    return (
      Array.isArray(v) &&
      v.length === 2 &&
      typeof v[0] === 'string' &&
      /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/.test(v[0]) &&
      typeof v[1] === 'string' &&
      /^[\x21-\x7e]{1,160}$/.test(v[1])
    );
  } catch {
    return false;
  }
}

function pathJudge(grammar?: string) {
  return (req: Req, res: Res, w: World, baseRes: Res, t?: FuzzTarget): Verdict => {
    const shape = t!.shape!;
    const url = new URL(req.path, 'http://x');
    const want = shape.params(w);
    const tplSegs = shape.template.split('/');
    const gotSegs = url.pathname.split('/');
    if (gotSegs.length !== tplSegs.length) return NO;
    for (let i = 0; i < tplSegs.length; i++) {
      const m = /^\{(\d)\}$/.exec(tplSegs[i]!);
      const expected = m ? want[Number(m[1])]! : tplSegs[i]!;
      if (safeDecode(gotSegs[i]!) !== expected) return NO;
    }
    if (grammar) {
      // A valid page request other than the original is a different read: fine, and reads store nothing.
      if (!QUERY_GRAMMARS[grammar]!(url.searchParams)) return NO;
      return deepEqual(res.json, baseRes.json) ? EQUIVALENT : { ok: true, kind: 'variant' };
    }
    // The route reads no query: ignoring one is equivalent only if the answer is the original one.
    return res.status === baseRes.status && deepEqual(res.json, baseRes.json) ? EQUIVALENT : NO;
  };
}

let seed = 0x5ec_2026;
const nextSeed = () => (seed += 7919);

function bodyTarget(
  name: string,
  o: Omit<FuzzTarget, 'name' | 'seed' | 'runs' | 'mode'> & { runs?: number; mode?: 'body' | 'header' },
): FuzzTarget {
  return { name, seed: nextSeed(), runs: o.runs ?? BODY_RUNS, mode: o.mode ?? 'body', ...o };
}

function pathTarget(
  name: string,
  shape: PathShape,
  baseStatus: number[],
  judge: FuzzTarget['judge2xx'],
  o: { queryOnly?: boolean } = {},
): FuzzTarget {
  const target: FuzzTarget = {
    name,
    seed: nextSeed(),
    runs: PATH_RUNS,
    mode: 'path',
    verifyRoute: false,
    baseStatus,
    shape,
    ...o,
    base: (w) => pathRequest(shape, w, shape.params(w), shape.query ?? []),
    judge2xx: (req, res, w, baseRes) =>
      (judge as (a: Req, b: Res, c: World, d: Res, e: FuzzTarget) => Verdict)(req, res, w, baseRes, target),
  };
  return target;
}

function pathRequest(shape: PathShape, w: World, params: readonly string[], query: readonly (readonly [string, string])[]): Req {
  const path = shape.template.replace(/\{(\d)\}/g, (_, i: string) => params[Number(i)]!);
  const qs = query.map(([n, v]) => (v === '' && n === '' ? '' : `${n}=${v}`)).join('&');
  return {
    method: shape.method,
    path: qs ? `${path}?${qs}` : path,
    headers: shape.body === undefined ? { authorization: `Bearer ${shape.key(w)}` } : jsonHeaders(shape.key(w)),
    ...(shape.body === undefined ? {} : { body: Buffer.from(JSON.stringify(shape.body)) }),
  };
}

export const BODY_RUNS = 300;
export const PATH_RUNS = 150;

export const FUZZ_TARGETS: readonly FuzzTarget[] = [
  bodyTarget('POST /v1/delegations (no key)', {
    jws: true,
    verifyRoute: false,
    baseStatus: [200],
    base: () => bodyReq('/v1/delegations', { receipts: CHAIN_A.map((d) => d.jws) }),
    judge2xx: submitJudge,
  }),
  bodyTarget('POST /v1/delegations (issue key)', {
    jws: true,
    verifyRoute: false,
    baseStatus: [200],
    base: (w) => bodyReq('/v1/delegations', { receipts: CHAIN_A.map((d) => d.jws) }, w.A.keys.issue),
    judge2xx: submitJudge,
  }),
  bodyTarget('POST /v1/delegations/issue', {
    verifyRoute: false,
    // The harness issued this very record already (fixed jti, the clock standing still): stored, 200.
    baseStatus: [200],
    base: (w) => bodyReq('/v1/delegations/issue', ISSUE_BASE, w.A.keys.issue),
    judge2xx: (req, res) => {
      const b = plainBody(req);
      if (b && deepEqual(b, ISSUE_BASE)) return resJson(res)['delegation'] !== undefined ? EQUIVALENT : NO;
      return schemaVariant(IssueRequest)(req);
    },
  }),
  bodyTarget('POST /v1/verify (bundle by value, binding, consumed jti)', {
    jws: true,
    verifyRoute: true,
    baseStatus: [403],
    base: (w) =>
      bodyReq('/v1/verify', { ...bundle(invConsumed, CHAIN_A), require_binding: true, body: invConsumed.payload['args'] }, w.A.keys.verify),
    judge2xx: () => NO,
  }),
  bodyTarget('POST /verify (bundle by reference, consumed jti)', {
    jws: true,
    verifyRoute: true,
    baseStatus: [403],
    base: (w) => bodyReq('/verify', bundle(invMetered, 'reference'), w.A.keys.verify),
    judge2xx: () => NO,
  }),
  bodyTarget('POST /verify (X-DRS-Bundle header, consumed jti)', {
    jws: true,
    verifyRoute: true,
    baseStatus: [403],
    mode: 'header',
    base: (w) => ({
      ...bodyReq('/verify', {}, w.A.keys.verify),
      headers: { ...jsonHeaders(w.A.keys.verify), 'x-drs-bundle': b64u(JSON.stringify(bundle(invConsumed, CHAIN_A))) },
    }),
    judge2xx: () => NO,
  }),
  bodyTarget('POST /v1/delegations/:hash/revoke (issue key, revoked DR)', {
    verifyRoute: false,
    baseStatus: [200],
    base: (w) => bodyReq(`/v1/delegations/${drRevoked.hash}/revoke`, { confirm: true, reason: 'fuzz' }, w.A.keys.issue),
    judge2xx: revokeKeyJudge,
  }),
  bodyTarget('POST /v1/delegations/:hash/revoke (signed, revoked DR)', {
    jws: true,
    verifyRoute: false,
    baseStatus: [200],
    base: () => bodyReq(`/v1/delegations/${drRevoked.hash}/revoke`, { revocation: revRevoked.jws }),
    judge2xx: revokeSignedJudge,
  }),
  bodyTarget('POST /v1/invocations/:jti/actuals (recorded actual)', {
    verifyRoute: false,
    baseStatus: [200],
    base: (w) => bodyReq(`/v1/invocations/${String(invMetered.payload['jti'])}/actuals`, ACTUAL_BASE, w.A.keys.report),
    judge2xx: actualJudge,
  }),
  bodyTarget('POST /v1/admin/tenants', {
    verifyRoute: false,
    baseStatus: [201],
    base: (w) => bodyReq('/v1/admin/tenants', { name: 'fuzz tenant' }, w.svc.adminKey),
    judge2xx: schemaVariant(CreateTenantRequest),
  }),
  bodyTarget('POST /v1/admin/tenants/:tenant/roots (existing root)', {
    verifyRoute: false,
    baseStatus: [200],
    base: (w) => bodyReq(`/v1/admin/tenants/${w.A.id}/roots`, { did: KEYS.rootA.did, label: 'fuzz' }, w.svc.adminKey),
    judge2xx: rootJudge,
  }),
  bodyTarget('POST /v1/admin/tenants/:tenant/api-keys', {
    verifyRoute: false,
    baseStatus: [201],
    base: (w) =>
      bodyReq(
        `/v1/admin/tenants/${w.A.id}/api-keys`,
        { scopes: ['verify', 'audit'], name: 'fuzz', tool_server: 'mcp://fuzz.example.com' },
        w.svc.adminKey,
      ),
    judge2xx: schemaVariant(CreateApiKeyRequest),
  }),
  pathTarget(
    'GET /v1/delegations/:hash',
    { method: 'GET', template: '/v1/delegations/{0}', params: () => [drA1.hash], key: (w) => w.A.keys.audit },
    [200],
    pathJudge(),
  ),
  pathTarget(
    'GET /v1/delegations/:hash/chain',
    { method: 'GET', template: '/v1/delegations/{0}/chain', params: () => [drA1.hash], key: (w) => w.A.keys.verify },
    [200],
    pathJudge(),
  ),
  pathTarget(
    'GET /v1/delegations/:hash/tree',
    { method: 'GET', template: '/v1/delegations/{0}/tree', params: () => [drA0.hash], key: (w) => w.A.keys.issue },
    [200],
    pathJudge(),
  ),
  pathTarget(
    'GET /v1/delegations/:hash/invocations',
    {
      method: 'GET',
      template: '/v1/delegations/{0}/invocations',
      params: () => [drA0.hash],
      query: [['limit', '2']],
      key: (w) => w.A.keys.audit,
    },
    [200],
    pathJudge('invocations'),
  ),
  pathTarget(
    'GET /v1/invocations/:jti',
    { method: 'GET', template: '/v1/invocations/{0}', params: () => [String(invMetered.payload['jti'])], key: (w) => w.A.keys.report },
    [200],
    pathJudge(),
  ),
  pathTarget(
    'GET /v1/service-receipts',
    {
      method: 'GET',
      template: '/v1/service-receipts',
      params: () => [],
      query: [
        ['after', '0'],
        ['limit', '5'],
      ],
      key: (w) => w.A.keys.audit,
    },
    [200],
    pathJudge('serviceReceipts'),
    { queryOnly: true },
  ),
  pathTarget(
    'GET /v1/admin/tenants/:tenant/roots',
    { method: 'GET', template: '/v1/admin/tenants/{0}/roots', params: (w) => [w.A.id], key: (w) => w.svc.adminKey },
    [200],
    pathJudge(),
  ),
  pathTarget(
    'GET /v1/admin/tenants/:tenant/api-keys',
    { method: 'GET', template: '/v1/admin/tenants/{0}/api-keys', params: (w) => [w.A.id], key: (w) => w.svc.adminKey },
    [200],
    pathJudge(),
  ),
  pathTarget(
    'DELETE /v1/admin/tenants/:tenant/roots/:did (removed root)',
    {
      method: 'DELETE',
      template: '/v1/admin/tenants/{0}/roots/{1}',
      params: (w) => [w.A.id, KEYS.rootOld.did],
      key: (w) => w.svc.adminKey,
    },
    [404],
    () => NO,
  ),
  pathTarget(
    'DELETE /v1/admin/api-keys/:id (revoked key)',
    { method: 'DELETE', template: '/v1/admin/api-keys/{0}', params: (w) => [w.A.revokedKeyId], key: (w) => w.svc.adminKey },
    [204],
    pathJudge(),
  ),
  pathTarget(
    'POST /v1/delegations/:hash/revoke (path)',
    {
      method: 'POST',
      template: '/v1/delegations/{0}/revoke',
      params: () => [drRevoked.hash],
      body: { confirm: true, reason: 'fuzz' },
      key: (w) => w.A.keys.issue,
    },
    [200],
    pathJudge(),
  ),
  pathTarget(
    'POST /v1/invocations/:jti/actuals (path)',
    {
      method: 'POST',
      template: '/v1/invocations/{0}/actuals',
      params: () => [String(invMetered.payload['jti'])],
      body: ACTUAL_BASE,
      key: (w) => w.A.keys.report,
    },
    [200],
    pathJudge(),
  ),
];

/** The mutated request, or null when the plan does not apply to this base. */
export function fuzzRequest(t: FuzzTarget, base: Req, m: Mutation): Req | null {
  if (m.kind === 'path') {
    return pathMutation(t.shape!, base, m);
  }
  if (m.kind === 'header') {
    const headers = { ...(base.headers ?? {}) };
    const encoded = headers['x-drs-bundle']!;
    let value: string;
    if (m.inner.kind === 'encoded') value = applyBytes(Buffer.from(encoded, 'latin1'), m.inner.bytes).toString('latin1');
    else {
      const inner = applyBody(unb64u(encoded), m.inner);
      if (inner === null) return null;
      value = b64u(inner);
    }
    headers['x-drs-bundle'] = headerSafe(value);
    return { ...base, headers };
  }
  const body = applyBody(base.body as Uint8Array, m);
  return body === null ? null : { ...base, body };
}

function pathMutation(shape: PathShape, base: Req, m: Extract<Mutation, { kind: 'path' }>): Req {
  const url = new URL(base.path, 'http://x');
  const segs = url.pathname.split('/');
  const paramIdx = segs.map((_, i) => i).filter((i) => /^\{\d\}$/.test(shape.template.split('/')[i] ?? ''));
  if (paramIdx.length > 0) {
    const i = paramIdx[m.param % paramIdx.length]!;
    segs[i] = applyParam(safeDecode(segs[i]!) ?? segs[i]!, m.op);
  }
  const q = applyQuery(shape.query ?? [], m.query);
  const qs = q.map(([n, v]) => `${n}=${v}`).join('&');
  return { ...base, path: `${segs.join('/')}${qs ? `?${qs}` : ''}` };
}
