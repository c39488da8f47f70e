/** verifyApprovalDecision: an auditor's offline check of a signed decision record, whatever its age. */
import { describe, expect, it } from 'vitest';
import { createApprovalDecision, generateKeyPair, recordHash, verifyApprovalDecision } from '../../src/sdk/index.js';

const human = generateKeyPair();
const id = `apr_${'a'.repeat(32)}`;

describe('verifyApprovalDecision', () => {
  it('accepts a record of any age for the approval it names, with its hash and outcome', () => {
    const record = createApprovalDecision({ signer: human, approvalId: id, decision: 'reject', reason: 'Not this week.', iat: 1_000 });
    const checked = verifyApprovalDecision(record.jws, { approvalId: id, approvers: [human.did] });
    expect(checked).toEqual({ valid: true, hash: recordHash(record.jws), payload: record.payload, outcome: 'rejected' });
  });

  it('refuses, without throwing, a record edited, for another approval, by a signer not listed, or not a record at all', () => {
    const { jws } = createApprovalDecision({ signer: human, approvalId: id, decision: 'approve', reason: 'Fine.' });
    const [h, p, s] = jws.split('.') as [string, string, string];
    const forged = `${h}.${p}.${s.slice(0, -2)}${s.endsWith('AA') ? 'BA' : 'AA'}`;
    expect(verifyApprovalDecision(forged, { approvalId: id })).toMatchObject({ valid: false, code: 'SIGNATURE_INVALID', payload: null });
    expect(verifyApprovalDecision(jws, { approvalId: `apr_${'b'.repeat(32)}` })).toMatchObject({ valid: false, code: 'INVALID_FIELD' });
    expect(verifyApprovalDecision(jws, { approvalId: id, approvers: [generateKeyPair().did] })).toMatchObject({
      valid: false,
      code: 'NOT_AN_APPROVER',
    });
    for (const junk of ['', 'a.b.c', 42 as unknown as string]) expect(verifyApprovalDecision(junk, { approvalId: id }).valid).toBe(false);
  });
});
