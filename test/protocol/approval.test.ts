import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { BatonError } from '../../src/protocol/errors.js';
import {
  approvalBinding,
  approve,
  expire,
  newApproval,
  parseGuardrailTriple,
  reject,
  statusAt,
  use,
  type Approval,
  type ApprovalSubject,
  type ApprovalStatus,
  type GuardrailTriple,
  type Transition,
} from '../../src/protocol/approval.js';

const AGENT = 'did:key:z6MkAgent';
const HUMAN = 'key:ops-approver';
const CMD = '/mcp/tools/call';
/** One call; the binding tests vary one part of it at a time. */
const SUBJECT: ApprovalSubject = {
  dr_chain: ['sha256:aa'],
  cmd: CMD,
  tool_server: 'mcp://crm',
  args: { tool: 'wipe', scope: 'all' },
  catalog_version: 3,
};
const BINDING = approvalBinding(SUBJECT);
const triple: GuardrailTriple = { actor: 'Dana (on call)', confirm: true, reason: 'Quarterly cleanup, ticket OPS-42.' };

function pending(): Approval {
  return newApproval({ id: 'apr_1', binding: BINDING, requested_by: AGENT, created_at: 1000, expires_at: 1600 });
}

function ok(t: Transition): Approval {
  if (!t.ok) throw new Error(`expected success, got ${t.code}: ${t.message}`);
  return t.approval;
}

function refused(t: Transition): { code: string; status: ApprovalStatus } {
  if (t.ok) throw new Error(`expected a refusal, got ${t.approval.status}`);
  return { code: t.code, status: t.status };
}

describe('guardrail triple', () => {
  it('accepts actor, confirm: true and a reason', () => {
    expect(parseGuardrailTriple(triple)).toEqual(triple);
    expect(parseGuardrailTriple({ actor: 'ops', confirm: true, reason: 'ok\nline two' }).reason).toBe('ok\nline two');
  });

  it.each([
    ['confirm missing', { actor: 'a', reason: 'r' }, ['confirm']],
    ['confirm false', { actor: 'a', confirm: false, reason: 'r' }, ['confirm']],
    ['confirm as a string', { actor: 'a', confirm: 'true', reason: 'r' }, ['confirm']],
    ['a blank reason', { actor: 'a', confirm: true, reason: '   ' }, ['reason']],
    ['a reason of punctuation only', { actor: 'a', confirm: true, reason: '...' }, ['reason']],
    ['a zero-width reason', { actor: 'a', confirm: true, reason: '\u200b\u200b' }, ['reason']],
    ['an ideographic-space reason', { actor: 'a', confirm: true, reason: '\u3000' }, ['reason']],
    ['a reason with a control character', { actor: 'a', confirm: true, reason: 'ok\u0007' }, ['reason']],
    ['an overlong reason', { actor: 'a', confirm: true, reason: 'x'.repeat(501) }, ['reason']],
    ['a blank actor', { actor: ' ', confirm: true, reason: 'r' }, ['actor']],
    ['a bidi-spoofed actor', { actor: 'admin\u202e', confirm: true, reason: 'r' }, ['actor']],
    ['nothing at all', {}, ['actor', 'confirm', 'reason']],
    ['an extra field', { actor: 'a', confirm: true, reason: 'r', force: true }, ['force']],
  ])('refuses %s with INVALID_REQUEST naming every field', (_what, body, fields) => {
    try {
      parseGuardrailTriple(body);
      throw new Error('expected a refusal');
    } catch (e) {
      expect(e).toBeInstanceOf(BatonError);
      const err = e as BatonError;
      expect(err.code).toBe('INVALID_REQUEST');
      expect([...new Set((err.details?.['issues'] as { field: string }[]).map((i) => i.field))]).toEqual(fields);
    }
  });
});

