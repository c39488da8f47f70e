/**
 * What baton prints of a service's answers: every field stays on its own line, so a hostile server
 * (or a proxy) cannot print lines that read as baton's own.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordHash } from '../../src/protocol/hash.js';
import { generateKeyPair, keyPairToFile } from '../../src/sdk/keys.js';
import { createInvocation, createRootDelegation, makeBundle } from '../../src/sdk/records.js';
import { answeringServer, run, tempDir, type AskedRequest } from './helpers.js';

/** A value that, printed raw, would start lines of its own. */
const FORGED = '\n\nFORGED: this line is the server’s';
const forgedLine = /^FORGED:/m;

/** A stored record as the service echoes it, for a JWS sent. */
function echoed(jws: string, depth: number) {
  return {
    hash: recordHash(jws),
    jws,
    iss: 'did:key:z6MkIssuer',
    aud: 'did:key:z6MkAudience',
    sub: 'sub',
    cmd: '/mcp/tools/call',
    policy: {},
    nbf: 0,
    exp: null,
    parent_hash: null,
    depth,
    status: `active${FORGED}`,
    service_receipt: null,
  };
}

/** The jti an invocation JWS names: the client checks the allow is of the call it sent. */
const jtiOf = (jws: string): string => (JSON.parse(Buffer.from(jws.split('.')[1]!, 'base64url').toString('utf8')) as { jti: string }).jti;

function hostileAnswer({ method, path, body }: AskedRequest): { status: number; json: unknown } {
  if (method === 'POST' && path === '/v1/delegations') {
    const sent = (body as { receipts?: string[]; receipt?: string }).receipts ?? [(body as { receipt: string }).receipt];
    return { status: 201, json: { created: true, tenant_id: `ten_x${FORGED}`, delegations: sent.map((jws, i) => echoed(jws, i)) } };
  }
  if (path.startsWith('/v1/verify'))
    return {
      status: 200,
      json: {
        valid: true,
        invocation_id: jtiOf((body as { invocation: string }).invocation),
        dry_run: true,
        retry: false,
        counters: [{ dr: `sha256:00${FORGED}`, calls_used: 0, max_calls: 1 }],
        warnings: [],
        context: {
          tool: 'search',
          tool_server: 'mcp://search',
          invoker: 'did:key:z6MkInvoker',
          root_principal: 'did:key:z6MkRoot',
          chain_depth: 1,
          leaf_policy: {},
        },
        request_id: `req_1${FORGED}`,
      },
    };
  const apiKey = { id: `key_1${FORGED}`, scopes: ['verify'], tenant_id: `ten_x${FORGED}`, tool_server: null };
  const created = { ...apiKey, key: `bt_secret${FORGED}`, expires_at: `2030-01-01${FORGED}` };
  if (path.endsWith('/api-keys')) return { status: 201, json: created };
  if (path.endsWith('/rotate')) return { status: 200, json: { key: created, previous: { ...apiKey, expires_at: `2030-01-02${FORGED}` } } };
  if (path.startsWith('/v1/tools'))
    return {
      status: 200,
      json: {
        version: 1,
        strict: false,
        default_decision: `allow${FORGED}`,
        rules: [],
        approvers: [],
        webhook_url: null,
        tools: [],
        hash: `sha256:ab${FORGED}`,
        catalog_hash: 'sha256:ab',
      },
    };
  if (path.startsWith('/v1/invocations'))
    return {
      status: 200,
      json: {
        invocations: [
          { decision: 'denied', code: `DENIED${FORGED}`, jti: `inv:x${FORGED}`, dr_chain: [], created_at: '2026-01-01T00:00:00Z' },
        ],
        next_cursor: `c1${FORGED}`,
      },
    };
  return { status: 404, json: { error: { code: 'NOT_FOUND', message: 'no such route' } } };
}

/** A bundle file of one call through a fresh root (a hostile server judges it, not the records). */
function writeCallBundle(name: string): void {
  const root = createRootDelegation({ issuer: generateKeyPair(), audience: generateKeyPair().did, policy: { allowed_tools: ['search'] } });
  const inv = createInvocation({ chain: [root], invoker: generateKeyPair(), args: { tool: 'search' }, toolServer: 'mcp://search' });
  writeFileSync(join(dir, name), JSON.stringify(makeBundle(inv, [root], 'value')));
}

let server: Awaited<ReturnType<typeof answeringServer>>;
let dir: string;
beforeAll(async () => {
  server = await answeringServer(hostileAnswer);
  dir = tempDir();
});
afterAll(async () => {
  await server?.close();
});

