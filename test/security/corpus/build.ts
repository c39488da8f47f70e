/**
 * Builds the checked-in hostile-request corpus (test/security/corpus/*.json).
 *
 *   npx tsx test/security/corpus/build.ts        # rewrite the JSON files
 *
 * Every record in it is signed with the fixed keys of support/fixtures.ts at
 * the fixed time T0, so the files are reproducible byte for byte; the
 * hostile-input test checks that they still are. Large inputs (oversized and
 * streamed bodies, 10,000-level nesting, 200 KB strings) are described as
 * parts and generated when the test runs.
 *
 * Every case here must be refused with a 4xx and store nothing. Bodies that
 * would be valid are built to be observable when wrongly accepted: they name
 * fresh records (a wrongful accept stores them) or a DR that must stay live.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { AuthRef, CorpusCase, CorpusFile, Part } from '../support/corpus.js';
import { CORPUS_DIR } from '../support/corpus.js';
import {
  ABSENT_APPROVAL,
  ABSENT_HASH,
  ABSENT_JTI,
  ACTUAL_BASE,
  CATALOG_A,
  CHAIN_A,
  DECISION,
  IDENTITY_SIGNATURE,
  ISSUE_BASE,
  KEYS,
  T0,
  TOOL_SERVER,
  WEAK_POINTS,
  b64u,
  base58,
  bundle,
  didKeyOf,
  drA0,
  drA1,
  drB0,
  drHeld,
  drLive,
  drRevoked,
  fixedKey,
  invConsumed,
  invMetered,
  invocation,
  invocationPayload,
  jcs,
  rawJws,
  recordHash,
  revRevoked,
  revocation,
  revocationPayload,
  rootDr,
  signPayload,
  subDr,
  subPayload,
  type Key,
  type Rec,
} from '../support/fixtures.js';
import { ENCODING_ATTACKS, dirtyTrailingBits, signedPayloadAttacks } from '../support/jws-attacks.js';
import { addMember, fromValue, getAt, objectPaths, serialize, updateAt, type JNode, type JPath } from '../support/json.js';

const MAX_BODY = 256 * 1024;
const json = (v: unknown) => JSON.stringify(v);
const b64 = (b: Uint8Array | string) => Buffer.from(b).toString('base64');

// ---------------------------------------------------------------- routes

interface FieldSpec {
  /** Member names and array indexes. */
  readonly path: readonly (string | number)[];
  /** JSON types the route accepts here: a replacement of any other type must be refused. */
  readonly accepts: readonly ('string' | 'number' | 'integer' | 'boolean' | 'null' | 'array' | 'object' | 'any')[];
  /** free: display text (names, reasons); ident: identifiers, JWS, DIDs, enums. */
  readonly text?: 'free' | 'ident';
  /** Values of an accepted type that are still out of range. */
  readonly bad?: readonly { readonly what: string; readonly raw: string }[];
}

interface BodyRoute {
  readonly slug: string;
  readonly route: string;
  readonly path: string;
  readonly auth: AuthRef;
  /** Valid request whose acceptance would be observable (stores or changes something). */
  readonly base: Record<string, unknown>;
  /** Valid request that changes nothing (idempotent), for the content-type cases. */
  readonly idempotent: { readonly path: string; readonly body: Record<string, unknown> };
  readonly fields: readonly FieldSpec[];
  readonly verify?: boolean;
  /**
   * Top-level members whose objects the route reads as data, any member name
   * allowed (explain's hypothetical args): a `__proto__` member there is an
   * ordinary name, so it is tried in `refused`, a request refused for a reason
   * of its own, to show the parser neither chokes nor pollutes.
   */
  readonly dataObjects?: { readonly members: readonly string[]; readonly refused: Record<string, unknown> };
}

const drFresh = subDr(drA0, KEYS.a1, KEYS.a3.did, 'dr:sec-corpus-fresh');
const revLive = revocation(KEYS.rootA, drLive.hash, 'rev:sec-corpus-live');
/**
 * A signed approval decision for the absent approval by a DID no tenant lists (approval ids are random, so a
 * checked-in record cannot name tenant A's): the base is itself refused 404, and every variant must be refused too.
 */
const signedDecision = (decision: 'approve' | 'reject', jti: string) =>
  signPayload(
    {
      iss: KEYS.stranger.did,
      drs_v: '4.0',
      drs_type: 'baton-approval-decision',
      approval_id: ABSENT_APPROVAL,
      decision,
      confirm: true,
      reason: 'corpus',
      iat: T0,
      jti,
    },
    KEYS.stranger,
  );
const invFresh = (n: string) => invocation(CHAIN_A, KEYS.a2, `inv:sec-corpus-${n}`);
const ARGS_BASE = { tool: 'web_search', estimated_cost_usd: 0.5, pii_access: false, write_access: false };

const HUGE_INTEGERS = [
  { what: '1e400', raw: '1e400' },
  { what: 'minus-1e400', raw: '-1e400' },
  { what: '2^53+1', raw: '9007199254740993' },
  { what: 'minus-2^53-1', raw: '-9007199254740993' },
  { what: 'negative', raw: '-1' },
  { what: 'fraction', raw: '1.5' },
];
const HUGE_MONEY = [
  { what: '1e400', raw: '1e400' },
  { what: '2^53+1', raw: '9007199254740993' },
  { what: 'above-max-usd', raw: '1000000000.01' },
  { what: 'negative', raw: '-0.01' },
];

const BODY_ROUTES: readonly BodyRoute[] = [
  {
    slug: 'delegations-submit',
    route: 'POST /v1/delegations',
    path: '/v1/delegations',
    auth: 'none',
    base: { receipts: [drA0.jws, drFresh.jws] },
    idempotent: { path: '/v1/delegations', body: { receipts: [drA0.jws, drA1.jws] } },
    fields: [
      { path: ['receipts'], accepts: ['array'] },
      { path: ['receipts', 1], accepts: ['string'], text: 'ident' },
    ],
  },
  {
    slug: 'delegations-submit-keyed',
    route: 'POST /v1/delegations',
    path: '/v1/delegations',
    auth: 'A.issue',
    base: { receipt: drFresh.jws },
    idempotent: { path: '/v1/delegations', body: { receipt: drA1.jws } },
    fields: [{ path: ['receipt'], accepts: ['string'], text: 'ident' }],
  },
  {
    slug: 'delegations-issue',
    route: 'POST /v1/delegations/issue',
    path: '/v1/delegations/issue',
    auth: 'A.issue',
    base: {
      audience: KEYS.a3.did,
      policy: { allowed_tools: ['web_search'], max_calls: 2 },
      jti: 'dr:sec-corpus-issue',
      nbf: T0,
      exp: T0 + 60,
    },
    idempotent: { path: '/v1/delegations/issue', body: ISSUE_BASE },
    fields: [
      { path: ['audience'], accepts: ['string'], text: 'ident' },
      { path: ['policy'], accepts: ['object'] },
      { path: ['policy', 'allowed_tools'], accepts: ['array'] },
      { path: ['policy', 'allowed_tools', 0], accepts: ['string'], text: 'ident' },
      { path: ['policy', 'max_calls'], accepts: ['integer'], bad: HUGE_INTEGERS },
      { path: ['jti'], accepts: ['string'], text: 'ident' },
      { path: ['nbf'], accepts: ['integer'], bad: HUGE_INTEGERS },
      { path: ['exp'], accepts: ['integer', 'null'], bad: HUGE_INTEGERS },
    ],
  },
  {
    slug: 'verify-v1',
    route: 'POST /v1/verify',
    path: '/v1/verify',
    auth: 'A.verify',
    verify: true,
    base: {
      ...bundle(invFresh('verify-base'), CHAIN_A),
      require_binding: false,
      body: { ...(invConsumed.payload['args'] as object) },
    },
    idempotent: { path: '/v1/verify/dry-run', body: bundle(invFresh('verify-ct'), CHAIN_A) },
    fields: [
      { path: ['bundle_version'], accepts: ['string'], text: 'ident' },
      { path: ['invocation'], accepts: ['string'], text: 'ident' },
      { path: ['receipts'], accepts: ['array'] },
      { path: ['receipts', 0], accepts: ['string'], text: 'ident' },
      { path: ['require_binding'], accepts: ['boolean'] },
    ],
  },
  {
    slug: 'verify-drs',
    route: 'POST /verify',
    path: '/verify',
    auth: 'A.verify',
    verify: true,
    base: bundle(invFresh('verify-drs-base'), 'reference'),
    // No dry run here (/verify takes none): a body read as JSON by mistake would count, and show.
    idempotent: { path: '/verify', body: bundle(invFresh('verify-drs-ct'), 'reference') },
    fields: [
      { path: ['bundle_version'], accepts: ['string'], text: 'ident' },
      { path: ['invocation'], accepts: ['string'], text: 'ident' },
      { path: ['receipts'], accepts: ['array'] },
    ],
  },
  {
    slug: 'revoke-key',
    route: 'POST /v1/delegations/:hash/revoke',
    path: `/v1/delegations/${drLive.hash}/revoke`,
    auth: 'A.issue',
    base: { confirm: true, reason: 'corpus' },
    idempotent: { path: `/v1/delegations/${drRevoked.hash}/revoke`, body: { confirm: true, reason: 'again' } },
    fields: [
      { path: ['confirm'], accepts: ['boolean'], bad: [{ what: 'false', raw: 'false' }] },
      { path: ['reason'], accepts: ['string'], text: 'free' },
    ],
  },
  {
    slug: 'revoke-signed',
    route: 'POST /v1/delegations/:hash/revoke',
    path: `/v1/delegations/${drLive.hash}/revoke`,
    auth: 'none',
    base: { revocation: revLive.jws },
    idempotent: { path: `/v1/delegations/${drRevoked.hash}/revoke`, body: { revocation: revRevoked.jws } },
    fields: [{ path: ['revocation'], accepts: ['string'], text: 'ident' }],
  },
  {
    slug: 'actuals',
    route: 'POST /v1/invocations/:jti/actuals',
    path: '/v1/invocations/inv:sec-unmetered/actuals',
    auth: 'A.report',
    base: { ...ACTUAL_BASE },
    idempotent: { path: `/v1/invocations/${String(invMetered.payload['jti'])}/actuals`, body: { ...ACTUAL_BASE } },
    fields: [
      { path: ['cost_usd'], accepts: ['number', 'null'], bad: HUGE_MONEY },
      { path: ['tokens_in'], accepts: ['integer', 'null'], bad: HUGE_INTEGERS },
      { path: ['tokens_out'], accepts: ['integer', 'null'], bad: HUGE_INTEGERS },
      { path: ['source'], accepts: ['string'], text: 'ident' },
    ],
  },
  {
    slug: 'admin-tenants',
    route: 'POST /v1/admin/tenants',
    path: '/v1/admin/tenants',
    auth: 'admin',
    base: { name: 'corpus tenant' },
    idempotent: { path: '/v1/admin/tenants', body: { name: 'corpus content-type tenant' } },
    fields: [{ path: ['name'], accepts: ['string'], text: 'free' }],
  },
  {
    slug: 'admin-roots',
    route: 'POST /v1/admin/tenants/:tenant/roots',
    path: '/v1/admin/tenants/{{tenantA}}/roots',
    auth: 'admin',
    base: { did: KEYS.newRoot.did, label: 'corpus root' },
    idempotent: { path: '/v1/admin/tenants/{{tenantA}}/roots', body: { did: KEYS.rootA.did } },
    fields: [
      { path: ['did'], accepts: ['string'], text: 'ident' },
      { path: ['label'], accepts: ['string', 'null'], text: 'free' },
    ],
  },
  {
    slug: 'admin-api-keys',
    route: 'POST /v1/admin/tenants/:tenant/api-keys',
    path: '/v1/admin/tenants/{{tenantA}}/api-keys',
    auth: 'admin',
    base: { scopes: ['verify'], name: 'corpus key', tool_server: TOOL_SERVER },
    idempotent: { path: '/v1/admin/tenants/{{tenantA}}/api-keys', body: { scopes: ['audit'], name: 'corpus content-type key' } },
    fields: [
      { path: ['scopes'], accepts: ['array'] },
      { path: ['scopes', 0], accepts: ['string'], text: 'ident' },
      { path: ['name'], accepts: ['string', 'null'], text: 'free' },
      { path: ['tool_server'], accepts: ['string', 'null'], text: 'free' },
    ],
  },
  // Issue 13. A wrongful accept is observable: a third catalog version, or A's pending approval and held grant decided.
  {
    slug: 'tools-publish',
    route: 'POST /v1/admin/tenants/:tenant/tools',
    path: '/v1/admin/tenants/{{tenantA}}/tools',
    auth: 'admin',
    base: { ...CATALOG_A[1], base_version: CATALOG_A.length, default_decision: 'allow', approvers: [KEYS.newRoot.did] },
    // A stale base version: refused with CONFLICT, changes nothing.
    idempotent: { path: '/v1/admin/tenants/{{tenantA}}/tools', body: { ...CATALOG_A[0] } },
    fields: [
      { path: ['base_version'], accepts: ['integer'], bad: HUGE_INTEGERS },
      { path: ['strict'], accepts: ['boolean'] },
      { path: ['tools'], accepts: ['array'] },
      { path: ['tools', 0], accepts: ['object'] },
      { path: ['tools', 0, 'name'], accepts: ['string'], text: 'ident' },
      { path: ['tools', 0, 'type'], accepts: ['string'], text: 'ident' },
      { path: ['tools', 0, 'blast_radius'], accepts: ['string'], text: 'ident' },
      { path: ['tools', 0, 'untrusted_content'], accepts: ['boolean'] },
      { path: ['tools', 0, 'tags'], accepts: ['array'] },
      { path: ['tools', 0, 'action_type'], accepts: ['string'], text: 'ident' },
      { path: ['default_decision'], accepts: ['string'], text: 'ident' },
      { path: ['approvers'], accepts: ['array'] },
      { path: ['approvers', 0], accepts: ['string'], text: 'ident' },
    ],
  },
  ...(['approve', 'reject'] as const).flatMap((verb): BodyRoute[] => [
    {
      slug: `approvals-${verb}`,
      route: `POST /v1/approvals/:id/${verb}`,
      path: `/v1/approvals/{{approvalA}}/${verb}`,
      auth: 'A.approve',
      base: { ...DECISION },
      // The pending approval itself: a body wrongly read under another media type decides it, which shows.
      idempotent: { path: `/v1/approvals/{{approvalA}}/${verb}`, body: { ...DECISION } },
      fields: [
        { path: ['actor'], accepts: ['string'], text: 'free' },
        { path: ['confirm'], accepts: ['boolean'], bad: [{ what: 'false', raw: 'false' }] },
        { path: ['reason'], accepts: ['string'], text: 'free' },
      ],
    },
    {
      slug: `approvals-signed-${verb}`,
      route: 'POST /v1/approvals/:id/signed-decision',
      path: `/v1/approvals/${ABSENT_APPROVAL}/signed-decision`,
      auth: 'none',
      base: { signed_decision: signedDecision(verb, `apd:sec-corpus-${verb}`) },
      idempotent: {
        path: `/v1/approvals/${ABSENT_APPROVAL}/signed-decision`,
        body: { signed_decision: signedDecision(verb, `apd:sec-corpus-ct-${verb}`) },
      },
      fields: [{ path: ['signed_decision'], accepts: ['string'], text: 'ident' }],
    },
    {
      slug: `grants-${verb}`,
      route: `POST /v1/grants/:hash/${verb}`,
      path: `/v1/grants/${drHeld.hash}/${verb}`,
      auth: 'A.approve',
      base: { ...DECISION },
      idempotent: { path: `/v1/grants/${drHeld.hash}/${verb}`, body: { ...DECISION } },
      fields: [
        { path: ['actor'], accepts: ['string'], text: 'free' },
        { path: ['confirm'], accepts: ['boolean'], bad: [{ what: 'false', raw: 'false' }] },
        { path: ['reason'], accepts: ['string'], text: 'free' },
      ],
    },
  ]),
  {
    slug: 'explain',
    route: 'POST /v1/explain',
    path: '/v1/explain',
    auth: 'A.verify',
    // Explain stores nothing: a wrongful accept shows as a 200 where a 4xx is required.
    base: { dr_chain: [drA0.hash, drA1.hash], args: { ...ARGS_BASE }, context: { near_limit: false } },
    idempotent: { path: '/v1/explain', body: { dr_chain: [drA0.hash, drA1.hash], args: { ...ARGS_BASE } } },
    // A chain the tenant does not hold: 404, whatever the args say.
    dataObjects: {
      members: ['args'],
      refused: { dr_chain: [ABSENT_HASH, drA1.hash], args: { ...ARGS_BASE }, context: { near_limit: false } },
    },
    fields: [
      { path: ['dr_chain'], accepts: ['array'] },
      { path: ['dr_chain', 0], accepts: ['string'], text: 'ident' },
      { path: ['args'], accepts: ['object'] },
      { path: ['context'], accepts: ['object'] },
      { path: ['context', 'near_limit'], accepts: ['boolean'] },
    ],
  },
];