describe('approval binding', () => {
  it('is the same for the same call in any key order, and differs for any other call', () => {
    expect(approvalBinding({ ...SUBJECT, args: { scope: 'all', tool: 'wipe' } })).toBe(BINDING);
    const others: ApprovalSubject[] = [
      { ...SUBJECT, dr_chain: ['sha256:ab'] },
      { ...SUBJECT, tool_server: 'mcp://crm2' },
      { ...SUBJECT, args: { tool: 'wipe', scope: 'some' } },
      { ...SUBJECT, args: { tool: 'wipe', scope: 'all', extra: null } },
      // The same call under another catalog version: the tool and its rules may differ.
      { ...SUBJECT, catalog_version: 4 },
      // The same args under a sub-path of the command are another call.
      { ...SUBJECT, cmd: `${CMD}/wipe` },
    ];
    for (const other of others) expect(approvalBinding(other)).not.toBe(BINDING);
  });
});

describe('approval transitions', () => {
  it('pending → approved → used, once', () => {
    const approved = ok(approve(pending(), triple, { decided_by: HUMAN, now: 1100 }));
    expect(approved).toMatchObject({
      status: 'approved',
      decision: { actor: triple.actor, decided_by: HUMAN, reason: triple.reason, at: 1100 },
    });
    const used = ok(use(approved, { binding: BINDING, now: 1200 }));
    expect(used).toMatchObject({ status: 'used', used_at: 1200 });
    expect(refused(use(used, { binding: BINDING, now: 1201 }))).toEqual({ code: 'APPROVAL_USED', status: 'used' });
  });

  it('pending → rejected, and a rejected approval allows nothing', () => {
    const rejected = ok(reject(pending(), triple, { decided_by: HUMAN, now: 1100 }));
    expect(refused(use(rejected, { binding: BINDING, now: 1101 }))).toEqual({ code: 'APPROVAL_REJECTED', status: 'rejected' });
    expect(refused(approve(rejected, triple, { decided_by: HUMAN, now: 1102 }))).toEqual({ code: 'CONFLICT', status: 'rejected' });
  });

  it('refuses approve after expiry, at the deadline exactly', () => {
    expect(refused(approve(pending(), triple, { decided_by: HUMAN, now: 1600 }))).toEqual({ code: 'APPROVAL_EXPIRED', status: 'expired' });
    expect(refused(reject(pending(), triple, { decided_by: HUMAN, now: 99999 }))).toEqual({ code: 'APPROVAL_EXPIRED', status: 'expired' });
  });

  it('refuses double decisions and reject after approve', () => {
    const approved = ok(approve(pending(), triple, { decided_by: HUMAN, now: 1100 }));
    expect(refused(approve(approved, triple, { decided_by: HUMAN, now: 1101 }))).toEqual({ code: 'CONFLICT', status: 'approved' });
    expect(refused(reject(approved, triple, { decided_by: 'key:other', now: 1101 }))).toEqual({ code: 'CONFLICT', status: 'approved' });
  });

  it('refuses use before a decision, after the deadline, and for another call', () => {
    expect(refused(use(pending(), { binding: BINDING, now: 1100 }))).toEqual({ code: 'APPROVAL_REQUIRED', status: 'pending' });
    const approved = ok(approve(pending(), triple, { decided_by: HUMAN, now: 1100 }));
    expect(refused(use(approved, { binding: BINDING, now: 1600 }))).toEqual({ code: 'APPROVAL_EXPIRED', status: 'expired' });
    expect(refused(use(approved, { binding: 'sha256:other', now: 1200 }))).toEqual({ code: 'APPROVAL_MISMATCH', status: 'approved' });
    expect(ok(use(approved, { binding: BINDING, now: 1599 })).status).toBe('used'); // the mismatch consumed nothing
  });

  it('the requester cannot decide its own approval', () => {
    expect(refused(approve(pending(), triple, { decided_by: AGENT, now: 1100 }))).toEqual({ code: 'SELF_APPROVAL', status: 'pending' });
    expect(refused(reject(pending(), triple, { decided_by: AGENT, now: 1100 }))).toEqual({ code: 'SELF_APPROVAL', status: 'pending' });
  });

  it('its decider cannot spend it; anyone else sending the bound call can', () => {
    const approved = ok(approve(pending(), triple, { decided_by: HUMAN, now: 1100 }));
    expect(refused(use(approved, { binding: BINDING, now: 1200, caller: ['key:successor', HUMAN] }))).toEqual({
      code: 'APPROVAL_DECIDED_BY_CALLER',
      status: 'approved',
    });
    expect(ok(use(approved, { binding: BINDING, now: 1200, caller: ['key:tool-server'] })).status).toBe('used');
  });

  it('expire records what statusAt already says, and only after the deadline', () => {
    const p = pending();
    expect(statusAt(p, 1599)).toBe('pending');
    expect(statusAt(p, 1600)).toBe('expired');
    expect(refused(expire(p, 1599))).toEqual({ code: 'CONFLICT', status: 'pending' });
    const expired = ok(expire(p, 1600));
    expect(expired).toMatchObject({ status: 'expired', expired_at: 1600 });
    expect(refused(expire(expired, 1700))).toEqual({ code: 'CONFLICT', status: 'expired' });
    // Even a node whose clock is behind cannot revive it.
    expect(refused(approve(expired, triple, { decided_by: HUMAN, now: 1100 }))).toEqual({ code: 'APPROVAL_EXPIRED', status: 'expired' });
    expect(refused(use(expired, { binding: BINDING, now: 1100 })).code).toBe('APPROVAL_EXPIRED');
  });

  it('refuses to create an approval without a future deadline', () => {
    expect(() => newApproval({ id: 'a', binding: BINDING, requested_by: AGENT, created_at: 10, expires_at: 10 })).toThrow(BatonError);
    expect(() => newApproval({ id: 'a', binding: BINDING, requested_by: AGENT, created_at: 10, expires_at: 10.5 })).toThrow(BatonError);
  });
});