describe("a service answer's text stays on its line", () => {
  const S = () => ['--server', server.url, '--api-key', 'bt_some_key'];
  const issuer = generateKeyPair();
  const root = createRootDelegation({ issuer, audience: generateKeyPair().did, policy: { allowed_tools: ['search'] } });

  it.each([
    ['submit', () => ['submit', join(dir, 'root.jws')]],
    ['delegate --submit', () => ['delegate', '--key', join(dir, 'issuer.json'), '--to', generateKeyPair().did, '--tools', 'x', '--submit']],
    ['check', () => ['check', join(dir, 'bundle.json')]],
    ['keys create', () => ['keys', 'create', '--tenant', 'ten_x', '--scopes', 'verify']],
    ['keys rotate', () => ['keys', 'rotate', 'key_1']],
    ['tools show', () => ['tools', 'show']],
    ['invocations', () => ['invocations']],
  ])('%s', async (what, argv) => {
    writeFileSync(join(dir, 'root.jws'), root.jws);
    writeFileSync(join(dir, 'issuer.json'), JSON.stringify(keyPairToFile(issuer)));
    const inv = createInvocation({ chain: [root], invoker: generateKeyPair(), args: { tool: 'search' }, toolServer: 'mcp://search' });
    writeFileSync(join(dir, 'bundle.json'), JSON.stringify(makeBundle(inv, [root], 'value')));
    const r = await run([...argv(), ...S()]);
    expect(r.code, r.out + r.err).toBe(0);
    // A cursor is printed only as it is, to be pasted back: one holding control characters is pointed past.
    if (what === 'invocations') expect(r.err).toContain("more: the next page's cursor (37 characters) cannot be printed as it is");
    expect(`${r.out}${r.err}`).toContain('\\u000a\\u000aFORGED: this line');
    expect(r.out).not.toMatch(forgedLine);
    expect(r.err).not.toMatch(forgedLine);
  });
});