// ---------------------------------------------------------------- helpers

const files = new Map<string, CorpusFile>();

function file(name: string, description: string): CorpusCase[] {
  const f: CorpusFile = { description, cases: [] };
  files.set(name, f);
  return f.cases;
}

type CaseInput = Omit<CorpusCase, 'name' | 'expect_status_class'> & { readonly name: string };

function push(list: CorpusCase[], prefix: string, c: CaseInput): void {
  const { name, ...rest } = c;
  list.push({ name: `${prefix}/${name}`, ...rest, expect_status_class: '4xx' });
}

/** Positional path (entry indexes) for a path of member names. */
function pos(node: JNode, path: readonly (string | number)[]): JPath {
  const out: (string | number)[] = [];
  let cur: JNode | undefined = node;
  for (const step of path) {
    if (cur?.t === 'obj') {
      const i = cur.entries.findIndex((e) => e.key === step);
      if (i < 0) throw new Error(`no member ${String(step)}`);
      out.push(i);
      cur = cur.entries[i]!.value;
    } else if (cur?.t === 'arr') {
      out.push(step as number);
      cur = cur.items[step as number];
    } else throw new Error(`cannot step ${String(step)}`);
  }
  return out;
}

const replaced = (base: Record<string, unknown>, path: readonly (string | number)[], node: JNode): string => {
  const tree = fromValue(base);
  return serialize(updateAt(tree, pos(tree, path), () => node));
};

/** The body text with `bytes` spliced into the first string value. */
function inFirstString(text: string, bytes: Uint8Array): Buffer {
  const at = text.indexOf(':"') + 2;
  return Buffer.concat([Buffer.from(text.slice(0, at)), Buffer.from(bytes), Buffer.from(text.slice(at))]);
}

const firstKey = (body: Record<string, unknown>) => Object.keys(body)[0]!;

// ---------------------------------------------------------------- 1. JSON syntax and encoding

{
  const list = file(
    'json-syntax.json',
    'Bodies that are not one valid UTF-8 JSON text: empty, truncated, wrong top-level value, trailing data, raw control bytes, invalid UTF-8, BOM, UTF-16.',
  );
  for (const r of BODY_ROUTES) {
    const text = json(r.base);
    const common = { route: r.route, method: 'POST', path: r.path, auth: r.auth, expect_status: [400], expect_code: ['INVALID_REQUEST'] };
    const p = r.slug;
    push(list, p, { ...common, name: 'empty-body', body_text: '' });
    push(list, p, { ...common, name: 'whitespace-only', body_text: ' \n\t\r ' });
    for (const [what, n] of [
      ['1-byte', 1],
      ['half', Math.floor(text.length / 2)],
      ['last-byte-missing', text.length - 1],
    ] as const) {
      push(list, p, { ...common, name: `truncated-${what}`, body_text: text.slice(0, n) });
    }
    for (const [what, v] of [
      ['null', 'null'],
      ['array', '[]'],
      ['string', '"x"'],
      ['number', '1'],
      ['true', 'true'],
      ['array-of-body', `[${text}]`],
    ] as const) {
      push(list, p, {
        ...common,
        name: `top-level-${what}`,
        body_text: v,
        ...(r.verify ? { expect_status: [400, 403], expect_code: undefined } : {}),
      });
    }
    push(list, p, { ...common, name: 'trailing-garbage', body_text: `${text}x` });
    push(list, p, { ...common, name: 'two-json-values', body_text: `${text}${text}` });
    push(list, p, { ...common, name: 'trailing-nul-byte', body_base64: b64(Buffer.concat([Buffer.from(text), Buffer.from([0])])) });
    push(list, p, { ...common, name: 'raw-nul-in-string', body_base64: b64(inFirstString(text, Uint8Array.from([0]))) });
    push(list, p, { ...common, name: 'raw-control-char-in-string', body_base64: b64(inFirstString(text, Uint8Array.from([0x07]))) });
    push(list, p, { ...common, name: 'single-quoted', body_text: text.replaceAll('"', "'") });
    push(list, p, { ...common, name: 'js-comment', body_text: `/* c */${text}` });
    push(list, p, { ...common, name: 'NaN-literal', body_text: `{"${firstKey(r.base)}":NaN}` });
    push(list, p, { ...common, name: 'trailing-comma', body_text: `${text.slice(0, -1)},}` });
    for (const [what, bytes] of [
      ['lone-continuation-byte', [0x80]],
      ['overlong-slash', [0xc0, 0xaf]],
      ['utf16-surrogate-encoded', [0xed, 0xa0, 0x80]],
      ['above-U+10FFFF', [0xf4, 0x90, 0x80, 0x80]],
      ['byte-FF', [0xff]],
      ['truncated-sequence', [0xe2, 0x82]],
    ] as const) {
      push(list, p, { ...common, name: `invalid-utf8-${what}`, body_base64: b64(inFirstString(text, Uint8Array.from(bytes))) });
    }
    push(list, p, {
      ...common,
      name: 'utf8-bom',
      body_base64: b64(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)])),
      note: 'RFC 8259 8.1: a BOM is not part of JSON; body.ts claims strict reading.',
    });
    push(list, p, {
      ...common,
      name: 'utf16le-with-bom',
      body_base64: b64(Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(text, 'utf16le')])),
    });
  }
}

// ---------------------------------------------------------------- 2. JSON structure

function nestParts(prefix: string, open: string, close: string, depth: number, inner: string, suffix: string): Part[] {
  return [{ text: prefix }, { repeat: open, count: depth }, { text: inner }, { repeat: close, count: depth }, { text: suffix }];
}

{
  const list = file(
    'json-structure.json',
    'Well-formed-looking bodies with deep nesting, duplicate member names at every level, prototype-pollution members and unknown members.',
  );
  for (const r of BODY_ROUTES) {
    const tree = fromValue(r.base);
    // Verify reads bodies loosely (DRS clients add members), so members it ignores are tried on a spent invocation.
    const ignorable = r.verify
      ? fromValue({ ...r.base, invocation: invConsumed.jws, receipts: r.path === '/verify' ? [] : CHAIN_A.map((d) => d.jws) })
      : tree;
    const k = firstKey(r.base);
    const common = { route: r.route, method: 'POST', path: r.path, auth: r.auth };
    const p = r.slug;
    const bad = { ...common, expect_status: [400], expect_code: ['INVALID_REQUEST'] };
    push(list, p, { ...bad, name: 'nesting-10000-arrays', body_parts: nestParts('', '[', ']', 10_000, '0', '') });
    push(list, p, { ...bad, name: 'nesting-10000-objects', body_parts: nestParts('', '{"a":', '}', 10_000, '0', '') });
    push(list, p, { ...bad, name: 'nesting-10000-in-first-member', body_parts: nestParts(`{${json(k)}:`, '[', ']', 10_000, '0', '}') });
    push(list, p, { ...bad, name: 'nesting-65-in-first-member', body_parts: nestParts(`{${json(k)}:`, '[', ']', 64, '0', '}') });
    push(list, p, { ...bad, name: 'nesting-unbalanced-10000', body_parts: [{ repeat: '[', count: 10_000 }] });
    for (const op of objectPaths(tree)) {
      const obj = getAt(tree, op);
      if (obj?.t !== 'obj' || obj.entries.length === 0) continue;
      const first = obj.entries[0]!;
      const where = op.length === 0 ? 'top' : `at-${op.join('.')}`;
      push(list, p, { ...bad, name: `duplicate-key-same-value-${where}`, body_text: serialize(addMember(tree, op, first)) });
      push(list, p, {
        ...bad,
        name: `duplicate-key-other-value-${where}`,
        body_text: serialize(addMember(tree, op, { key: first.key, value: { t: 'lit', v: null } })),
      });
      push(list, p, {
        ...bad,
        name: `duplicate-key-escaped-spelling-${where}`,
        body_text: serialize(
          addMember(tree, op, { ...first, rawKey: `"\\u00${first.key.charCodeAt(0).toString(16).padStart(2, '0')}${first.key.slice(1)}"` }),
        ),
      });
      const topMember = op.length > 0 && tree.t === 'obj' ? tree.entries[op[0] as number]!.key : undefined;
      const inData = topMember !== undefined && r.dataObjects?.members.includes(topMember) === true;
      const host = r.verify ? ignorable : inData ? fromValue(r.dataObjects!.refused) : tree;
      push(list, p, {
        ...common,
        name: `proto-member-${where}`,
        body_text: serialize(addMember(host, op, { key: '__proto__', value: fromValue({ polluted: 'yes', admin: true }) }, true)),
      });
    }
    push(list, p, {
      ...common,
      name: 'constructor-prototype-member',
      body_text: serialize(addMember(ignorable, [], { key: 'constructor', value: fromValue({ prototype: { polluted: 'yes' } }) })),
    });
    push(list, p, {
      ...common,
      name: 'unknown-member',
      body_text: serialize(addMember(ignorable, [], { key: 'x_unknown', value: fromValue(1) })),
    });
  }
}

