/** `baton keygen`: the key file, its mode, refusing to overwrite, --json. */
import { chmodSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { keyPairFromFile } from '../../src/sdk/keys.js';
import { run, runBin, tempDir } from './helpers.js';

const mode = (file: string) => statSync(file).mode & 0o777;

describe('baton keygen', () => {
  it('writes {did, seed_hex} with mode 0600 and prints only the DID', async () => {
    const file = join(tempDir(), 'agent.json');
    const r = await run(['keygen', '--out', file]);
    expect(r.code).toBe(0);
    const did = r.out.trim();
    expect(did).toMatch(/^did:key:z6Mk[1-9A-HJ-NP-Za-km-z]+$/);
    const json = JSON.parse(readFileSync(file, 'utf8'));
    expect(Object.keys(json).sort()).toEqual(['did', 'seed_hex']);
    expect(json.did).toBe(did);
    expect(keyPairFromFile(json).did).toBe(did); // the seed belongs to the DID
    // Its path (or its text) is not the file: the error says what to pass instead.
    expect(() => keyPairFromFile(file)).toThrow(/parsed JSON, not its path.*JSON\.parse\(readFileSync/);
    expect(mode(file)).toBe(0o600);
    expect(r.out).not.toContain(json.seed_hex);
    expect(r.err).toContain('0600');
  });

  it('refuses to overwrite an existing file (exit 2, file untouched); --force replaces it, still 0600', async () => {
    const dir = tempDir();
    const file = join(dir, 'k.json');
    writeFileSync(file, 'precious');
    chmodSync(file, 0o644);
    const refused = await run(['keygen', '--out', file]);
    expect(refused.code).toBe(2);
    expect(refused.err).toMatch(/already exists.*--force/);
    expect(readFileSync(file, 'utf8')).toBe('precious');

    const forced = await run(['keygen', '--out', file, '--force']);
    expect(forced.code).toBe(0);
    expect(JSON.parse(readFileSync(file, 'utf8')).did).toBe(forced.out.trim());
    expect(mode(file)).toBe(0o600);
    expect(readdirSync(dir)).toEqual(['k.json']); // no temporary file left behind
  });

  it('--json prints {did, file}', async () => {
    const file = join(tempDir(), 'j.json');
    const r = await run(['keygen', '-o', file, '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.out)).toEqual({ did: JSON.parse(readFileSync(file, 'utf8')).did, file });
  });

  it('exit 2 without --out, with a stray argument, or an unwritable place', async () => {
    const none = await run(['keygen']);
    expect(none.code).toBe(2);
    expect(none.err).toContain('--out');
    expect(none.err).toContain('Usage: baton keygen');
    expect((await run(['keygen', 'extra', '--out', join(tempDir(), 'x.json')])).code).toBe(2);
    const missingDir = join(tempDir(), 'no', 'such', 'dir', 'k.json');
    const r = await run(['keygen', '--out', missingDir]);
    expect(r.code).toBe(2);
    expect(existsSync(missingDir)).toBe(false);
  });

  it('--out - is refused: the seed is never printed, nor written to a file named "-" (through the real bin)', async () => {
    const cwd = tempDir();
    const r = await runBin(['keygen', '--out', '-'], {}, 60_000, cwd);
    expect(r.code).toBe(2);
    expect(r.err).toContain('baton keygen: --out - would print the secret seed; give a file path');
    expect(r.out).toBe('');
    expect(readdirSync(cwd)).toEqual([]);
  }, 60_000);

  it('--help explains the key file and exit codes', async () => {
    const r = await run(['keygen', '--help']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/0600/);
    expect(r.out).toMatch(/Exit codes/);
  });
});