describe("a refusal's text is printed at a length a terminal can show", () => {
  it('a huge message is cut on its line, and unmet conditions past 50 are counted, not printed', async () => {
    const huge = 'A'.repeat(5_000_000);
    const violations = Array.from({ length: 500 }, (_, i) => ({ code: 'POLICY_VIOLATION', field: `f${i}`, message: 'x'.repeat(100) }));
    const refusing = await answeringServer(() => ({
      status: 403,
      json: { error: { code: 'FORBIDDEN', message: huge, suggestion: `do ${huge}`, details: { violations } }, request_id: huge },
    }));
    try {
      const r = await run(['chain', `sha256:${'a'.repeat(64)}`, '--server', refusing.url, '--api-key', 'bt_some_key']);
      expect(r.code).toBe(1);
      const text = r.out + r.err;
      expect(text).toMatch(/^REFUSED: .*FORBIDDEN \[HTTP 403\]$/m);
      expect(text).toMatch(/^ {2}A{3998}\.\.\. \(4996002 more characters\)$/m);
      expect(text).toMatch(/^ {2}50\. POLICY_VIOLATION, f49\n.*\n {2}\(and 450 more\)$/m);
      expect(text.length).toBeLessThan(100_000);
    } finally {
      await refusing.close();
    }
  });

  it("baton check's denial is cut the same way: its message on its line, unmet conditions past 50 counted", async () => {
    const huge = 'B'.repeat(1_000_000);
    const violations = Array.from({ length: 5_000 }, (_, i) => ({ code: 'POLICY_VIOLATION', field: `f${i}`, message: 'y'.repeat(100) }));
    const denying = await answeringServer(({ path }) =>
      path === '/v1/verify/dry-run'
        ? { status: 403, json: { valid: false, error: { code: 'POLICY_VIOLATION', message: huge, suggestion: `do ${huge}` }, violations } }
        : { status: 404, json: { error: { code: 'NOT_FOUND', message: 'no such route' } } },
    );
    writeCallBundle('denied.json');
    try {
      const r = await run(['check', join(dir, 'denied.json'), '--server', denying.url, '--api-key', 'bt_some_key']);
      expect(r.code, r.err).toBe(1);
      const text = r.out + r.err;
      expect(text).toMatch(/^WOULD BE DENIED: POLICY_VIOLATION/m);
      expect(text).toMatch(/^ {2}B{3998}\.\.\. \(996002 more characters\)$/m);
      expect(text).toMatch(/^ {2}- do B{3993}\.\.\. \(996007 more characters\)$/m);
      expect(text).toMatch(/^ {2}50\. POLICY_VIOLATION at invocation, f49\n.*\n {2}\(and 4950 more\)$/m);
      expect(text).not.toMatch(/ 51\. POLICY_VIOLATION/);
      expect(text.length).toBeLessThan(100_000);
    } finally {
      await denying.close();
    }
  });

  it("baton check prints a denial whose codes this client does not know: the service's own advice, exit 1", async () => {
    const denying = await answeringServer(({ path }) =>
      path === '/v1/verify/dry-run'
        ? {
            status: 403,
            json: {
              valid: false,
              error: { code: 'A_NEWER_CODE', message: 'refused for a reason from a newer service', suggestion: 'upgrade the client' },
              violations: [{ code: 'A_NEWER_CODE', field: 'args', message: 'new' }],
            },
          }
        : { status: 404, json: { error: { code: 'NOT_FOUND', message: 'no such route' } } },
    );
    writeCallBundle('newer.json');
    try {
      const r = await run(['check', join(dir, 'newer.json'), '--server', denying.url, '--api-key', 'bt_some_key']);
      expect(r.code, r.out + r.err).toBe(1);
      expect(r.out + r.err).toMatch(/^WOULD BE DENIED: A_NEWER_CODE/m);
      expect(r.out + r.err).toContain('  - upgrade the client');
    } finally {
      await denying.close();
    }
  });

  it("baton check's allow and baton invocations' lines are cut too", async () => {
    const huge = 'C'.repeat(500_000);
    const counters = Array.from({ length: 2_000 }, (_, i) => ({ dr: `sha256:${i}`, calls_used: 0, max_calls: 1 }));
    const hostile = await answeringServer(({ path, body }) => {
      if (path === '/v1/verify/dry-run')
        return {
          status: 200,
          json: {
            valid: true,
            invocation_id: jtiOf((body as { invocation: string }).invocation),
            dry_run: true,
            retry: false,
            counters,
            warnings: [{ code: 'NEAR_LIMIT', message: huge }],
            context: {
              tool: huge,
              tool_server: 'mcp://search',
              invoker: 'did:key:z6MkI',
              root_principal: 'did:key:z6MkR',
              chain_depth: 1,
              leaf_policy: {},
            },
          },
        };
      if (path.startsWith('/v1/invocations'))
        return {
          status: 200,
          json: {
            invocations: [{ decision: 'denied', code: huge, jti: 'inv:x', dr_chain: [], created_at: '2026-01-01T00:00:00Z' }],
            next_cursor: huge,
          },
        };
      return { status: 404, json: { error: { code: 'NOT_FOUND', message: 'no such route' } } };
    });
    writeCallBundle('allowed.json');
    try {
      const allowed = await run(['check', join(dir, 'allowed.json'), '--server', hostile.url, '--api-key', 'bt_some_key']);
      expect(allowed.code, allowed.err).toBe(0);
      expect(allowed.out).toMatch(/^WOULD BE ALLOWED: tool "C{3970,}\.\.\. \(\d+ more characters\)$/m);
      expect(allowed.out).toMatch(/^ {2}\(and 1950 more\)$/m);
      expect(allowed.out.length).toBeLessThan(100_000);
      const listed = await run(['invocations', '--server', hostile.url, '--api-key', 'bt_some_key']);
      expect(listed.code, listed.err).toBe(0);
      expect(listed.out).toMatch(/DENIED {3}C+\.\.\. \(\d+ more characters\)$/m);
      expect(listed.out.length).toBeLessThan(10_000);
      // A cursor is of use only whole: pointed past, not printed.
      expect(listed.err).toContain(
        "more: the next page's cursor (500000 characters) cannot be printed as it is: use --all, or --json to read it",
      );
      expect(listed.err.length).toBeLessThan(10_000);
      // A duration back past any calendar date is a usage error, not a crash.
      const far = await run(['invocations', '--since', '200000000d', '--server', hostile.url, '--api-key', 'bt_some_key']);
      expect(far.code).toBe(2);
      expect(far.err).toContain('--since 200000000d reaches back before the year 1');
      // Nor one the service would refuse: before the year 1, or year 0000 as written.
      for (const since of ['800000d', '0000-06-01T00:00:00Z', '2026-02-30T00:00:00Z', '2026-01-01T24:00:00Z', '2026-01-01t00:00:00z']) {
        const refused = await run(['invocations', '--since', since, '--server', hostile.url, '--api-key', 'bt_some_key']);
        expect(refused.code, since).toBe(2);
      }
    } finally {
      await hostile.close();
    }
  });
});