// ---------------------------------------------------------------- 3. field values

const TYPE_SAMPLES: readonly { readonly type: FieldSpec['accepts'][number]; readonly what: string; readonly raw: string }[] = [
  { type: 'null', what: 'null', raw: 'null' },
  { type: 'boolean', what: 'true', raw: 'true' },
  { type: 'integer', what: 'integer', raw: '7' },
  { type: 'number', what: 'fraction', raw: '0.5' },
  { type: 'string', what: 'string', raw: '"x"' },
  { type: 'array', what: 'array', raw: '[]' },
  { type: 'object', what: 'object', raw: '{}' },
];

function typeAccepted(accepts: FieldSpec['accepts'], type: FieldSpec['accepts'][number]): boolean {
  if (accepts.includes('any') || accepts.includes(type)) return true;
  return type === 'integer' && accepts.includes('number');
}

{
  const list = file(
    'field-values.json',
    'Every field of every body route with a value of every wrong type, huge and out-of-range numbers, 200 KB strings, NUL and control characters.',
  );
  for (const r of BODY_ROUTES) {
    const common = { route: r.route, method: 'POST', path: r.path, auth: r.auth };
    for (const f of r.fields) {
      const p = `${r.slug}/${f.path.join('.')}`;
      for (const s of TYPE_SAMPLES) {
        if (typeAccepted(f.accepts, s.type)) continue;
        push(list, p, { ...common, name: `type-${s.what}`, body_text: replaced(r.base, f.path, { t: 'raw', text: s.raw }) });
      }
      if (f.accepts.includes('integer') || f.accepts.includes('boolean')) {
        push(list, p, { ...common, name: 'type-numeric-string', body_text: replaced(r.base, f.path, { t: 'str', v: '1' }) });
      }
      for (const b of f.bad ?? [])
        push(list, p, { ...common, name: `value-${b.what}`, body_text: replaced(r.base, f.path, { t: 'raw', text: b.raw }) });
      if (f.text) {
        const at = (v: string) => replaced(r.base, f.path, { t: 'str', v });
        push(list, p, {
          ...common,
          name: 'string-200k-ascii',
          body_parts: splitAround(replaced(r.base, f.path, { t: 'str', v: '\u0001MARK\u0001' }), 'A', 200_000),
        });
        push(list, p, {
          ...common,
          name: 'string-100k-two-byte',
          body_parts: splitAround(replaced(r.base, f.path, { t: 'str', v: '\u0001MARK\u0001' }), 'é', 100_000),
        });
        const refused = r.verify ? [400, 403] : [400];
        push(list, p, { ...common, name: 'string-with-nul', body_text: at(`${stringAt(r.base, f.path)}\u0000x`), expect_status: refused });
        push(list, p, { ...common, name: 'string-only-nul', body_text: at('\u0000'), expect_status: refused });
        if (f.text === 'ident') {
          push(list, p, { ...common, name: 'string-with-escape-sequence', body_text: at(`${stringAt(r.base, f.path)}\u001b[2J`) });
          push(list, p, { ...common, name: 'string-with-lone-surrogate', body_text: at(`${stringAt(r.base, f.path)}\ud800`) });
          push(list, p, { ...common, name: 'string-with-rtl-override', body_text: at(`\u202e${stringAt(r.base, f.path)}`) });
          push(list, p, { ...common, name: 'string-empty', body_text: at('') });
        } else {
          push(list, p, { ...common, name: 'string-blank', body_text: at('   '), expect_status: refused });
        }
      }
    }
  }
}

function stringAt(base: Record<string, unknown>, path: readonly (string | number)[]): string {
  let v: unknown = base;
  for (const s of path) v = (v as Record<string | number, unknown>)[s];
  return String(v);
}

/** Parts for `text` with the \u0001MARK\u0001 string content replaced by `unit` x count. */
function splitAround(text: string, unit: string, count: number): Part[] {
  const marker = json('\u0001MARK\u0001').slice(1, -1);
  const [before, after] = text.split(marker) as [string, string];
  return [{ text: before }, { repeat: unit, count }, { text: after }];
}

// ---------------------------------------------------------------- 4. size

{
  const list = file(
    'size.json',
    'Bodies over the 256 KiB limit: in memory, one byte over, streamed without Content-Length (the service must stop reading), and a lying Content-Length over a socket.',
  );
  for (const r of BODY_ROUTES) {
    const common = { route: r.route, method: 'POST', path: r.path, auth: r.auth, expect_status: [413], expect_code: ['PAYLOAD_TOO_LARGE'] };
    const k = firstKey(r.base);
    push(list, r.slug, {
      ...common,
      name: 'oversized-300k',
      body_parts: [{ text: `{${json(k)}:"` }, { repeat: 'A', count: 300_000 }, { text: '"}' }],
    });
    push(list, r.slug, {
      ...common,
      name: 'limit-plus-one-byte',
      body_parts: [{ text: `{${json(k)}:"` }, { repeat: 'A', count: MAX_BODY + 1 - `{${json(k)}:""}`.length }, { text: '"}' }],
    });
    push(list, r.slug, {
      ...common,
      name: 'streamed-8MiB-without-length',
      body_stream: { chunk_bytes: 64 * 1024, total_bytes: 8 * 1024 * 1024, fill_byte: 0x20 },
      // The limit, the chunk that crosses it, and the one chunk a ReadableStream queues ahead (its high-water mark).
      expect_max_bytes_read: MAX_BODY + 2 * 64 * 1024,
      note: 'A body without Content-Length must be refused once the limit is passed, not buffered whole.',
    });
  }
  for (const r of BODY_ROUTES.filter((x) => ['verify-v1', 'admin-tenants', 'delegations-submit'].includes(x.slug))) {
    push(list, r.slug, {
      route: r.route,
      method: 'POST',
      path: r.path,
      auth: r.auth,
      expect_status: [413],
      expect_code: ['PAYLOAD_TOO_LARGE'],
      name: 'declared-1GB-no-body-socket',
      raw_http: { lines: ['Content-Type: application/json', 'Content-Length: 1000000000'] },
      note: 'The declared length alone must get a prompt 413; the body never comes.',
    });
  }
}

// ---------------------------------------------------------------- 5. content types

{
  const list = file(
    'content-type.json',
    'Valid, idempotent request bodies sent under a media type other than application/json: a JSON API must not read them as JSON.',
  );
  for (const r of BODY_ROUTES) {
    const common = { route: r.route, method: 'POST', path: r.idempotent.path, auth: r.auth, body_text: json(r.idempotent.body) };
    const types =
      r.slug === 'verify-v1' || r.slug === 'delegations-submit' || r.slug === 'admin-tenants'
        ? ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/xml']
        : ['text/plain'];
    for (const t of types) push(list, r.slug, { ...common, name: `content-type-${t.split(/[;/]/)[1]}`, headers: { 'content-type': t } });
    push(list, r.slug, {
      ...common,
      name: 'content-type-json-utf16-body',
      headers: { 'content-type': 'application/json; charset=utf-16' },
      body_text: undefined,
      body_base64: b64(Buffer.from(json(r.idempotent.body), 'utf16le')),
    });
  }
}

// ---------------------------------------------------------------- 6. JWS encodings

interface JwsContext {
  readonly slug: string;
  /** The record kind the context carries: its base, signer, and a request around a hostile copy. */
  readonly base: Rec;
  readonly key: Key;
  readonly deepField: string;
  request(hostile: string, n: number): { route: string; path: string; auth: AuthRef; body: unknown; expect_status?: number[] };
}

const drContextSubmit: JwsContext = {
  slug: 'dr-submit',
  base: drFresh,
  key: KEYS.a1,
  deepField: 'drs_regulatory',
  request: (x) => ({ route: 'POST /v1/delegations', path: '/v1/delegations', auth: 'none', body: { receipt: x } }),
};
const drContextVerify: JwsContext = {
  slug: 'dr-verify',
  base: drFresh,
  key: KEYS.a1,
  deepField: 'drs_regulatory',
  request: (x, n) => {
    const inv = signPayload(
      { ...invocationPayload([drA0, drFresh], KEYS.a3, `inv:sec-corpus-dr-${n}`), dr_chain: [drA0.hash, recordHash(x)] },
      KEYS.a3,
    );
    return {
      route: 'POST /v1/verify',
      path: '/v1/verify',
      auth: 'A.verify',
      body: { bundle_version: '4.0', invocation: inv, receipts: [drA0.jws, x] },
      expect_status: [403],
    };
  },
};
const invContext: JwsContext = {
  slug: 'invocation-verify',
  base: invFresh('jws'),
  key: KEYS.a2,
  deepField: 'args',
  request: (x) => ({
    route: 'POST /v1/verify',
    path: '/v1/verify',
    auth: 'A.verify',
    body: { bundle_version: '4.0', invocation: x, receipts: CHAIN_A.map((d) => d.jws) },
    expect_status: [403],
  }),
};
const revContext: JwsContext = {
  slug: 'revocation',
  base: revLive,
  key: KEYS.rootA,
  deepField: 'reason',
  request: (x) => ({
    route: 'POST /v1/delegations/:hash/revoke',
    path: `/v1/delegations/${drLive.hash}/revoke`,
    auth: 'none',
    body: { revocation: x },
  }),
};
const JWS_CONTEXTS = [drContextSubmit, drContextVerify, invContext, revContext];

/** Re-signs a payload of the context's kind with a fresh jti so every verify case is a new invocation. */
function contextBase(ctx: JwsContext, n: number): { rec: Rec; payload: Record<string, unknown> } {
  if (ctx.slug !== 'invocation-verify') return { rec: ctx.base, payload: ctx.base.payload };
  const payload = invocationPayload(CHAIN_A, KEYS.a2, `inv:sec-corpus-jws-${n}`);
  const jws = signPayload(payload, KEYS.a2);
  return { rec: { jws, hash: recordHash(jws), payload }, payload };
}

{
  const list = file(
    'jws-encoding.json',
    'Compact JWS with 1, 2 or 4 parts, padding, the standard base64 alphabet, whitespace, non-zero trailing bits, tampered signatures, S >= L, wrong lengths, alg none / HS256 / wrong typ / extra header members, in every place a JWS is accepted.',
  );
  let n = 0;
  for (const ctx of JWS_CONTEXTS) {
    for (const [attack, f] of Object.entries(ENCODING_ATTACKS)) {
      const { rec } = contextBase(ctx, ++n);
      const hostile = f(rec.jws, ctx.key);
      if (hostile === null) continue;
      const r = ctx.request(hostile, n);
      push(list, ctx.slug, {
        name: attack,
        route: r.route,
        method: 'POST',
        path: r.path,
        auth: r.auth,
        body_text: json(r.body),
        ...(r.expect_status ? { expect_status: r.expect_status } : {}),
      });
    }
  }
}

// ---------------------------------------------------------------- 7. signed payloads

const weakDid = (point: Uint8Array) => didKeyOf(point);
const WEAK_DIDS: Record<string, string> = {
  identity: weakDid(WEAK_POINTS.identity),
  'order-2': weakDid(WEAK_POINTS.order2),
  'order-4': weakDid(WEAK_POINTS.order4),
  'order-8': weakDid(WEAK_POINTS.order8),
  'identity-non-canonical-y': weakDid(WEAK_POINTS.identityNonCanonical),
  'identity-negative-zero-x': weakDid(WEAK_POINTS.identityNegZero),
};
/** Spellings of did:key that are not the one canonical Ed25519 did:key. */
const NON_CANONICAL_DIDS: Record<string, string> = {
  'leading-zero-byte': didKeyOf(KEYS.a3.publicKey, [0]),
  'secp256k1-multicodec': `did:key:z${base58(Uint8Array.from([0xe7, 0x01, ...KEYS.a3.publicKey]))}`,
  'base58-invalid-character': `${KEYS.a3.did.slice(0, -1)}0`,
  'multibase-base16': `did:key:f${Buffer.from([0xed, 0x01, ...KEYS.a3.publicKey]).toString('hex')}`,
  'uppercase-scheme': KEYS.a3.did.replace('did:key:', 'DID:KEY:'),
  'did-web': 'did:web:example.com',
  'truncated-key': KEYS.a3.did.slice(0, -3),
};

