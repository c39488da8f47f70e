/** `baton verify`: exit codes, --json shape, readable output; in-process and through the real bin. */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { explainDecision } from '../../src/cli/verify.js';
import { encodeBase64url } from '../../src/protocol/base64url.js';
import { utf8Encode } from '../../src/protocol/jcs.js';
import { buildChain, T0 } from '../support/fixtures.js';
import { scratchFolders } from '../support/scratch.js';

const fixture = JSON.parse(readFileSync(new URL('../vectors/drs-conformance/receipts/full-chain-bundle.json', import.meta.url), 'utf8'));
const ALICE = fixture.keys.alice.did as string;
const dir = scratchFolders('baton-cli-')();

async function run(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(argv, { out: (t) => (out += `${t}\n`), err: (t) => (err += `${t}\n`) });
  return { code, out, err };
}

describe('baton verify', () => {
  const fixtureFile = join(dir, 'full-chain.json');
  writeFileSync(fixtureFile, JSON.stringify(fixture)); // the DRS fixture file itself, bundle under "bundle"

  it('denies the DRS full-chain fixture with exit 1 and names both missing fields', async () => {
    const r = await run(['verify', fixtureFile, '--trust', ALICE, '--at', '1700000010']);
    expect(r.code).toBe(1);
    expect(r.out).toContain('DENIED: POLICY_VIOLATION');
    expect(r.out).toContain('args.pii_access');
    expect(r.out).toContain('args.write_access');
    expect(r.out).toContain('What to do');
  });

  it('--json prints valid, error.code, error.block and violations', async () => {
    const r = await run(['verify', fixtureFile, '--trust', ALICE, '--at', '1700000010', '--json']);
    const decision = JSON.parse(r.out);
    expect(decision.valid).toBe(false);
    expect(decision.error).toMatchObject({ code: 'POLICY_VIOLATION', block: 'D' });
    expect(decision.violations).toHaveLength(4);
  });

  it('allows a valid chain with exit 0, also from the X-DRS-Bundle base64url form', async () => {
    const chain = buildChain([{ allowed_tools: ['web_search'], max_cost_usd: 1 }]);
    const file = join(dir, 'ok.b64');
    writeFileSync(file, encodeBase64url(utf8Encode(JSON.stringify(chain.invoke().bundle))));
    const r = await run(['verify', file, '--trust', chain.keys[0]!.did, '--at', String(T0 + 5), '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toMatchObject({ valid: true, context: { chain_depth: 1, tool: 'web_search' } });
    // Read by a person, an offline allow says what only the service checks.
    const text = await run(['verify', file, '--trust', chain.keys[0]!.did, '--at', String(T0 + 5)]);
    expect(text.code).toBe(0);
    expect(text.out).toMatch(/^ALLOWED/);
    expect(text.out).toMatch(/offline: .*not revocation, max_calls, replay or tool rules.*baton check/);
  });

  it('a time violation shows its unix seconds with the UTC time they mean', async () => {
    const chain = buildChain([{ allowed_tools: ['web_search'] }], { exp: T0 + 60 });
    const file = join(dir, 'expired.json');
    writeFileSync(file, JSON.stringify(chain.invoke().bundle));
    const r = await run(['verify', file, '--trust', chain.keys[0]!.did, '--at', String(T0 + 120)]);
    expect(r.code).toBe(1);
    const utc = (t: number) => new Date(t * 1000).toISOString().replace('.000Z', 'Z');
    expect(r.out).toContain(
      `RECEIPT_EXPIRED at receipts[0], exp: required >= ${T0 + 120} (${utc(T0 + 120)}), got ${T0 + 60} (${utc(T0 + 60)})`,
    );
  });

  it('a file with no invocation is unusable input (exit 2) unless --chain-only asks for the chain alone', async () => {
    // A denied call, then the same bundle with its invocation deleted: that must not read as allowed.
    const chain = buildChain([{ allowed_tools: ['web_search'] }]);
    const root = chain.keys[0]!.did;
    const at = String(T0 + 5);
    const denied = join(dir, 'denied.json');
    const bundle = chain.invoke({ tool: 'delete_db', pii_access: false, write_access: false }).bundle;
    writeFileSync(denied, JSON.stringify(bundle));
    expect((await run(['verify', denied, '--trust', root, '--at', at])).code).toBe(1);
    const { invocation: _, ...rest } = bundle;
    const stripped = join(dir, 'stripped.json');
    writeFileSync(stripped, JSON.stringify(rest));
    const r = await run(['verify', stripped, '--trust', root, '--at', at]);
    expect(r.code, r.out).toBe(2);
    expect(r.out).toBe('');
    expect(r.err).toContain('carries no invocation');
    expect(r.err).toContain('baton invoke');
    expect(r.err).toContain('--chain-only');
    // Nor in a DRS fixture wrapper, nor on an empty object.
    const wrapped = join(dir, 'wrapped.json');
    writeFileSync(wrapped, JSON.stringify({ bundle: rest }));
    expect((await run(['verify', wrapped, '--trust', root, '--at', at])).code).toBe(2);
    const empty = join(dir, 'empty.json');
    writeFileSync(empty, '{}');
    expect((await run(['verify', empty, '--trust', root, '--at', at])).code).toBe(2);
    // A file that is not there is said as every command says it, not as the system error.
    const missing = await run(['verify', join(dir, 'nonexistent.json'), '--trust', root, '--at', at]);
    expect(missing.code).toBe(2);
    expect(missing.err).toContain(`cannot read bundle file ${join(dir, 'nonexistent.json')}: no such file`);

    // Asked for, the chain alone verifies: exit 0 for a valid chain, 1 for an untrusted root.
    const ok = await run(['verify', stripped, '--chain-only', '--trust', root, '--at', at, '--json']);
    expect(ok.code, ok.err).toBe(0);
    expect(JSON.parse(ok.out)).toEqual({ valid: true, chain_depth: 1, leaf_hash: chain.drs[0]!.hash });
    expect((await run(['verify', stripped, '--chain-only', '--trust', root, '--at', at])).out).toMatch(/offline: .*not revocation/);
    expect((await run(['verify', stripped, '--chain-only', '--trust', ALICE, '--at', at])).code).toBe(1);
  });

  it('a JSON file that is not a bundle at all is unusable input (exit 2) saying what a bundle looks like', async () => {
    const chain = buildChain([{ allowed_tools: ['web_search'] }]);
    const root = chain.keys[0]!.did;
    const keyFile = join(dir, 'operator.key');
    expect((await run(['keygen', '--out', keyFile])).code).toBe(0);
    const notBundles: [string, string][] = [
      ['junk.json', '{"x":1}'],
      ['fixture-of-nothing.json', '{"bundle":5}'],
      ['fixture-of-null.json', '{"bundle":null}'],
      ['receipts-not-a-list.json', '{"receipts":"x"}'],
      ['array.b64', encodeBase64url(utf8Encode('[1,2]'))],
      ['string.b64', encodeBase64url(utf8Encode('"bundle"'))],
    ];
    const files = [keyFile, ...notBundles.map(([name, text]) => (writeFileSync(join(dir, name), text), join(dir, name)))];
    for (const file of files) {
      const r = await run(['verify', file, '--trust', root, '--at', String(T0 + 5)]);
      expect(r.code, `${file}: ${r.out}`).toBe(2);
      expect(r.out).toBe('');
      expect(r.err).toContain(`${file} is not a DRS bundle`);
      expect(r.err).toContain('{"bundle_version": "4.0", "invocation": "<JWS>", "receipts": ["<JWS>", ...]}');
      expect(r.err).not.toMatch(/DENIED|--chain-only/);
    }
    expect((await run(['verify', keyFile, '--trust', root])).err).toMatch(/its members: "did", "seed_hex"/);
    expect((await run(['verify', join(dir, 'array.b64'), '--trust', root])).err).toMatch(/it is a JSON array/);
  });

  it('an object that carries an invocation is judged: malformed or untrusted, it is denied (exit 1), without "(absent)"', async () => {
    // As POST /v1/verify answers it: a malformed bundle is a block A denial (403), not a 400.
    const malformed = join(dir, 'malformed.json');
    writeFileSync(malformed, JSON.stringify({ invocation: 5 }));
    const r = await run(['verify', malformed, '--trust', ALICE]);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/^DENIED: INVALID_FIELD \(block A\)/);
    expect(r.out).toMatch(/1\. INVALID_FIELD at invocation, bundle: got \{/);
    expect(r.out).not.toContain('(absent)');
    // A real bundle under a root the verifier does not trust.
    const chain = buildChain([{ allowed_tools: ['web_search'] }]);
    const file = join(dir, 'untrusted.json');
    writeFileSync(file, JSON.stringify(chain.invoke().bundle));
    const untrusted = await run(['verify', file, '--trust', ALICE, '--at', String(T0 + 5)]);
    expect(untrusted.code).toBe(1);
    expect(untrusted.out).toContain('UNTRUSTED_ROOT');
    expect(untrusted.out).not.toContain('(absent)');
    // Offline, trust is the --trust flag's: what to do says so, not "ask the operator".
    expect(untrusted.out).toMatch(/pass it with --trust <did>; offline, no tenant decides trust/);
    expect(untrusted.out).not.toMatch(/operator/);
  });

  it('--chain-only refuses a file that carries an invocation (exit 2), so it never hides a denial', async () => {
    const chain = buildChain([{ allowed_tools: ['web_search'] }]);
    const denied = join(dir, 'denied-chain-only.json');
    writeFileSync(denied, JSON.stringify(chain.invoke({ tool: 'delete_db', pii_access: false, write_access: false }).bundle));
    const r = await run(['verify', denied, '--chain-only', '--trust', chain.keys[0]!.did, '--at', String(T0 + 5)]);
    expect(r.code).toBe(2);
    expect(r.err).toContain('carries an invocation');
    expect(r.err).toContain('Drop --chain-only');
    const notChain = join(dir, 'not-chain.json');
    writeFileSync(notChain, JSON.stringify({ receipts: 'x' }));
    expect((await run(['verify', notChain, '--chain-only', '--trust', ALICE])).code).toBe(2);
    const maxAge = await run(['verify', notChain, '--chain-only', '--trust', ALICE, '--max-age', '60']);
    expect(maxAge.code).toBe(2);
    expect(maxAge.err).toContain('--max-age');
  });

  it('--chain-only prints the leaf hash, refuses a file whose hash or records[].hash say another chain, and --leaf pins the leaf', async () => {
    const chain = buildChain([{ allowed_tools: ['web_search'] }, { allowed_tools: ['web_search'] }]);
    const [root, child] = chain.drs as [(typeof chain.drs)[number], (typeof chain.drs)[number]];
    const trust = ['--trust', chain.keys[0]!.did, '--at', String(T0 + 5)];
    const write = (name: string, value: unknown) => {
      const file = join(dir, name);
      writeFileSync(file, JSON.stringify(value));
      return file;
    };
    // As GET /v1/delegations/{hash}/chain answers: each receipt beside its decoded record.
    const served = (receipts: (typeof chain.drs)[number][]) => ({
      hash: receipts[receipts.length - 1]!.hash,
      root_principal: receipts[0]!.payload.iss,
      receipts: receipts.map((r) => r.jws),
      records: receipts.map((r, depth) => ({
        hash: r.hash,
        jws: r.jws,
        jti: r.payload.jti,
        iss: r.payload.iss,
        sub: r.payload.sub,
        aud: r.payload.aud,
        cmd: r.payload.cmd,
        policy: r.payload.policy,
        nbf: r.payload.nbf,
        exp: r.payload.exp ?? null,
        iat: r.payload.iat,
        parent_hash: r.payload.prev_dr_hash ?? null,
        depth,
        root_hash: receipts[0]!.hash,
      })),
    });
    const whole = write('whole-chain.json', served([root, child]));
    const ok = await run(['verify', whole, '--chain-only', ...trust]);
    expect(ok.code, ok.out + ok.err).toBe(0);
    expect(ok.out).toContain(`  leaf         ${child.hash}`);
    // Its records are what a reader takes for the policies: one that says other than its receipt signs is refused, as getChain refuses it.
    const wider = served([root, child]);
    wider.records[1]!.policy = { ...wider.records[1]!.policy, max_calls: 50 };
    const edited = await run(['verify', write('edited-records.json', wider), '--chain-only', ...trust]);
    expect(edited.code, edited.out + edited.err).toBe(1);
    expect(edited.out).toContain('NOT THAT CHAIN: records[1].policy is not what receipts[1] signs');
    expect(edited.out).not.toMatch(/VALID CHAIN/);
    // A bare chain beside records that leave out hash and root_principal claims nothing of those two.
    const { hash: _h, root_principal: _p, ...unlabelled } = served([root, child]);
    expect((await run(['verify', write('unlabelled-chain.json', unlabelled), '--chain-only', ...trust])).code).toBe(0);

    // Labelled as the child's chain, holding only the root's: valid on its own, but not the chain it says.
    const relabelled = write('relabelled-chain.json', { ...served([root]), hash: child.hash });
    const r = await run(['verify', relabelled, '--chain-only', ...trust]);
    expect(r.code, r.out + r.err).toBe(1);
    expect(r.out).toContain(`NOT THAT CHAIN: it says it is the chain of "${child.hash}", but its receipts end at ${root.hash}`);
    expect(r.out).not.toMatch(/VALID CHAIN/);
    const json = await run(['verify', relabelled, '--chain-only', ...trust, '--json']);
    expect(json.code).toBe(1);
    // An error as every invalid answer carries one, beside what the mismatch is.
    expect(JSON.parse(json.out)).toMatchObject({
      valid: false,
      leaf_hash: root.hash,
      error: { code: 'DR_CHAIN_MISMATCH', message: expect.stringContaining(`it says it is the chain of "${child.hash}"`) as unknown },
      violations: [],
    });
    const records = write('records-chain.json', { ...served([root]), records: [{ hash: child.hash, jws: root.jws }] });
    const rec = await run(['verify', records, '--chain-only', ...trust]);
    expect(rec.code).toBe(1);
    expect(rec.out).toContain(`records[0] says another record than receipts[0], which hashes to ${root.hash}`);

    // A bare chain says nothing of itself: --leaf says which record it must end at.
    const bare = write('bare-chain.json', { receipts: [root.jws] });
    expect((await run(['verify', bare, '--chain-only', ...trust, '--leaf', root.hash])).code).toBe(0);
    const other = await run(['verify', bare, '--chain-only', ...trust, '--leaf', child.hash]);
    expect(other.code).toBe(1);
    expect(other.out).toContain(`its receipts end at ${root.hash}, not at --leaf ${child.hash}`);
    expect((await run(['verify', bare, '--chain-only', ...trust, '--leaf', 'sha256:12'])).code).toBe(2);
    expect((await run(['verify', fixtureFile, ...trust, '--leaf', root.hash])).err).toContain('--leaf goes with --chain-only');
    // No receipts at all is no chain: unusable input, not a denial of some invocation.
    const empty = await run(['verify', write('empty-chain.json', { receipts: [] }), '--chain-only', ...trust]);
    expect(empty.code, empty.out + empty.err).toBe(2);
    expect(empty.err).toContain('empty-chain.json holds no receipts: a delegation chain has at least its root record');
  });

  it("explainDecision keeps each of the service's fields on its line (baton check prints its decision with it)", () => {
    const text = explainDecision({
      valid: false,
      error: { code: 'POLICY_VIOLATION', message: 'Denied.\nALLOWED: tool "search" (a line the service wrote)' },
      violations: [{ code: 'POLICY_VIOLATION', field: 'args.tool', message: 'no\n  - a fake suggestion' }],
    } as unknown as Parameters<typeof explainDecision>[0]);
    expect(text).toContain('  Denied.\\u000aALLOWED: tool "search" (a line the service wrote)');
    expect(text).not.toMatch(/^ALLOWED/m);
    expect(text).not.toMatch(/^ *- a fake suggestion/m);
  });

  it('exit 2 for unusable input: missing file, not JSON, no --trust, bad --at', async () => {
    expect((await run(['verify', join(dir, 'missing.json'), '--trust', ALICE])).code).toBe(2);
    const junk = join(dir, 'junk.txt');
    writeFileSync(junk, '{not json');
    expect((await run(['verify', junk, '--trust', ALICE])).code).toBe(2);
    const noTrust = await run(['verify', fixtureFile]);
    expect(noTrust.code).toBe(2);
    expect(noTrust.err).toContain('--trust');
    expect((await run(['verify', fixtureFile, '--trust', ALICE, '--at', 'yesterday'])).code).toBe(2);
    expect((await run(['verify', fixtureFile, '--bogus'])).code).toBe(2);
    // A mistyped root is a bad flag, not a verdict on the bundle (it read DENIED: UNTRUSTED_ROOT, exit 1).
    for (const bad of ['notadid', `${ALICE}x`, 'did:web:example.com']) {
      const r = await run(['verify', fixtureFile, '--trust', ALICE, '--trust', bad]);
      expect(r.code, r.err).toBe(2);
      expect(r.err).toContain(`--trust ${JSON.stringify(bad)} is not an Ed25519 did:key`);
    }
  });

  it('a bundle file with a key repeated in one object is unusable input (exit 2): another reader would judge the other value', async () => {
    const chain = buildChain([{ allowed_tools: ['web_search'], max_cost_usd: 1 }]);
    const denied = chain.invoke({ tool: 'file_write', estimated_cost_usd: 0.01, pii_access: false, write_access: false }).bundle;
    const allowed = chain.invoke().bundle;
    // JSON.parse keeps the last invocation, the allowed one.
    const text = `{"bundle_version":"4.0","invocation":${JSON.stringify(denied.invocation)},"invocation":${JSON.stringify(allowed.invocation)},"receipts":${JSON.stringify(allowed.receipts)}}`;
    const file = join(dir, 'dup.json');
    writeFileSync(file, text);
    const b64 = join(dir, 'dup.b64');
    writeFileSync(b64, encodeBase64url(utf8Encode(text)));
    for (const f of [file, b64]) {
      const r = await run(['verify', f, '--trust', chain.keys[0]!.did, '--at', String(T0 + 5)]);
      expect(r.code, r.out).toBe(2);
      expect(r.err).toContain('repeats the key "invocation" in one object');
      expect(r.out).not.toContain('ALLOWED');
    }
  });

  it('a bundle by reference, verified offline: says the records must travel in it, or to ask the service', async () => {
    const chain = buildChain([{ allowed_tools: ['web_search'], max_cost_usd: 1 }]);
    const byReference = { ...chain.invoke().bundle, receipts: [] };
    const file = join(dir, 'by-reference.json');
    writeFileSync(file, JSON.stringify(byReference));
    const r = await run(['verify', file, '--trust', chain.keys[0]!.did, '--at', String(T0 + 5)]);
    expect(r.code).toBe(1);
    expect(r.out).toContain('BUNDLE_INCOMPLETE');
    expect(r.out).toContain('baton invoke without --by-reference');
    expect(r.out).not.toContain('submit them to Baton beforehand');
  });

  it("the service's own advice for a refusal replaces its code's, as for a call held behind a pending grant", async () => {
    const { explainDecision } = await import('../../src/cli/verify.js');
    const { explainRefusal } = await import('../../src/cli/common.js');
    const { BatonError, ERROR_TABLE } = await import('../../src/protocol/errors.js');
    const violations = [
      { code: 'APPROVAL_REQUIRED' as const, field: 'rules[1]', message: 'No approval is requested while grant sha256:ab is pending.' },
      { code: 'GRANT_PENDING_APPROVAL' as const, field: 'status', dr_index: 0 },
    ];
    const given = ERROR_TABLE.GRANT_PENDING_APPROVAL.suggestion;
    const shown = explainDecision({
      valid: false,
      error: { code: 'APPROVAL_REQUIRED', block: 'D', message: 'held', suggestion: given },
      violations,
    });
    expect(shown).toContain(given);
    expect(shown).not.toContain(ERROR_TABLE.APPROVAL_REQUIRED.suggestion);
    const refused = explainRefusal(new BatonError('APPROVAL_REQUIRED', { message: 'held', suggestion: given, violations }), 'baton check');
    expect(refused).toContain(given);
    expect(refused).not.toContain(ERROR_TABLE.APPROVAL_REQUIRED.suggestion);
  });

  it('--help explains usage and exit codes', async () => {
    const r = await run(['verify', '--help']);
    expect(r.code).toBe(0);
    expect(r.out).toContain('Exit codes: 0 allowed (with --chain-only: chain valid), 1 denied,\n2 unusable input');
    expect(r.out).toContain('--chain-only');
  });

  it('works through the installed bin (npx baton) with the same exit codes', async () => {
    const bin = new URL('../../bin/baton.mjs', import.meta.url).pathname;
    const result = await promisify(execFile)(process.execPath, [
      bin,
      'verify',
      fixtureFile,
      '--trust',
      ALICE,
      '--at',
      '1700000010',
      '--json',
    ]).catch((e) => e);
    expect(result.code).toBe(1);
    expect(JSON.parse(result.stdout).error.code).toBe('POLICY_VIOLATION');
  });
});
