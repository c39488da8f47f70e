/**
 * Service receipt ids are drawn from a block of CSPRNG output refilled every
 * 256 ids (one call per block, not per service receipt). Every id must still
 * be fresh: no two service receipts share an id across block boundaries.
 */
import { describe, expect, it } from 'vitest';
import { signServiceReceipt } from '../../src/service/service-receipts.js';
import type { ServiceSigner } from '../../src/service/signer.js';

/** Returns the payload it was asked to sign, as JSON: enough to read the jti back. */
const echoSigner: ServiceSigner = {
  kid: 'svc_test',
  did: 'did:key:zTest',
  publicKey: new Uint8Array(32),
  sign: (payload) => JSON.stringify(payload),
  noteSigner: () => {
    throw new Error('not used');
  },
};

describe('service receipt ids', () => {
  it('are 128-bit hex and never repeat across refills of the random block', () => {
    const ids = Array.from({ length: 1000 }, (_, i) => {
      const signed = signServiceReceipt(echoSigner, { tenantId: 't', kind: 'invocation.allowed', subject: `inv:${i}`, data: {}, now: 1 });
      return (JSON.parse(signed.jws) as { jti: string }).jti;
    });
    for (const id of ids) expect(id).toMatch(/^rcpt:[0-9a-f]{32}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });
});