{
  const list = file(
    'signed-payloads.json',
    'Records with a valid Ed25519 signature over payload bytes that are not canonical JCS or break the record schema, small-order and non-canonical did:key, record-type confusion, 64 KiB+ records and 17-deep chains.',
  );
  let n = 100;
  for (const ctx of JWS_CONTEXTS) {
    for (const attack of Object.keys(signedPayloadAttacks(ctx.base.payload, ctx.key, ctx.deepField))) {
      // Each invocation case gets its own fresh jti, so no case can replay another.
      const hostile = signedPayloadAttacks(contextBase(ctx, ++n).payload, ctx.key, ctx.deepField)[attack]!;
      const r = ctx.request(hostile, n);
      push(list, ctx.slug, {
        name: attack,
        route: r.route,
        method: 'POST',
        path: r.path,
        auth: r.auth,
        body_text: json(r.body),
        ...(r.expect_status ? { expect_status: r.expect_status } : {}),
      });
    }
  }

  // Schema violations, canonical and properly signed.
  const drCases: Record<string, Record<string, unknown>> = {
    'drs_v-3.0': { drs_v: '3.0' },
    'drs_type-invocation': { drs_type: 'invocation-receipt' },
    'jti-without-prefix': { jti: 'x:1' },
    'cmd-dot-segment': { cmd: '/mcp/tools/call/../../admin' },
    'cmd-encoded-dot-segment': { cmd: '/mcp/tools/call/%2e%2e/admin' },
    'exp-before-nbf': { exp: T0 - 200 },
    'policy-unknown-member': { policy: { allowed_tools: ['web_search'], max_cost_usd: 10, max_calls: 500, allow_everything: true } },
    'policy-max_calls-fraction': { policy: { allowed_tools: ['web_search'], max_cost_usd: 10, max_calls: 1.5 } },
    'policy-max_cost-negative': { policy: { allowed_tools: ['web_search'], max_cost_usd: -1, max_calls: 500 } },
    'policy-escalation-tools': { policy: { allowed_tools: ['*'], max_cost_usd: 10, max_calls: 500 } },
    'policy-escalation-calls': { policy: { allowed_tools: ['web_search'], max_cost_usd: 10, max_calls: 5000 } },
    'sub-dr-with-root-type': { drs_root_type: 'human' },
    'unknown-top-level-member': { drs_extension: { anything: true } },
    'aud-not-a-did': { aud: 'mailto:agent@example.com' },
    'sub-changed': { sub: KEYS.stranger.did },
    'prev-hash-uppercase': { prev_dr_hash: drA0.hash.toUpperCase().replace('SHA256', 'sha256') },
    'prev-hash-absent-parent': { prev_dr_hash: ABSENT_HASH },
    'nbf-before-parent': { nbf: T0 - 10_000 },
    'record-over-64KiB': { drs_regulatory: { note: 'A'.repeat(70_000) } },
  };
  for (const [what, extra] of Object.entries(drCases)) {
    const x = signPayload(subPayload(drA0, KEYS.a1, KEYS.a3.did, `dr:sec-corpus-schema-${++n}`, extra), KEYS.a1);
    for (const ctx of [drContextSubmit, drContextVerify]) {
      const r = ctx.request(x, ++n);
      push(list, `${ctx.slug}-schema`, {
        name: what,
        route: r.route,
        method: 'POST',
        path: r.path,
        auth: r.auth,
        body_text: json(r.body),
        ...(r.expect_status ? { expect_status: r.expect_status } : {}),
      });
    }
  }
  const stranger = signPayload(subPayload(drA0, KEYS.stranger, KEYS.a3.did, `dr:sec-corpus-stranger`), KEYS.stranger);
  for (const ctx of [drContextSubmit, drContextVerify]) {
    const r = ctx.request(stranger, ++n);
    push(list, `${ctx.slug}-schema`, {
      name: 'issued-by-non-holder',
      route: r.route,
      method: 'POST',
      path: r.path,
      auth: r.auth,
      body_text: json(r.body),
      ...(r.expect_status ? { expect_status: r.expect_status } : {}),
    });
  }

  // Small-order and non-canonical keys. A DR granting authority to such a key, and a child "signed" by it with R = identity, S = 0.
  for (const [what, did] of Object.entries(WEAK_DIDS)) {
    const weakAud = subDr(drA0, KEYS.a1, did, `dr:sec-corpus-weak-aud-${what}`);
    const forged = rawJws({
      payload: jcs(subPayload(weakAud, { did } as Key, KEYS.a3.did, `dr:sec-corpus-forged-${what}`, { iss: did })),
      signature: IDENTITY_SIGNATURE,
    });
    const forgedInv = rawJws({
      payload: jcs({ ...invocationPayload([drA0, weakAud], { did } as Key, `inv:sec-corpus-weak-${what}`) }),
      signature: IDENTITY_SIGNATURE,
    });
    const common = { method: 'POST' };
    push(list, 'weak-key', {
      ...common,
      name: `${what}-as-aud`,
      route: 'POST /v1/delegations',
      path: '/v1/delegations',
      auth: 'none',
      body_text: json({ receipt: weakAud.jws }),
      note: 'DESIGN 2: a did:key of small order is refused, wherever it appears.',
    });
    push(list, 'weak-key', {
      ...common,
      name: `${what}-forged-child`,
      route: 'POST /v1/delegations',
      path: '/v1/delegations',
      auth: 'none',
      body_text: json({ receipts: [drA0.jws, weakAud.jws, forged] }),
    });
    const forgedRec: Rec = {
      jws: forged,
      hash: recordHash(forged),
      payload: subPayload(weakAud, { did } as Key, KEYS.a3.did, `dr:sec-corpus-forged-${what}`, { iss: did }),
    };
    push(list, 'weak-key', {
      ...common,
      name: `${what}-forged-child-verify`,
      route: 'POST /v1/verify',
      path: '/v1/verify',
      auth: 'A.verify',
      expect_status: [403],
      body_text: json({
        bundle_version: '4.0',
        invocation: signPayload(invocationPayload([drA0, weakAud, forgedRec], KEYS.a3, `inv:sec-corpus-forged-${what}`), KEYS.a3),
        receipts: [drA0.jws, weakAud.jws, forged],
      }),
    });
    push(list, 'weak-key', {
      ...common,
      name: `${what}-forged-invocation`,
      route: 'POST /v1/verify',
      path: '/v1/verify',
      auth: 'A.verify',
      expect_status: [403],
      body_text: json({ bundle_version: '4.0', invocation: forgedInv, receipts: [drA0.jws, weakAud.jws] }),
    });
    push(list, 'weak-key', {
      ...common,
      name: `${what}-forged-revocation`,
      route: 'POST /v1/delegations/:hash/revoke',
      path: `/v1/delegations/${drLive.hash}/revoke`,
      auth: 'none',
      body_text: json({
        revocation: rawJws({
          payload: jcs(revocationPayload({ did } as Key, drLive.hash, `rev:sec-corpus-weak-${what}`)),
          signature: IDENTITY_SIGNATURE,
        }),
      }),
    });
    push(list, 'weak-key', {
      ...common,
      name: `${what}-as-issue-audience`,
      route: 'POST /v1/delegations/issue',
      path: '/v1/delegations/issue',
      auth: 'A.issue',
      body_text: json({ ...ISSUE_BASE, audience: did, jti: `dr:sec-corpus-issue-weak-${what}` }),
    });
    push(list, 'weak-key', {
      ...common,
      name: `${what}-as-trusted-root`,
      route: 'POST /v1/admin/tenants/:tenant/roots',
      path: '/v1/admin/tenants/{{tenantA}}/roots',
      auth: 'admin',
      body_text: json({ did }),
      expect_status: [400],
    });
  }
  const weakSubRoot = rootDr(KEYS.rootA, KEYS.a3.did, 'dr:sec-corpus-weak-sub', { sub: WEAK_DIDS['identity'] });
  push(list, 'weak-key', {
    name: 'identity-as-sub',
    route: 'POST /v1/delegations',
    method: 'POST',
    path: '/v1/delegations',
    auth: 'none',
    body_text: json({ receipt: weakSubRoot.jws }),
  });
  for (const [what, did] of Object.entries(NON_CANONICAL_DIDS)) {
    const dr = subDr(drA0, KEYS.a1, did, `dr:sec-corpus-noncanon-${what}`);
    push(list, 'non-canonical-did', {
      name: `${what}-as-aud`,
      route: 'POST /v1/delegations',
      method: 'POST',
      path: '/v1/delegations',
      auth: 'none',
      body_text: json({ receipt: dr.jws }),
    });
    push(list, 'non-canonical-did', {
      name: `${what}-as-trusted-root`,
      route: 'POST /v1/admin/tenants/:tenant/roots',
      method: 'POST',
      path: '/v1/admin/tenants/{{tenantA}}/roots',
      auth: 'admin',
      body_text: json({ did }),
      expect_status: [400],
    });
    push(list, 'non-canonical-did', {
      name: `${what}-as-issue-audience`,
      route: 'POST /v1/delegations/issue',
      method: 'POST',
      path: '/v1/delegations/issue',
      auth: 'A.issue',
      body_text: json({ ...ISSUE_BASE, audience: did, jti: `dr:sec-corpus-issue-nc-${what}` }),
    });
  }

  // Record-type confusion.
  const invX = invFresh('confusion');
  const confusion: [string, string, string, string, AuthRef, unknown][] = [
    ['revocation-as-dr', 'POST /v1/delegations', '/v1/delegations', 'none', 'none', { receipt: revLive.jws }],
    ['invocation-as-dr', 'POST /v1/delegations', '/v1/delegations', 'none', 'none', { receipt: invX.jws }],
    [
      'dr-as-invocation',
      'POST /v1/verify',
      '/v1/verify',
      'A.verify',
      'A.verify',
      { bundle_version: '4.0', invocation: drFresh.jws, receipts: [drA0.jws] },
    ],
    [
      'invocation-as-receipt',
      'POST /v1/verify',
      '/v1/verify',
      'A.verify',
      'A.verify',
      { bundle_version: '4.0', invocation: invX.jws, receipts: [drA0.jws, invX.jws] },
    ],
    [
      'dr-as-revocation',
      'POST /v1/delegations/:hash/revoke',
      `/v1/delegations/${drLive.hash}/revoke`,
      'none',
      'none',
      { revocation: drLive.jws },
    ],
    [
      'invocation-as-revocation',
      'POST /v1/delegations/:hash/revoke',
      `/v1/delegations/${drLive.hash}/revoke`,
      'none',
      'none',
      { revocation: invX.jws },
    ],
  ];
  for (const [what, route, path, , auth, body] of confusion) {
    push(list, 'record-confusion', { name: what, route, method: 'POST', path, auth, body_text: json(body) });
  }

  // 17-deep chains (one more than DRS allows).
  const deepKeys = Array.from({ length: 18 }, (_, i) => fixedKey(`deep-${i}`));
  const deep: Rec[] = [rootDr(KEYS.rootA, deepKeys[1]!.did, 'dr:sec-deep-0')];
  for (let i = 1; i < 17; i++)
    deep.push(
      subDr(deep[i - 1]!, deepKeys[i]!, deepKeys[i + 1]!.did, `dr:sec-deep-${i}`, {
        policy: { allowed_tools: ['web_search'], max_cost_usd: 10, max_calls: 500 - i },
      }),
    );
  const deepInv = invocation(deep, deepKeys[17]!, 'inv:sec-corpus-deep');
  push(list, 'chain-depth', {
    name: 'submit-17-deep',
    route: 'POST /v1/delegations',
    method: 'POST',
    path: '/v1/delegations',
    auth: 'none',
    body_text: json({ receipts: deep.map((d) => d.jws) }),
  });
  push(list, 'chain-depth', {
    name: 'verify-17-deep-by-value',
    route: 'POST /v1/verify',
    method: 'POST',
    path: '/v1/verify',
    auth: 'A.verify',
    expect_status: [403],
    body_text: json(bundle(deepInv, deep)),
  });
  push(list, 'chain-depth', {
    name: 'verify-17-deep-by-reference',
    route: 'POST /verify',
    method: 'POST',
    path: '/verify',
    auth: 'A.verify',
    expect_status: [403],
    body_text: json(bundle(deepInv, 'reference')),
  });
  const longChain = signPayload(
    {
      ...invocationPayload(CHAIN_A, KEYS.a2, 'inv:sec-corpus-long-chain'),
      dr_chain: Array.from({ length: 65 }, (_, i) => `sha256:${i.toString(16).padStart(64, '0')}`),
    },
    KEYS.a2,
  );
  push(list, 'chain-depth', {
    name: 'verify-dr_chain-65-hashes',
    route: 'POST /v1/verify',
    method: 'POST',
    path: '/v1/verify',
    auth: 'A.verify',
    expect_status: [403],
    body_text: json({ bundle_version: '4.0', invocation: longChain, receipts: [] }),
  });
  push(list, 'chain-depth', {
    name: 'verify-65-receipts',
    route: 'POST /v1/verify',
    method: 'POST',
    path: '/v1/verify',
    auth: 'A.verify',
    expect_status: [403],
    body_text: json({ bundle_version: '4.0', invocation: invFresh('65').jws, receipts: Array.from({ length: 65 }, () => drA0.jws) }),
  });
}

