/** The SDK where native Ed25519 is missing: @noble/ed25519 signs records the real service accepts. */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultEd25519Backend } from '../../src/protocol/ed25519.js';
import { createRootDelegation } from '../../src/sdk/records.js';
import { startLiveService, type LiveService } from './live-service.js';

let live: LiveService;
beforeAll(async () => {
  live = await startLiveService();
});
afterAll(async () => {
  await live?.close();
});

function runChild(args: string[]): Promise<string> {
  const script = fileURLToPath(new URL('./noble-child.ts', import.meta.url));
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx/esm', script, ...args], { timeout: 60_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${error.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

describe('SDK on @noble/ed25519', () => {
  it('keys, records, client and service receipts work, and signatures equal the native ones byte for byte', async () => {
    const out = JSON.parse(await runChild([live.baseUrl, Buffer.from(live.tenant.root.seed).toString('hex'), live.tenant.keys.verify]));
    expect(out).toMatchObject({ backend: 'noble', offline: true, online: true, serviceReceiptValid: true });
    expect(defaultEd25519Backend).toBe('native'); // this process, for the comparison
    const native = createRootDelegation({ issuer: live.tenant.root, audience: out.aDid, policy: {}, iat: 1_800_000_000, jti: 'dr:fixed' });
    expect(out.fixedJws).toBe(native.jws);
  }, 90_000);
});
