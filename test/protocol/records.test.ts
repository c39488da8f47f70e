/** parseWith: a refused value's issues name the field to fix, also inside a union of shapes. */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { BatonError } from '../../src/protocol/errors.js';
import { DelegationPayloadSchema, parseWith } from '../../src/protocol/records.js';

const Submit = z.union([z.strictObject({ receipts: z.array(z.string()).min(1).max(16) }), z.strictObject({ receipt: z.string() })]);

function refusal(value: unknown): { message: string; issues: { field: string; message: string }[] } {
  try {
    parseWith(Submit, value, 'request body', 'INVALID_REQUEST');
  } catch (e) {
    expect(e).toBeInstanceOf(BatonError);
    const err = e as BatonError;
    expect(err.code).toBe('INVALID_REQUEST');
    return { message: err.message, issues: (err.details as { issues: { field: string; message: string }[] }).issues };
  }
  throw new Error('parsed');
}

describe('parseWith and unions', () => {
  it('reports the issues of the shape the value came closest to', () => {
    const tooLong = refusal({ receipts: Array.from({ length: 17 }, () => 'x') });
    expect(tooLong.issues).toEqual([{ field: 'receipts', message: 'must have at most 16 items' }]);
    expect(tooLong.message).toMatch(/receipts must have at most 16 items/);

    const extra = refusal({ receipts: ['x'], surprise: 1 });
    expect(extra.issues).toEqual([{ field: 'surprise', message: 'is not a field Baton accepts here' }]);

    const nested = refusal({ receipt: 7 });
    expect(nested.issues.map((i) => i.field)).toEqual(['receipt']);
  });

  it.each([
    [z.strictObject({ limit: z.int().max(500) }), { limit: 1000 }, 'limit must be at most 500'],
    [z.strictObject({ limit: z.int().min(1) }), { limit: 0 }, 'limit must be at least 1'],
    [z.strictObject({ name: z.string().max(3) }), { name: 'abcd' }, 'name must have at most 3 characters'],
    [z.strictObject({ name: z.string() }), {}, 'name is required (string)'],
    [z.strictObject({ name: z.string() }), { name: 5 }, 'name must be of type string'],
    [z.strictObject({ n: z.int() }), { n: 1.5 }, 'n must be an integer'],
    [z.strictObject({ scopes: z.array(z.string()).min(1) }), { scopes: [] }, 'scopes must have at least 1 item'],
    // A message the schema wrote itself is kept.
    [
      z.strictObject({ scopes: z.array(z.string()).min(1, 'must name at least one scope') }),
      { scopes: [] },
      'scopes must name at least one scope',
    ],
    [z.strictObject({ n: z.int({ error: 'must be a whole number of tokens' }) }), { n: 1.5 }, 'n must be a whole number of tokens'],
    [z.strictObject({ v: z.literal('4.0') }), { v: '3.0' }, 'v must be "4.0"'],
    [z.strictObject({ v: z.literal('4.0') }), {}, 'v is required ("4.0")'],
    [z.strictObject({ outcome: z.enum(['allowed', 'denied']) }), { outcome: 'maybe' }, 'outcome must be one of "allowed", "denied"'],
  ])("says common issues plainly, not in zod's words: %#", (schema, value, said) => {
    try {
      parseWith(schema as z.ZodType<unknown>, value, 'query', 'INVALID_REQUEST');
      expect.unreachable();
    } catch (e) {
      expect((e as BatonError).message).toBe(`The query is not valid: ${said}.`);
    }
  });

  it('keeps the union as one issue when no shape is closer than another', () => {
    expect(refusal({}).issues).toEqual([{ field: '(body)', message: 'Invalid input' }]);
  });

  it('prefixes the path of a union nested in an object', () => {
    const Outer = z.strictObject({ body: Submit });
    try {
      parseWith(Outer, { body: { receipts: [] } }, 'request body', 'INVALID_REQUEST');
      expect.unreachable();
    } catch (e) {
      expect((e as BatonError).details).toMatchObject({ issues: [{ field: 'body.receipts' }] });
    }
  });
});

describe('delegation payload refusals', () => {
  it('an exp before nbf names the field once: "exp must not be before nbf"', () => {
    const did = `did:key:z6Mk${'a'.repeat(44)}`;
    const payload = {
      iss: did,
      sub: did,
      aud: did,
      drs_v: '4.0',
      drs_type: 'delegation-receipt',
      cmd: '/mcp/tools/call',
      policy: {},
      nbf: 200,
      exp: 100,
      iat: 200,
      jti: 'dr:1',
      drs_root_type: 'automated-system',
    };
    try {
      parseWith(DelegationPayloadSchema, payload, 'delegation payload');
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(BatonError);
      expect((e as BatonError).message).toBe('The delegation payload is not valid: exp must not be before nbf.');
      expect((e as BatonError).details).toMatchObject({ issues: [{ field: 'exp', message: 'must not be before nbf' }] });
    }
  });
});