// ---------------------------------------------------------------- 8. route semantics

{
  const list = file(
    'route-semantics.json',
    'Well-formed JSON that each route must refuse: verify bundles, X-DRS-Bundle headers, revocation and actual rules, admin privilege and identity fields.',
  );
  const v = (name: string, body: unknown, extra: Partial<CaseInput> = {}, path = '/v1/verify') =>
    push(list, 'verify', { name, route: `POST ${path}`, method: 'POST', path, auth: 'A.verify', body_text: json(body), ...extra });
  const inv = (n: string) => invFresh(`sem-${n}`);
  v('bundle_version-3.0', { ...bundle(inv('v3'), CHAIN_A), bundle_version: '3.0' }, { expect_status: [403] });
  v('bundle_version-number', { ...bundle(inv('vnum'), CHAIN_A), bundle_version: 4.0 }, { expect_status: [403] });
  v('invocation-missing', { bundle_version: '4.0', receipts: CHAIN_A.map((d) => d.jws) }, { expect_status: [403] });
  v('receipts-not-array', { ...bundle(inv('rna'), CHAIN_A), receipts: drA0.jws }, { expect_status: [403] });
  v('receipts-missing', { bundle_version: '4.0', invocation: inv('rmiss').jws }, { expect_status: [403] });
  v('receipts-reordered', bundle(inv('reorder'), [drA1, drA0]), { expect_status: [403] });
  v('receipts-incomplete', bundle(inv('incomplete'), [drA0]), { expect_status: [403] });
  v('receipts-of-other-tenant', { ...bundle(inv('other'), CHAIN_A), receipts: [drB0.jws] }, { expect_status: [403] });
  v('replayed-invocation', bundle(invConsumed, CHAIN_A), { expect_status: [403] });
  v(
    'replayed-invocation-dry-run',
    bundle(invConsumed, CHAIN_A),
    { expect_status: [403], route: 'POST /v1/verify/dry-run' },
    '/v1/verify/dry-run',
  );
  v(
    'binding-required-mismatch',
    { ...bundle(inv('bind'), CHAIN_A), require_binding: true, body: { tool: 'web_search', estimated_cost_usd: 99 } },
    { expect_status: [403] },
  );
  v('binding-required-absent', { ...bundle(inv('bind2'), CHAIN_A), require_binding: true }, { expect_status: [403] });
  // A dry run is the query's to ask for: in the body it may be the agent's (a tool server forwarding its bundle).
  v('dry_run-in-body', { ...bundle(inv('dr-b'), CHAIN_A), dry_run: true }, { expect_status: [400] });
  v('dry_run-string', { ...bundle(inv('dr-s'), CHAIN_A), dry_run: 'true' }, { expect_status: [400] });
  v('dry_run-query', bundle(inv('dr-q'), CHAIN_A), { expect_status: [400], route: 'POST /v1/verify' }, '/v1/verify?dry_run=true');
  v(
    'dry_run-query-on-drs-path',
    bundle(inv('dr-drs'), 'reference'),
    { expect_status: [400], route: 'POST /verify' },
    '/verify?dry_run=true',
  );
  v('require_binding-number', { ...bundle(inv('rb-n'), CHAIN_A), require_binding: 1 }, { expect_status: [400] });
  // A number no double holds: the strict reader refuses the request (400) before any reader acts on
  // Infinity (before, a binding mismatch, 403).
  v(
    'binding-body-1e400',
    {},
    {
      expect_status: [400],
      body_text: `${json(bundle(inv('b1e'), CHAIN_A)).slice(0, -1)},"require_binding":true,"body":{"estimated_cost_usd":1e400,"pii_access":false,"tool":"web_search","write_access":false}}`,
    },
  );
  v('revoked-chain', bundle(invocation([drRevoked], KEYS.x1, 'inv:sec-corpus-revoked'), [drRevoked]), { expect_status: [403] });
  v('stale-invocation', bundle(invocation(CHAIN_A, KEYS.a2, 'inv:sec-corpus-stale', { iat: T0 - 100_000 }), CHAIN_A), {
    expect_status: [403],
  });
  v('future-invocation', bundle(invocation(CHAIN_A, KEYS.a2, 'inv:sec-corpus-future', { iat: T0 + 100_000 }), CHAIN_A), {
    expect_status: [403],
  });
  v(
    'policy-violation-tool',
    bundle(
      invocation(CHAIN_A, KEYS.a2, 'inv:sec-corpus-tool', {
        args: { tool: 'shell_exec', estimated_cost_usd: 0.5, pii_access: false, write_access: false },
      }),
      CHAIN_A,
    ),
    { expect_status: [403] },
  );
  v(
    'policy-violation-cost-missing',
    bundle(
      invocation(CHAIN_A, KEYS.a2, 'inv:sec-corpus-nocost', { args: { tool: 'web_search', pii_access: false, write_access: false } }),
      CHAIN_A,
    ),
    { expect_status: [403] },
  );
  v(
    'args-proto-tool',
    bundle(
      invocation(CHAIN_A, KEYS.a2, 'inv:sec-corpus-proto-args', {
        args: JSON.parse('{"__proto__":{"tool":"web_search","estimated_cost_usd":0.5,"pii_access":false,"write_access":false}}') as object,
      }),
      CHAIN_A,
    ),
    { expect_status: [403], note: 'Signed args whose only members hide under __proto__ must not read as present.' },
  );
  v(
    'dr-chain-by-reference-unknown',
    {
      bundle_version: '4.0',
      invocation: signPayload({ ...invocationPayload(CHAIN_A, KEYS.a2, 'inv:sec-corpus-unknown-ref'), dr_chain: [ABSENT_HASH] }, KEYS.a2),
      receipts: [],
    },
    { expect_status: [403] },
  );
  v(
    'dr-chain-other-tenant-by-reference',
    { bundle_version: '4.0', invocation: invocation([drB0], KEYS.b1, 'inv:sec-corpus-b-ref').jws, receipts: [] },
    { expect_status: [403] },
    '/verify',
  );

  // Denials are stored for auditors: what they echo from the request must be storable (no NUL, no lone surrogate).
  const echoInv = (n: string, args: Record<string, unknown>) =>
    invocation(CHAIN_A, KEYS.a2, `inv:sec-corpus-echo-${n}`, { args: { ...ARGS_BASE, ...args } });
  v('denial-echoes-nul-in-tool', bundle(echoInv('nul', { tool: 'web_search\u0000' }), CHAIN_A), { expect_status: [403] });
  v('denial-echoes-tool-cut-inside-surrogate-pair', bundle(echoInv('cut', { tool: `${'x'.repeat(255)}\u{1F600}` }), CHAIN_A), {
    expect_status: [403],
  });
  v('denial-echoes-lone-surrogate-in-tool', bundle(echoInv('lone', { tool: 'web_search\ud800' }), CHAIN_A), { expect_status: [403] });
  {
    // Non-canonical payload (an args member out of order) whose diagnostic snippet ends inside a surrogate pair.
    const payload = invocationPayload(CHAIN_A, KEYS.a2, 'inv:sec-corpus-snippet');
    const canon = jcs(payload);
    const text = canon.replace('"write_access":false}', `"write_access":false,"revocation":"${'\u{86BD6}'.repeat(12)}"}`);
    v('denial-snippet-cut-inside-surrogate-pair', bundle({ jws: rawJws({ payload: text, key: KEYS.a2 }), hash: '', payload }, CHAIN_A), {
      expect_status: [403],
    });
  }

  // X-DRS-Bundle (body without an invocation: the header carries the bundle).
  const h = (name: string, header: string | Part[], extra: Partial<CaseInput> = {}) =>
    push(list, 'x-drs-bundle', {
      name,
      route: 'POST /verify',
      method: 'POST',
      path: '/verify',
      auth: 'A.verify',
      body_text: '{}',
      ...(typeof header === 'string' ? { headers: { 'x-drs-bundle': header } } : { header_parts: { 'x-drs-bundle': header } }),
      ...extra,
    });
  const hb = (n: string) => b64u(json(bundle(invFresh(`hdr-${n}`), CHAIN_A)));
  // Base64 of ASCII JSON rarely needs '-' or '_', so put the standard alphabet's '+' and '/' in directly.
  h(
    'standard-alphabet-plus',
    (() => {
      const e = b64u(json(bundle(invFresh('hdr-plus'), CHAIN_A)));
      return `${e.slice(0, 40)}+${e.slice(41)}`;
    })(),
    { expect_status: [400] },
  );
  h(
    'standard-alphabet-slash',
    (() => {
      const e = b64u(json(bundle(invFresh('hdr-slash'), CHAIN_A)));
      return `${e.slice(0, 40)}/${e.slice(41)}`;
    })(),
    { expect_status: [400] },
  );
  h('padded', `${hb('pad')}${'='.repeat((4 - (hb('pad').length % 4)) % 4 || 2)}`, { expect_status: [400] });
  h('space-inside', `${hb('sp').slice(0, 20)} ${hb('sp').slice(20)}`, { expect_status: [400] });
  h(
    'nonzero-trailing-bits',
    (() => {
      const body = json(bundle(invFresh('hdr-tb'), CHAIN_A));
      const text = [body, `${body} `, `${body}  `].find((t) => dirtyTrailingBits(b64u(t)) !== null)!;
      return dirtyTrailingBits(b64u(text))!;
    })(),
    { expect_status: [400] },
  );
  h('not-base64', '!!!!not base64!!!!', { expect_status: [400] });
  h('empty', ' ', { expect_status: [400, 403] });
  h('invalid-utf8-json', b64u(Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d])), { expect_status: [400] });
  h(
    'duplicate-keys-json',
    b64u(`{"bundle_version":"4.0","invocation":${json(invFresh('hdr-dup').jws)},"invocation":${json(invConsumed.jws)},"receipts":[]}`),
    { expect_status: [400] },
  );
  h('bom-json', b64u(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(json(bundle(invFresh('hdr-bom'), CHAIN_A)))])), {
    expect_status: [400],
  });
  h('null-json', b64u('null'), { expect_status: [400, 403] });
  h('json-not-encoded', json(bundle(invFresh('hdr-raw'), CHAIN_A)), { expect_status: [400] });
  h('deep-json-base64url', b64u('['.repeat(5000) + ']'.repeat(5000)), { expect_status: [400] });
  h('200k-header', [{ repeat: 'A', count: 200_000 }], { expect_status: [400, 413, 431] });
  h('replayed-bundle', b64u(json(bundle(invConsumed, CHAIN_A))), { expect_status: [403] });
  h(
    'tampered-invocation',
    b64u(json(bundle({ ...invConsumed, jws: ENCODING_ATTACKS['signature-S-plus-L']!(invFresh('hdr-sl').jws)! }, CHAIN_A))),
    { expect_status: [403] },
  );

  // Revocation with a key.
  const rk = (name: string, body: unknown, extra: Partial<CaseInput> = {}) =>
    push(list, 'revoke-key', {
      name,
      route: 'POST /v1/delegations/:hash/revoke',
      method: 'POST',
      path: `/v1/delegations/${drLive.hash}/revoke`,
      auth: 'A.issue',
      body_text: json(body),
      expect_status: [400],
      ...extra,
    });
  rk('confirm-string', { confirm: 'true', reason: 'x' });
  rk('confirm-1', { confirm: 1, reason: 'x' });
  rk('confirm-false', { confirm: false, reason: 'x' });
  rk('confirm-missing', { reason: 'x' });
  rk('reason-missing', { confirm: true });
  rk('reason-blank', { confirm: true, reason: ' \t\n ' });
  rk('reason-null', { confirm: true, reason: null });
  rk('reason-501-chars', { confirm: true, reason: 'r'.repeat(501) });
  rk('reason-with-nul', { confirm: true, reason: 'compromised\u0000' });
  rk('with-revocation-too', { confirm: true, reason: 'x', revocation: revLive.jws });
  rk('other-tenants-dr', { confirm: true, reason: 'x' }, { path: `/v1/delegations/${drB0.hash}/revoke`, expect_status: [404] });
  rk('absent-dr', { confirm: true, reason: 'x' }, { path: `/v1/delegations/${ABSENT_HASH}/revoke`, expect_status: [404] });

  // Revocation by signature.
  const rs = (name: string, body: unknown, extra: Partial<CaseInput> = {}) =>
    push(list, 'revoke-signed', {
      name,
      route: 'POST /v1/delegations/:hash/revoke',
      method: 'POST',
      path: `/v1/delegations/${drLive.hash}/revoke`,
      auth: 'none',
      body_text: json(body),
      ...extra,
    });
  rs('confirm-without-key', { confirm: true, reason: 'x' }, { expect_status: [401] });
  rs('signed-by-holder', { revocation: revocation(KEYS.x2, drLive.hash, 'rev:sec-corpus-holder').jws }, { expect_status: [403] });
  // A signer with no part in the chain gets exactly the answer of an unknown hash.
  rs(
    'signed-by-stranger',
    { revocation: revocation(KEYS.stranger, drLive.hash, 'rev:sec-corpus-stranger').jws },
    { expect_status: [404], expect_code: ['NOT_FOUND'] },
  );
  rs(
    'signed-by-other-tenant-root',
    { revocation: revocation(KEYS.rootB, drLive.hash, 'rev:sec-corpus-rootb').jws },
    { expect_status: [404], expect_code: ['NOT_FOUND'] },
  );
  rs('targets-other-dr', { revocation: revocation(KEYS.rootA, drA0.hash, 'rev:sec-corpus-other').jws }, { expect_status: [400] });
  rs(
    'iat-far-future',
    { revocation: revocation(KEYS.rootA, drLive.hash, 'rev:sec-corpus-future', { iat: T0 + 100_000 }).jws },
    { expect_status: [400] },
  );
  rs('jti-without-prefix', { revocation: revocation(KEYS.rootA, drLive.hash, 'x-1').jws }, { expect_status: [400] });
  rs(
    'drs_type-delegation',
    { revocation: revocation(KEYS.rootA, drLive.hash, 'rev:sec-corpus-type', { drs_type: 'delegation-receipt' }).jws },
    { expect_status: [400] },
  );
  rs(
    'reason-blank',
    { revocation: revocation(KEYS.rootA, drLive.hash, 'rev:sec-corpus-blank', { reason: '   ' }).jws },
    { expect_status: [400] },
  );
  rs('reason-with-nul', { revocation: revocation(KEYS.rootA, drLive.hash, 'rev:sec-corpus-nul', { reason: 'x\u0000' }).jws });
  rs('extra-member', { revocation: revLive.jws, reason: 'x' }, { expect_status: [400, 401] });
  rs('revocation-not-string', { revocation: { jws: revLive.jws } }, { expect_status: [400] });
  rs(
    'absent-target',
    { revocation: revocation(KEYS.rootA, ABSENT_HASH, 'rev:sec-corpus-absent').jws },
    { path: `/v1/delegations/${ABSENT_HASH}/revoke`, expect_status: [404] },
  );

  // Actuals.
  const ac = (name: string, body: unknown, extra: Partial<CaseInput> = {}) =>
    push(list, 'actuals', {
      name,
      route: 'POST /v1/invocations/:jti/actuals',
      method: 'POST',
      path: '/v1/invocations/inv:sec-unmetered/actuals',
      auth: 'A.report',
      body_text: typeof body === 'string' ? body : json(body),
      expect_status: [400],
      ...extra,
    });
  ac('source-missing', { cost_usd: 0.1 });
  ac('source-unknown', { cost_usd: 0.1, source: 'Harness-Reported' });
  ac('unavailable-with-cost', { cost_usd: 0.1, source: 'unavailable', unavailable_reason: 'x' });
  ac('unavailable-without-reason', { source: 'unavailable' });
  ac('unavailable-reason-blank', { source: 'unavailable', unavailable_reason: '  ' });
  ac('unavailable-reason-501', { source: 'unavailable', unavailable_reason: 'r'.repeat(501) });
  ac('unavailable-reason-nul', { source: 'unavailable', unavailable_reason: 'meter down\u0000' });
  ac('reason-with-metered-source', { cost_usd: 0.1, source: 'api-usage', unavailable_reason: 'x' });
  ac('cost-null-with-metered-source', { cost_usd: null, source: 'api-usage' });
  ac('cost-string', { cost_usd: '0.10', source: 'api-usage' });
  ac('cost-1e400', '{"cost_usd":1e400,"source":"api-usage"}');
  ac('cost-negative-zero-point', { cost_usd: -0.000001, source: 'api-usage' });
  ac('tokens-2^53+1', '{"cost_usd":0.1,"source":"api-usage","tokens_in":9007199254740993}');
  ac('extra-member-tenant', { cost_usd: 0.1, source: 'api-usage', tenant_id: '{{tenantB}}' });
  ac('absent-invocation', { ...ACTUAL_BASE }, { path: `/v1/invocations/${ABSENT_JTI}/actuals`, expect_status: [404] });
  ac('other-tenants-invocation', { ...ACTUAL_BASE }, { path: '/v1/invocations/inv:sec-b/actuals', expect_status: [404] });
  ac(
    'different-actual-for-metered',
    { ...ACTUAL_BASE, cost_usd: 0.3 },
    { path: `/v1/invocations/${String(invMetered.payload['jti'])}/actuals`, expect_status: [409] },
  );

  // Admin.
  const ad = (name: string, route: string, path: string, body: unknown, extra: Partial<CaseInput> = {}) =>
    push(list, 'admin', { name, route, method: 'POST', path, auth: 'admin', body_text: json(body), expect_status: [400], ...extra });
  const T = 'POST /v1/admin/tenants';
  ad('tenant-name-empty', T, '/v1/admin/tenants', { name: '' });
  ad('tenant-name-201', T, '/v1/admin/tenants', { name: 'n'.repeat(201) });
  ad('tenant-choose-id', T, '/v1/admin/tenants', { name: 'x', id: 'ten_chosen' });
  const R = 'POST /v1/admin/tenants/:tenant/roots';
  ad('root-of-other-tenant', R, '/v1/admin/tenants/{{tenantA}}/roots', { did: KEYS.rootB.did }, { expect_status: [409] });
  ad('root-label-201', R, '/v1/admin/tenants/{{tenantA}}/roots', { did: KEYS.newRoot.did, label: 'l'.repeat(201) });
  ad(
    'root-unknown-tenant',
    R,
    '/v1/admin/tenants/ten_00000000000000000000000000000000/roots',
    { did: KEYS.newRoot.did },
    { expect_status: [404] },
  );
  ad('root-tenant-with-nul', R, '/v1/admin/tenants/{{tenantA}}%00/roots', { did: KEYS.newRoot.did }, { expect_status: [400, 404] });
  const K = 'POST /v1/admin/tenants/:tenant/api-keys';
  const kp = '/v1/admin/tenants/{{tenantA}}/api-keys';
  ad('key-scope-admin', K, kp, { scopes: ['admin'] });
  ad('key-scope-admin-mixed', K, kp, { scopes: ['verify', 'admin'] });
  ad('key-scopes-empty', K, kp, { scopes: [] });
  ad('key-scopes-repeated', K, kp, { scopes: ['verify', 'verify'] });
  ad('key-scope-uppercase', K, kp, { scopes: ['VERIFY'] });
  ad('key-scopes-string', K, kp, { scopes: 'verify' });
  ad('key-tool-server-without-verify', K, kp, { scopes: ['audit'], tool_server: TOOL_SERVER });
  ad('key-tool-server-padded', K, kp, { scopes: ['verify'], tool_server: ` ${TOOL_SERVER}` });
  ad('key-tool-server-513', K, kp, { scopes: ['verify'], tool_server: `mcp://${'t'.repeat(507)}` });
  ad('key-choose-secret', K, kp, { scopes: ['verify'], key: `bt_${'A'.repeat(43)}` });
  ad('key-choose-tenant', K, kp, { scopes: ['verify'], tenant_id: '{{tenantB}}' });
  ad(
    'key-unknown-tenant',
    K,
    '/v1/admin/tenants/ten_00000000000000000000000000000000/api-keys',
    { scopes: ['verify'] },
    { expect_status: [404] },
  );
}