describe('approval state machine (properties)', () => {
  type Step =
    { op: 'approve' | 'reject'; by: string; now: number } | { op: 'use'; binding: string; now: number } | { op: 'expire'; now: number };

  // Times around the deadline (1600), in any order: nodes' clocks disagree.
  const now = fc.oneof(fc.integer({ min: 900, max: 1700 }), fc.constantFrom(1599, 1600, 1601));
  const step: fc.Arbitrary<Step> = fc.oneof(
    fc.record({ op: fc.constantFrom('approve' as const, 'reject' as const), by: fc.constantFrom(HUMAN, AGENT, 'key:other'), now }),
    fc.record({ op: fc.constant('use' as const), binding: fc.constantFrom(BINDING, BINDING, 'sha256:other'), now }),
    fc.record({ op: fc.constant('expire' as const), now }),
  );

  const NEXT: Record<ApprovalStatus, readonly ApprovalStatus[]> = {
    pending: ['approved', 'rejected', 'expired'],
    approved: ['used', 'expired'],
    rejected: [],
    expired: [],
    used: [],
  };

  it('no sequence of steps uses an approval twice, after its deadline, unapproved, or for another call', () => {
    let usedRuns = 0;
    fc.assert(
      fc.property(fc.array(step, { maxLength: 12 }), (steps) => {
        let state = pending();
        let uses = 0;
        for (const s of steps) {
          const before = state;
          const t =
            s.op === 'use'
              ? use(state, s)
              : s.op === 'expire'
                ? expire(state, s.now)
                : (s.op === 'approve' ? approve : reject)(state, triple, { decided_by: s.by, now: s.now });
          if (!t.ok) continue;
          state = t.approval;
          expect(NEXT[before.status]).toContain(state.status);
          if (s.op === 'use') {
            uses++;
            expect(before.status).toBe('approved');
            expect(s.now).toBeLessThan(before.expires_at);
            expect(s.binding).toBe(before.binding);
          }
          if (s.op === 'approve' || s.op === 'reject') {
            expect(s.now).toBeLessThan(before.expires_at);
            expect(s.by).not.toBe(AGENT);
          }
        }
        expect(uses).toBeLessThanOrEqual(1);
        if (uses === 1) usedRuns++;
      }),
      { numRuns: 2000 },
    );
    expect(usedRuns).toBeGreaterThan(20);
  });
});
