/**
 * What a signed delegation's policy means to a DRS verifier (drs-verify) as well as to Baton: a
 * record Baton signs is checked by both, and must never grant more to one of them.
 */
import { describe, expect, it } from 'vitest';
import { generateKeyPair } from '../../src/sdk/keys.js';
import { createRootDelegation, createSubDelegation } from '../../src/sdk/records.js';
import { batonErrorOf } from '../support/errors.js';

const operator = generateKeyPair();
const agent = generateKeyPair();
const child = generateKeyPair();

describe('signing a delegation', () => {
  it('signs absent PII and write access as false, which drs-verify otherwise reads as no restriction', () => {
    const root = createRootDelegation({ issuer: operator, audience: agent.did, policy: { allowed_tools: ['web_search'], max_calls: 3 } });
    expect(root.payload.policy).toEqual({ allowed_tools: ['web_search'], max_calls: 3, pii_access: false, write_access: false });
    const sub = createSubDelegation({
      parent: root,
      issuer: agent,
      audience: child.did,
      policy: { allowed_tools: ['web_search'], max_calls: 2 },
    });
    expect(sub.payload.policy).toMatchObject({ pii_access: false, write_access: false });
    // What the record holds is what was signed.
    const signed = JSON.parse(Buffer.from(sub.jws.split('.')[1]!, 'base64url').toString('utf8')) as { policy: unknown };
    expect(signed.policy).toEqual({ allowed_tools: ['web_search'], max_calls: 2, pii_access: false, write_access: false });
  });

  it('runs the default hour from nbf when that is later than iat, never an exp before nbf', () => {
    const later = 2_000_000_000;
    const ahead = createRootDelegation({ issuer: operator, audience: agent.did, policy: {}, iat: later - 86_400, nbf: later });
    expect(ahead.payload).toMatchObject({ nbf: later, exp: later + 3600 });
    const past = createRootDelegation({ issuer: operator, audience: agent.did, policy: {}, iat: later, nbf: later - 600 });
    expect(past.payload).toMatchObject({ nbf: later - 600, exp: later + 3600 });
  });

  it('keeps access that is granted', () => {
    const root = createRootDelegation({ issuer: operator, audience: agent.did, policy: { pii_access: true, write_access: true } });
    expect(root.payload.policy).toEqual({ pii_access: true, write_access: true });
  });

  it('refuses an empty tool, resource or data-class list (nothing to Baton, everything to drs-verify), on a root and a sub-delegation', () => {
    const root = createRootDelegation({ issuer: operator, audience: agent.did, policy: { allowed_tools: ['web_search'] } });
    for (const list of ['allowed_tools', 'allowed_resources', 'allowed_data_classes'] as const) {
      const onRoot = batonErrorOf(() => createRootDelegation({ issuer: operator, audience: agent.did, policy: { [list]: [] } }));
      expect(onRoot.code).toBe('INVALID_FIELD');
      expect(onRoot.violations[0]).toMatchObject({ field: `policy.${list}` });
      expect(onRoot.message).toMatch(/DRS verifier/);
      expect(
        batonErrorOf(() =>
          createSubDelegation({ parent: root, issuer: agent, audience: child.did, policy: { allowed_tools: ['web_search'], [list]: [] } }),
        ).code,
      ).toBe('INVALID_FIELD');
    }
  });
});