// ---------------------------------------------------------------- 9. paths and queries

interface GetRoute {
  readonly route: string;
  readonly method: string;
  readonly template: (param: string) => string;
  readonly auth: AuthRef;
}

{
  const list = file(
    'paths-and-queries.json',
    'GET and DELETE routes with hostile path parameters (wrong hash formats, NUL, traversal, invalid UTF-8, 100 KB) and hostile query strings (ranges, repeats, unknown names, forged cursors).',
  );
  const H = drA0.hash;
  const hashRoutes: GetRoute[] = [
    { route: 'GET /v1/delegations/:hash', method: 'GET', template: (x) => `/v1/delegations/${x}`, auth: 'A.all' },
    { route: 'GET /v1/delegations/:hash/chain', method: 'GET', template: (x) => `/v1/delegations/${x}/chain`, auth: 'A.all' },
    { route: 'GET /v1/delegations/:hash/tree', method: 'GET', template: (x) => `/v1/delegations/${x}/tree`, auth: 'A.all' },
    { route: 'GET /v1/delegations/:hash/invocations', method: 'GET', template: (x) => `/v1/delegations/${x}/invocations`, auth: 'A.all' },
    { route: 'POST /v1/delegations/:hash/revoke', method: 'POST', template: (x) => `/v1/delegations/${x}/revoke`, auth: 'A.issue' },
  ];
  const badHashes: Record<string, string> = {
    uppercase: H.toUpperCase(),
    'uppercase-hex': `sha256:${H.slice(7).toUpperCase()}`,
    '63-hex': H.slice(0, -1),
    '65-hex': `${H}0`,
    'non-hex': `sha256:${'g'.repeat(64)}`,
    sha512: `sha512:${H.slice(7)}`,
    'no-prefix': H.slice(7),
    'nul-appended': `${H}%00`,
    'nul-only': '%00',
    'traversal-encoded': '..%2F..%2Fv1%2Fadmin%2Ftenants',
    'dot-dot': '..',
    'invalid-utf8': '%C0%AF',
    'lone-percent': `${H}%`,
    'arabic-digits': `sha256:${'\u0661'.repeat(64)}`,
    'fullwidth-prefix': `ｓha256:${H.slice(7)}`,
    'sql-quote': `sha256:${H.slice(7, 40)}'--`,
    'absent-well-formed': ABSENT_HASH,
    'other-tenants-hash': drB0.hash,
  };
  for (const r of hashRoutes) {
    for (const [what, x] of Object.entries(badHashes)) {
      // The client resolves /v1/delegations/../invocations to GET /v1/invocations, a real route: no hostile path reaches the server.
      if (what === 'dot-dot' && r.route === 'GET /v1/delegations/:hash/invocations') continue;
      const absent = what === 'absent-well-formed' || what === 'other-tenants-hash';
      push(list, r.route.replace(/^\w+ /, ''), {
        name: `hash-${what}`,
        route: r.route,
        method: r.method,
        path: r.template(encodeURI(x).replace(/%25/g, '%')),
        auth: r.auth,
        ...(r.method === 'POST' ? { body_text: json({ confirm: true, reason: 'paths' }) } : {}),
        ...(absent ? { expect_status: [404] } : {}),
      });
    }
    push(list, r.route.replace(/^\w+ /, ''), {
      name: 'hash-100k',
      route: r.route,
      method: r.method,
      path: r.template('sha256:{{repeat:a:100000}}'),
      auth: r.auth,
      ...(r.method === 'POST' ? { body_text: json({ confirm: true, reason: 'paths' }) } : {}),
    });
  }

  const invQ = (q: string) => `/v1/delegations/${H}/invocations?${q}`;
  const forged = (v: unknown) => b64u(json(v));
  for (const [what, q] of Object.entries({
    'limit-0': 'limit=0',
    'limit-201': 'limit=201',
    'limit-negative': 'limit=-1',
    'limit-exponent': 'limit=1e2',
    'limit-leading-zero': 'limit=01',
    'limit-text': 'limit=abc',
    'limit-repeated': 'limit=1&limit=2',
    'limit-2^53+1': 'limit=9007199254740993',
    'limit-empty': 'limit=',
    'cursor-not-base64': 'cursor=!!!',
    'cursor-513': `cursor=${'A'.repeat(513)}`,
    'cursor-empty': 'cursor=',
    'cursor-bad-time': `cursor=${forged(['yesterday', 'inv:x'])}`,
    'cursor-jti-with-space': `cursor=${forged(['2026-01-01T00:00:00.000000Z', 'inv: x'])}`,
    'cursor-object': `cursor=${forged({ createdAt: '2026-01-01T00:00:00.000000Z', jti: 'inv:x' })}`,
    'cursor-padded': `cursor=${forged(['2026-01-01T00:00:00.000000Z', 'inv:x'])}==`,
    'cursor-repeated': `cursor=${forged(['2026-01-01T00:00:00.000000Z', 'inv:x'])}&cursor=x`,
    // Shaped like a cursor but no real instant: PostgreSQL would reject (or roll over) each.
    'cursor-feb-30': `cursor=${forged(['2026-02-30T00:00:00.000000Z', 'inv:x'])}`,
    'cursor-feb-29-common-year': `cursor=${forged(['2025-02-29T00:00:00.000000Z', 'inv:x'])}`,
    'cursor-all-zero-date': `cursor=${forged(['0000-00-00T00:00:00.000000Z', 'inv:x'])}`,
    'cursor-year-zero': `cursor=${forged(['0000-01-01T00:00:00.000000Z', 'inv:x'])}`,
    'cursor-month-13': `cursor=${forged(['2026-13-01T00:00:00.000000Z', 'inv:x'])}`,
    'cursor-hour-24': `cursor=${forged(['2026-01-01T24:00:00.000000Z', 'inv:x'])}`,
    'cursor-leap-second': `cursor=${forged(['2026-01-01T23:59:60.000000Z', 'inv:x'])}`,
    'unknown-parameter': 'tenant={{tenantB}}',
    'proto-parameter': '__proto__=x',
    'nul-parameter': 'limit=1%00',
  })) {
    push(list, 'delegation-invocations-query', {
      name: what,
      route: 'GET /v1/delegations/:hash/invocations',
      method: 'GET',
      path: invQ(q),
      auth: 'A.audit',
      expect_status: [400],
      expect_code: ['INVALID_REQUEST'],
    });
  }
  // GET /v1/invocations: the decision list's filters, alone, contradictory and forged.
  for (const [what, q] of Object.entries({
    'dr-uppercase': `dr=${H.toUpperCase()}`,
    'dr-no-prefix': `dr=${H.slice(7)}`,
    'dr-repeated': `dr=${H}&dr=${H}`,
    'dr-nul': `dr=${H}%00`,
    'tool-empty': 'tool=',
    'tool-257': `tool=${'t'.repeat(257)}`,
    'tool-control': 'tool=a%01b',
    'outcome-unknown': 'outcome=maybe',
    'outcome-uppercase': 'outcome=ALLOWED',
    'code-unknown': 'code=NOT_A_CODE',
    'code-lowercase': 'code=replay_detected',
    'code-with-allowed': 'code=REPLAY_DETECTED&outcome=allowed',
    'tool-with-denied': 'tool=search&outcome=denied',
    'tool-with-code': 'tool=search&code=REPLAY_DETECTED',
    'since-no-zone': 'since=2026-01-01T00:00:00',
    'since-date-only': 'since=2026-01-01',
    'since-unix': 'since=1800000000',
    'since-feb-30': 'since=2026-02-30T00:00:00Z',
    'until-before-since': 'since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z',
    'until-equals-since': 'since=2026-01-01T00:00:00Z&until=2026-01-01T00:00:00Z',
    'cursor-delegation-list-shape': `cursor=${forged(['2026-01-01T00:00:00.000000Z', 'inv:x'])}`,
    'cursor-unknown-source': `cursor=${forged(['2026-01-01T00:00:00.000000Z', 'x', 'inv:x'])}`,
    'cursor-short-denial-id': `cursor=${forged(['2026-01-01T00:00:00.000000Z', 'd', '12'])}`,
    'cursor-denial-id-sql': `cursor=${forged(['2026-01-01T00:00:00.000000Z', 'd', "0000000000000000001'"])}`,
    'cursor-feb-30': `cursor=${forged(['2026-02-30T00:00:00.000000Z', 'a', 'inv:x'])}`,
    'limit-0': 'limit=0',
    'limit-201': 'limit=201',
    'unknown-parameter': 'tenant={{tenantB}}',
    'proto-parameter': '__proto__=x',
  })) {
    push(list, 'decision-list-query', {
      name: what,
      route: 'GET /v1/invocations',
      method: 'GET',
      path: `/v1/invocations?${q}`,
      auth: 'A.audit',
      expect_status: [400],
      expect_code: ['INVALID_REQUEST'],
    });
  }
  for (const [what, q] of Object.entries({
    'after-negative': 'after=-1',
    'after-leading-zero': 'after=01',
    'after-exponent': 'after=1e3',
    'after-16-digits': 'after=9999999999999999',
    'after-hex': 'after=0x10',
    'after-text': 'after=abc',
    'after-repeated': 'after=1&after=2',
    'after-empty': 'after=',
    'after-plus': 'after=%2B1',
    'limit-0': 'limit=0',
    'limit-501': 'limit=501',
    'limit-fraction': 'limit=1.5',
    'unknown-parameter': 'tenant_id={{tenantB}}',
    'proto-parameter': '__proto__=1',
    'constructor-parameter': 'constructor=1',
    'nul-in-value': 'after=1%00',
    'kind-unknown': 'kind=invocation.maybe',
    'kind-repeated': 'kind=invocation.allowed&kind=actual.recorded',
    'subject-empty': 'subject=',
    'subject-space': 'subject=inv%20x',
    'since-no-zone': 'since=2026-01-01T00:00:00',
    'until-before-since': 'since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z',
  })) {
    push(list, 'service-receipts-query', {
      name: what,
      route: 'GET /v1/service-receipts',
      method: 'GET',
      path: `/v1/service-receipts?${q}`,
      auth: 'A.audit',
      expect_status: [400],
    });
  }

  // Transparency log: tile paths have one canonical spelling; sizes and ranges are decimal.
  for (const [what, path] of Object.entries({
    'tile-short-index': '/v1/log/tile/0/0',
    'tile-leading-zero-level': '/v1/log/tile/00/000',
    'tile-width-0': '/v1/log/tile/0/000.p/0',
    'tile-width-256': '/v1/log/tile/0/000.p/256',
    'tile-x-last-group': '/v1/log/tile/0/x000',
    'tile-traversal': '/v1/log/tile/..%2F..%2Fetc',
    'tile-unknown-kind': '/v1/log/tile/leaves/000',
    'tile-negative-level': '/v1/log/tile/-1/000',
  })) {
    push(list, 'log-tile', { name: what, route: 'GET /v1/log/tile/:path{.+}', method: 'GET', path, auth: 'A.audit', expect_status: [400] });
  }
  for (const [what, q] of Object.entries({
    'from-0': 'from=0&to=1',
    'from-after-to': 'from=2&to=1',
    'missing-to': 'from=1',
    exponent: 'from=1e1&to=1e2',
    repeated: 'from=1&from=1&to=1',
    'unknown-parameter': 'from=1&to=1&tenant_id={{tenantB}}',
  })) {
    push(list, 'log-consistency', {
      name: what,
      route: 'GET /v1/log/consistency',
      method: 'GET',
      path: `/v1/log/consistency?${q}`,
      auth: 'A.audit',
      expect_status: [400],
    });
  }

  const jtis: Record<string, string> = {
    nul: 'inv:x%00',
    space: 'inv:%20x',
    '161-chars': `inv:${'a'.repeat(157)}`,
    'rtl-override': 'inv:%E2%80%AEx',
    'invalid-utf8': 'inv:%FF',
    'control-char': 'inv:%1B%5B2J',
    traversal: '..%2Factuals',
    absent: ABSENT_JTI,
    'other-tenants': 'inv:sec-b',
    '100k': 'inv:{{repeat:a:100000}}',
  };
  for (const [what, j] of Object.entries(jtis)) {
    const notFound = what === 'absent' || what === 'other-tenants';
    push(list, 'invocation-jti', {
      name: `get-${what}`,
      route: 'GET /v1/invocations/:jti',
      method: 'GET',
      path: `/v1/invocations/${j}`,
      auth: 'A.audit',
      ...(notFound ? { expect_status: [404] } : {}),
    });
    push(list, 'invocation-jti', {
      name: `actuals-${what}`,
      route: 'POST /v1/invocations/:jti/actuals',
      method: 'POST',
      path: `/v1/invocations/${j}/actuals`,
      auth: 'A.report',
      body_text: json(ACTUAL_BASE),
      ...(notFound ? { expect_status: [404] } : {}),
    });
  }

  const tenants: Record<string, string> = {
    nul: '%00',
    'nul-appended': '{{tenantA}}%00',
    'invalid-utf8': '%C0%AF',
    '10k': 'ten_{{repeat:a:10000}}',
    traversal: '..%2F..',
    'sql-quote': "ten_x'--",
    absent: 'ten_00000000000000000000000000000000',
    'lone-percent': 'ten_%',
  };
  for (const [what, t] of Object.entries(tenants)) {
    for (const [route, sub] of [
      ['GET /v1/admin/tenants/:tenant/roots', 'roots'],
      ['GET /v1/admin/tenants/:tenant/api-keys', 'api-keys'],
    ] as const) {
      push(list, 'admin-tenant-param', {
        name: `${sub}-${what}`,
        route,
        method: 'GET',
        path: `/v1/admin/tenants/${t}/${sub}`,
        auth: 'admin',
      });
    }
    push(list, 'admin-tenant-param', {
      name: `add-root-${what}`,
      route: 'POST /v1/admin/tenants/:tenant/roots',
      method: 'POST',
      path: `/v1/admin/tenants/${t}/roots`,
      auth: 'admin',
      body_text: json({ did: KEYS.newRoot.did }),
    });
    push(list, 'admin-tenant-param', {
      name: `add-key-${what}`,
      route: 'POST /v1/admin/tenants/:tenant/api-keys',
      method: 'POST',
      path: `/v1/admin/tenants/${t}/api-keys`,
      auth: 'admin',
      body_text: json({ scopes: ['audit'] }),
    });
    push(list, 'admin-tenant-param', {
      name: `delete-root-${what}`,
      route: 'DELETE /v1/admin/tenants/:tenant/roots/:did',
      method: 'DELETE',
      path: `/v1/admin/tenants/${t}/roots/${KEYS.rootA.did}`,
      auth: 'admin',
    });
  }
  for (const [what, d] of Object.entries({
    nul: `${KEYS.rootA.did}%00`,
    'only-nul': '%00',
    'not-trusted': KEYS.stranger.did,
    removed: KEYS.rootOld.did,
    'other-tenants-root': KEYS.rootB.did,
    '10k': 'did:key:z{{repeat:a:10000}}',
    'invalid-utf8': '%FF',
    traversal: '..%2F..%2Fapi-keys',
  })) {
    push(list, 'admin-did-param', {
      name: `delete-root-${what}`,
      route: 'DELETE /v1/admin/tenants/:tenant/roots/:did',
      method: 'DELETE',
      path: `/v1/admin/tenants/{{tenantA}}/roots/${d}`,
      auth: 'admin',
    });
  }
  for (const [what, id] of Object.entries({
    nul: '%00',
    'nul-appended': '{{revokedKeyId}}%00',
    '10k': 'key_{{repeat:a:10000}}',
    'invalid-utf8': '%C0%AF',
    absent: 'key_00000000000000000000000000000000',
    'sql-quote': "key_'--",
  })) {
    push(list, 'admin-key-param', {
      name: `delete-key-${what}`,
      route: 'DELETE /v1/admin/api-keys/:id',
      method: 'DELETE',
      path: `/v1/admin/api-keys/${id}`,
      auth: 'admin',
    });
    push(list, 'admin-key-param', {
      name: `rotate-key-${what}`,
      route: 'POST /v1/admin/api-keys/:id/rotate',
      method: 'POST',
      path: `/v1/admin/api-keys/${id}/rotate`,
      auth: 'admin',
    });
  }
  // Rotation: a revoked key has nothing to keep alive (409); bad bodies are refused before any lookup.
  for (const [what, body] of Object.entries({
    revoked: '{"grace_seconds":60}',
    'grace-negative': '{"grace_seconds":-1}',
    'grace-31-days': '{"grace_seconds":2678400}',
    'grace-fraction': '{"grace_seconds":1.5}',
    'grace-string': '{"grace_seconds":"60"}',
    'lifetime-zero': '{"expires_in_seconds":0}',
    'unknown-field': '{"grace":60}',
    'not-an-object': '[]',
  })) {
    push(list, 'admin-key-rotate', {
      name: `rotate-${what}`,
      route: 'POST /v1/admin/api-keys/:id/rotate',
      method: 'POST',
      path: '/v1/admin/api-keys/{{revokedKeyId}}/rotate',
      auth: 'admin',
      body_text: body,
      expect_status: [what === 'revoked' ? 409 : 400],
    });
  }
}

