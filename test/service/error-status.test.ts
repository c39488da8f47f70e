/**
 * The one error table and the one map from its codes to HTTP statuses:
 * every code a client can see is described, has a status or is explicitly
 * not HTTP, and the service documents and answers only codes of the table,
 * each with the status the map gives it.
 */
import { describe, expect, it } from 'vitest';
import { BatonError, ERROR_TABLE, isMalformed, SERVICE_ERROR_CODES, type AnyErrorCode } from '../../src/protocol/errors.js';
import { ERROR_STATUS, httpStatusOf, NOT_HTTP, SubmissionRefusal } from '../../src/service/error-status.js';
import { DRS_BUNDLE_META_KEY, DRS_BUNDLE_META_KEY_NEXT } from '../../src/mcp/middleware.js';
import { loadSpec } from '../contract/spec.js';

const ALL_CODES = Object.keys(ERROR_TABLE) as AnyErrorCode[];
/** Text that would send a reader outside the repository: the design notes, parent paths, absolute paths, URLs. */
const OUTSIDE = /DESIGN\.md|DESIGN section|\.\.\/|(?:^|[\s("'`])\/(?:work|home|tmp|usr|etc|Users)\/|https?:\/\//;

describe('ERROR_TABLE: every code a client can see', () => {
  it.each(ALL_CODES)('%s has a message and a suggestion, both full sentences that stay inside the repository', (code) => {
    const { message, suggestion } = ERROR_TABLE[code];
    for (const text of [message, suggestion]) {
      expect(text.trim().length, code).toBeGreaterThan(10);
      expect(text, code).toMatch(/^[A-Z]/);
      expect(text, code).toMatch(/[.)]$/);
      expect(text, code).not.toMatch(OUTSIDE);
    }
  });

  it('the check for outside references catches what it is meant to catch', () => {
    for (const bad of ['See DESIGN.md.', 'Read ../shared/notes.', 'Open /work/main/x.', 'See https://example.org.'])
      expect(bad).toMatch(OUTSIDE);
    expect('Check the fields against openapi.yaml and docs/design.md.').not.toMatch(OUTSIDE);
  });

  it('every code has exactly one entry in the service status map: a status, or NOT_HTTP for SDK and MCP codes', () => {
    expect(Object.keys(ERROR_STATUS).sort()).toEqual([...ALL_CODES].sort());
    const service = new Set<string>(SERVICE_ERROR_CODES);
    for (const code of ALL_CODES) {
      const status = ERROR_STATUS[code];
      if (service.has(code)) expect(status, code).toSatisfy((s: unknown) => typeof s === 'number' && s >= 400 && s < 600);
      else expect(status, code).toBe(NOT_HTTP);
    }
    // The middleware's and the client's own codes are in the table, outside the service's.
    for (const code of [
      'TOOL_MISMATCH',
      'BUNDLE_MISSING',
      'BUNDLE_MALFORMED',
      'BATON_UNAVAILABLE',
      'UNGATED_REQUEST',
      'NETWORK_ERROR',
      'TIMEOUT',
      'ABORTED',
    ])
      expect(ERROR_STATUS[code as AnyErrorCode], code).toBe(NOT_HTTP);
  });

  it("the MCP codes' suggestions name the _meta keys the middleware reads", () => {
    for (const code of ['BUNDLE_MISSING', 'BUNDLE_MALFORMED'] as const)
      for (const key of [DRS_BUNDLE_META_KEY, DRS_BUNDLE_META_KEY_NEXT])
        expect(ERROR_TABLE[code].suggestion, code).toContain(`_meta["${key}"]`);
  });

  it('a code is malformed input exactly when the service answers it 400 (so the CLI exits 2 for the same codes)', () => {
    for (const code of SERVICE_ERROR_CODES) expect(isMalformed(code), code).toBe(ERROR_STATUS[code] === 400);
  });
});

describe('httpStatusOf: the named rules', () => {
  it('a plain refusal gets the status of its code', () => {
    expect(httpStatusOf(new BatonError('POLICY_ESCALATION'))).toBe(403);
    expect(httpStatusOf(new BatonError('MALFORMED_JWS'))).toBe(400);
    expect(httpStatusOf(new BatonError('STORAGE_UNAVAILABLE'))).toBe(503);
  });

  it('a record refused on its merits at submission is 422; a malformed record stays 400', () => {
    expect(httpStatusOf(new SubmissionRefusal('POLICY_ESCALATION'))).toBe(422);
    expect(httpStatusOf(new SubmissionRefusal('UNTRUSTED_ROOT'))).toBe(422);
    expect(httpStatusOf(new SubmissionRefusal('MALFORMED_JWS'))).toBe(400);
    expect(httpStatusOf(new SubmissionRefusal('WEAK_KEY'))).toBe(400);
  });
});

describe('the service documents only codes of the table, each under its status', () => {
  /** Upper-case names in backticks that are not error codes. */
  const NOT_CODES = new Set(['BATON_MAX_BODY_BYTES', 'BATON_MAX_BODY_BUFFER_BYTES']);
  const spec = loadSpec();

  it('the OpenAPI ErrorCode enum is the service codes, and every code a response names is one, under its mapped status', () => {
    expect(spec.components.schemas.ErrorCode.enum).toEqual(SERVICE_ERROR_CODES);
    const service = new Set<string>(SERVICE_ERROR_CODES);
    const problems: string[] = [];
    let named = 0;
    for (const [path, item] of Object.entries<Record<string, { responses?: Record<string, { description?: string; $ref?: string }> }>>(
      spec.paths,
    )) {
      for (const [method, op] of Object.entries(item)) {
        for (const [status, res] of Object.entries(op.responses ?? {})) {
          const text = res.$ref ? JSON.stringify(spec.components.responses[res.$ref.split('/').pop()!]) : (res.description ?? '');
          for (const [, code] of text.matchAll(/`([A-Z][A-Z0-9_]{2,})`/g)) {
            if (NOT_CODES.has(code!)) continue;
            named++;
            const where = `${method.toUpperCase()} ${path} ${status} names ${code}`;
            if (!service.has(code!)) {
              problems.push(`${where}, which is not a service code of ERROR_TABLE`);
              continue;
            }
            const mapped = ERROR_STATUS[code as AnyErrorCode] as number;
            const submission = Number(status) === 422 && mapped === 403; // SubmissionRefusal
            if (Number(status) !== mapped && !submission) problems.push(`${where}, which the service answers with ${mapped}`);
          }
        }
      }
    }
    expect(named).toBeGreaterThan(100);
    expect(problems).toEqual([]);
  });
});
