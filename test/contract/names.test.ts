/**
 * "Receipt" means DRS's delegation receipts (the DRs) and nothing else in the
 * API: the records the service signs of what it did are service receipts
 * (`service_receipt`, `service_receipts`, /v1/service-receipts). This walks the
 * generated OpenAPI document and fails when a path, tag, operation, schema or
 * member named `receipt`/`receipts` appears outside the few places DRS itself
 * uses the word.
 */
import { describe, expect, it } from 'vitest';
import { generatedApiDocument } from '../../src/service/app.js';
import type { Json } from './spec.js';

/**
 * Where DRS's own wire terms appear, by owner: a component schema, or an
 * operation's request or response. Each is a list of DRs (or one DR) as DRS
 * names it; nothing here is a service receipt.
 */
const DRS_MEMBERS = new Set([
  'components.schemas.Bundle.receipts',
  'components.schemas.VerifyRequest.receipts',
  'components.schemas.VerifyRequestDrs.receipts',
  'components.schemas.SubmitDelegationsRequest.receipts',
  'components.schemas.SubmitDelegationsRequest.receipt',
  'components.schemas.DelegationChain.receipts',
]);

const RECEIPT_WORD = /^receipts?$/;

/** Every object member named receipt/receipts, as "owner.member". */
function receiptMembers(document: Json): string[] {
  const found: string[] = [];
  const walk = (value: Json, owner: string): void => {
    if (Array.isArray(value)) return value.forEach((v) => walk(v, owner));
    if (value === null || typeof value !== 'object') return;
    for (const [key, child] of Object.entries(value as Record<string, Json>)) {
      if (key === 'properties' && child !== null && typeof child === 'object') {
        for (const name of Object.keys(child as object)) if (RECEIPT_WORD.test(name)) found.push(`${owner}.${name}`);
      }
      if (key === 'required' && Array.isArray(child)) continue;
      walk(child, owner);
    }
  };
  for (const [name, schema] of Object.entries((document.components?.schemas ?? {}) as Record<string, Json>)) {
    walk(schema, `components.schemas.${name}`);
  }
  for (const [path, item] of Object.entries(document.paths as Record<string, Json>)) {
    for (const [method, op] of Object.entries(item as Record<string, Json>)) {
      if (op === null || typeof op !== 'object') continue;
      walk(op.requestBody ?? {}, `${method.toUpperCase()} ${path} request`);
      walk(op.responses ?? {}, `${method.toUpperCase()} ${path} response`);
      walk(op.parameters ?? [], `${method.toUpperCase()} ${path} parameters`);
    }
  }
  return found;
}

describe('distinct names: "receipt" in the API is DRS\'s, the service\'s own are service receipts', () => {
  const document = generatedApiDocument() as Json;

  it('no member named receipt/receipts outside the DRS terms', () => {
    const found = receiptMembers(document);
    expect(found.filter((m) => !DRS_MEMBERS.has(m))).toEqual([]);
    // The allowlist stays honest: each DRS term is still where it is listed.
    expect([...DRS_MEMBERS].filter((m) => !found.includes(m))).toEqual([]);
  });

  it('no path segment, tag, operation or schema names a plain receipt', () => {
    const plain = (name: string) => /receipt/i.test(name.replace(/service[-_]?receipt/gi, ''));
    const segments = Object.keys(document.paths).flatMap((p) => p.split('/'));
    expect(segments.filter((s) => RECEIPT_WORD.test(s))).toEqual([]);
    const tags = ((document.tags ?? []) as { name: string }[]).map((t) => t.name);
    const operations = Object.values(document.paths as Record<string, Json>).flatMap((item) =>
      Object.values(item as Record<string, Json>).flatMap((op) => [op?.operationId, ...(op?.tags ?? [])]),
    );
    const schemas = Object.keys(document.components?.schemas ?? {});
    expect([...tags, ...operations, ...schemas].filter((n): n is string => typeof n === 'string' && plain(n))).toEqual([]);
  });

  it('the service receipt members are where clients read them', () => {
    const props = (name: string) => Object.keys(document.components.schemas[name].properties ?? {});
    expect(props('VerifyAllow')).toContain('service_receipt');
    expect(props('ServiceReceiptPage')).toContain('service_receipts');
    expect(props('ServiceReceiptLogProof')).toContain('service_receipt');
    expect(Object.keys(document.paths)).toEqual(expect.arrayContaining(['/v1/service-receipts', '/v1/log/service-receipts/{id}/proof']));
  });
});