// ---------------------------------------------------------------- 10. methods and transport

/** Every route with a path that reaches it and the key it needs. */
export const ROUTE_SAMPLES: readonly { readonly route: string; readonly path: string; readonly auth: AuthRef }[] = [
  { route: 'GET /healthz', path: '/healthz', auth: 'none' },
  { route: 'GET /readyz', path: '/readyz', auth: 'none' },
  { route: 'GET /metrics', path: '/metrics', auth: 'admin' },
  { route: 'GET /v1/keys', path: '/v1/keys', auth: 'none' },
  { route: 'GET /.well-known/jwks.json', path: '/.well-known/jwks.json', auth: 'none' },
  { route: 'GET /openapi.yaml', path: '/openapi.yaml', auth: 'none' },
  { route: 'GET /openapi.json', path: '/openapi.json', auth: 'none' },
  { route: 'GET /docs', path: '/docs', auth: 'none' },
  { route: 'POST /v1/admin/tenants', path: '/v1/admin/tenants', auth: 'admin' },
  { route: 'GET /v1/admin/tenants', path: '/v1/admin/tenants', auth: 'admin' },
  { route: 'POST /v1/admin/tenants/:tenant/roots', path: '/v1/admin/tenants/{{tenantA}}/roots', auth: 'admin' },
  { route: 'GET /v1/admin/tenants/:tenant/roots', path: '/v1/admin/tenants/{{tenantA}}/roots', auth: 'admin' },
  { route: 'DELETE /v1/admin/tenants/:tenant/roots/:did', path: `/v1/admin/tenants/{{tenantA}}/roots/${KEYS.rootA.did}`, auth: 'admin' },
  { route: 'POST /v1/admin/tenants/:tenant/api-keys', path: '/v1/admin/tenants/{{tenantA}}/api-keys', auth: 'admin' },
  { route: 'GET /v1/admin/tenants/:tenant/api-keys', path: '/v1/admin/tenants/{{tenantA}}/api-keys', auth: 'admin' },
  { route: 'DELETE /v1/admin/api-keys/:id', path: '/v1/admin/api-keys/{{revokedKeyId}}', auth: 'admin' },
  { route: 'POST /v1/admin/api-keys/:id/rotate', path: '/v1/admin/api-keys/{{revokedKeyId}}/rotate', auth: 'admin' },
  { route: 'POST /v1/delegations', path: '/v1/delegations', auth: 'A.issue' },
  { route: 'POST /v1/delegations/issue', path: '/v1/delegations/issue', auth: 'A.issue' },
  { route: 'GET /v1/delegations/:hash', path: `/v1/delegations/${drA0.hash}`, auth: 'A.all' },
  { route: 'GET /v1/delegations/:hash/chain', path: `/v1/delegations/${drA0.hash}/chain`, auth: 'A.all' },
  { route: 'GET /v1/delegations/:hash/tree', path: `/v1/delegations/${drA0.hash}/tree`, auth: 'A.all' },
  { route: 'GET /v1/delegations/:hash/invocations', path: `/v1/delegations/${drA0.hash}/invocations`, auth: 'A.all' },
  { route: 'POST /v1/delegations/:hash/revoke', path: `/v1/delegations/${drLive.hash}/revoke`, auth: 'A.issue' },
  { route: 'POST /v1/verify', path: '/v1/verify', auth: 'A.verify' },
  { route: 'POST /verify', path: '/verify', auth: 'A.verify' },
  { route: 'POST /v1/invocations/:jti/actuals', path: '/v1/invocations/inv:sec-unmetered/actuals', auth: 'A.report' },
  { route: 'GET /v1/invocations/:jti', path: '/v1/invocations/inv:sec-consumed', auth: 'A.all' },
  { route: 'GET /v1/service-receipts', path: '/v1/service-receipts', auth: 'A.audit' },
  { route: 'GET /v1/log', path: '/v1/log', auth: 'A.audit' },
  { route: 'GET /v1/log/checkpoint', path: '/v1/log/checkpoint', auth: 'A.audit' },
  { route: 'GET /v1/log/checkpoints/:size', path: '/v1/log/checkpoints/1', auth: 'A.audit' },
  { route: 'GET /v1/log/tile/:path{.+}', path: '/v1/log/tile/0/000', auth: 'A.audit' },
  { route: 'GET /v1/log/service-receipts/:id/proof', path: '/v1/log/service-receipts/1/proof', auth: 'A.audit' },
  { route: 'GET /v1/log/consistency', path: '/v1/log/consistency', auth: 'A.audit' },
  { route: 'POST /v1/log/cosignatures', path: '/v1/log/cosignatures', auth: 'A.audit' },
  { route: 'POST /v1/admin/tenants/:tenant/tools', path: '/v1/admin/tenants/{{tenantA}}/tools', auth: 'admin' },
  { route: 'GET /v1/admin/tenants/:tenant/tools', path: '/v1/admin/tenants/{{tenantA}}/tools', auth: 'admin' },
  { route: 'GET /v1/tools', path: '/v1/tools', auth: 'A.audit' },
  { route: 'GET /v1/tools/versions/:version', path: '/v1/tools/versions/1', auth: 'A.audit' },
  { route: 'GET /v1/approvals', path: '/v1/approvals', auth: 'A.approve' },
  { route: 'GET /v1/approvals/:id', path: '/v1/approvals/{{approvalA}}', auth: 'A.approve' },
  { route: 'POST /v1/approvals/:id/approve', path: '/v1/approvals/{{approvalA}}/approve', auth: 'A.approve' },
  { route: 'POST /v1/approvals/:id/reject', path: '/v1/approvals/{{approvalA}}/reject', auth: 'A.approve' },
  { route: 'GET /v1/grants', path: '/v1/grants', auth: 'A.approve' },
  { route: 'POST /v1/grants/:hash/approve', path: `/v1/grants/${drHeld.hash}/approve`, auth: 'A.approve' },
  { route: 'POST /v1/grants/:hash/reject', path: `/v1/grants/${drHeld.hash}/reject`, auth: 'A.approve' },
  { route: 'POST /v1/explain', path: '/v1/explain', auth: 'A.verify' },
];

