/** `baton verify`: exit codes, --json shape, readable output; in-process and through the real bin. */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { main } from '../../src/cli/main.js';
import { encodeBase64url } from '../../src/protocol/base64url.js';
import { utf8Encode } from '../../src/protocol/jcs.js';
import { buildChain, T0 } from '../support/fixtures.js';

const fixture = JSON.parse(readFileSync(new URL('../vectors/drs-conformance/receipts/full-chain-bundle.json', import.meta.url), 'utf8'));
const ALICE = fixture.keys.alice.did as string;
const dir = mkdtempSync(join(tmpdir(), 'baton-cli-'));

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

  it('--help explains usage and exit codes', async () => {
    const r = await run(['verify', '--help']);
    expect(r.code).toBe(0);
    expect(r.out).toContain('Exit codes: 0 allowed, 1 denied, 2 unusable input');
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