{
  const list = file(
    'methods-and-transport.json',
    'Unrouted methods on every route path (404 in the envelope), HEAD on POST routes, GET with a body over a real socket.',
  );
  const byPath = new Map<string, { methods: Set<string>; routes: string[]; auth: AuthRef }>();
  for (const s of ROUTE_SAMPLES) {
    const [method] = s.route.split(' ') as [string];
    const e = byPath.get(s.path) ?? { methods: new Set<string>(), routes: [], auth: s.auth };
    e.methods.add(method);
    e.routes.push(s.route);
    byPath.set(s.path, e);
  }
  for (const [path, e] of byPath) {
    let k = 0;
    for (const m of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
      if (e.methods.has(m)) continue;
      // GET /v1/delegations/issue is GET /v1/delegations/:hash with an invalid hash: 400, also a refusal.
      const withBody = m === 'POST' || m === 'PUT' || m === 'PATCH';
      push(list, 'wrong-method', {
        name: `${m} ${path}`,
        route: e.routes[k++ % e.routes.length]!,
        method: m,
        path,
        auth: e.auth,
        ...(withBody ? { body_text: '{}' } : {}),
        ...(path === '/v1/delegations/issue' || path === '/v1/delegations' ? {} : { expect_status: [404, 405] }),
      });
    }
    if (!e.methods.has('GET')) {
      push(list, 'wrong-method', {
        name: `HEAD ${path}`,
        route: e.routes[0]!,
        method: 'HEAD',
        path,
        auth: e.auth,
        ...(path === '/v1/delegations/issue' ? {} : { expect_status: [404, 405] }),
      });
    }
  }
  push(list, 'get-with-body', {
    name: 'GET /v1/verify with a verify body',
    route: 'POST /v1/verify',
    method: 'GET',
    path: '/v1/verify',
    auth: 'A.verify',
    expect_status: [404, 405],
    raw_http: {
      lines: ['Content-Type: application/json', `Content-Length: ${Buffer.byteLength(json(bundle(invFresh('get-body'), CHAIN_A)))}`],
      body_text: json(bundle(invFresh('get-body'), CHAIN_A)),
    },
  });
  push(list, 'get-with-body', {
    name: 'GET /v1/delegations/:hash without a key, key in the body',
    route: 'GET /v1/delegations/:hash',
    method: 'GET',
    path: `/v1/delegations/${drA0.hash}`,
    auth: 'none',
    expect_status: [401],
    raw_http: {
      lines: ['Content-Type: application/json', 'Content-Length: {{bodyLength}}'],
      body_text: '{"authorization":"Bearer {{key:A.all}}"}',
    },
  });
  push(list, 'get-with-body', {
    name: 'GET /v1/service-receipts without a key, chunked body',
    route: 'GET /v1/service-receipts',
    method: 'GET',
    path: '/v1/service-receipts',
    auth: 'none',
    expect_status: [401],
    raw_http: { lines: ['Transfer-Encoding: chunked'], body_text: '5\r\nhello\r\n0\r\n\r\n' },
  });
  push(list, 'get-with-body', {
    name: 'DELETE /v1/admin/api-keys/:id with a tenant key, admin key in the body',
    route: 'DELETE /v1/admin/api-keys/:id',
    method: 'DELETE',
    path: '/v1/admin/api-keys/{{revokedKeyId}}',
    auth: 'A.all',
    // The route takes no body: refused as such (400) before the key is read, so never by the body's key.
    expect_status: [400],
    raw_http: { lines: ['Content-Type: application/json', 'Content-Length: 2'], body_text: '{}' },
  });
}

// ---------------------------------------------------------------- 11. headers

{
  const list = file(
    'headers.json',
    'Hostile request headers: request ids that must not be echoed, oversized and doubled Authorization headers.',
  );
  const bad = {
    route: 'POST /v1/admin/tenants',
    method: 'POST',
    path: '/v1/admin/tenants',
    auth: 'admin' as AuthRef,
    body_text: '{',
    expect_status: [400],
  };
  push(list, 'request-id', { ...bad, name: 'request-id-65-chars', headers: { 'x-request-id': 'a'.repeat(65) } });
  push(list, 'request-id', { ...bad, name: 'request-id-markup', headers: { 'x-request-id': '<script>alert(1)</script>' } });
  push(list, 'request-id', { ...bad, name: 'request-id-json-breaking', headers: { 'x-request-id': '","admin":true,"x":"' } });
  push(list, 'request-id', { ...bad, name: 'request-id-latin1', headers: { 'x-request-id': 'caf\u00e9' } });
  push(list, 'request-id', { ...bad, name: 'request-id-10k', headers: { 'x-request-id': 'a'.repeat(10_000) } });
  const auth = (name: string, value: string | Part[], route = 'GET /v1/service-receipts', path = '/v1/service-receipts', method = 'GET') =>
    push(list, 'authorization', {
      name,
      route,
      method,
      path,
      auth: 'none',
      expect_status: [401],
      ...(typeof value === 'string' ? { headers: { authorization: value } } : { header_parts: { authorization: value } }),
    });
  auth('bearer-100k', [{ text: 'Bearer bt_' }, { repeat: 'A', count: 100_000 }]);
  auth('two-bearer-tokens', 'Bearer {{key:A.audit}}, Bearer {{key:A.audit}}');
  auth('bearer-with-tab', 'Bearer\t{{key:A.audit}}');
  auth('basic-with-key', 'Basic {{key:A.audit}}');
  auth('key-without-scheme', '{{key:A.audit}}');
  auth('key-latin1-suffix', 'Bearer {{key:A.audit}}\u00e9');
  auth('admin-key-prefix', 'Bearer bt_admin_{{key:A.audit}}');
  auth('sql-in-key', "Bearer bt_' OR '1'='1");
  auth('revoked-key-verify', 'Bearer {{key:A.revoked}}', 'POST /v1/verify', '/v1/verify', 'POST');
}

// ---------------------------------------------------------------- output

export function buildCorpus(): Map<string, CorpusFile> {
  return files;
}

/** One case per line: compact, and a diff shows which cases changed. */
export const corpusText = (f: CorpusFile): string =>
  `{"description": ${JSON.stringify(f.description)},\n "cases": [\n${f.cases.map((c) => `  ${JSON.stringify(c)}`).join(',\n')}\n]}\n`;

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  mkdirSync(CORPUS_DIR, { recursive: true });
  let total = 0;
  for (const [name, f] of files) {
    writeFileSync(join(CORPUS_DIR, name), corpusText(f));
    total += f.cases.length;
    console.log(`${name}: ${f.cases.length} cases`);
  }
  console.log(`${total} cases`);
}
