/**
 * The OpenAPI document says what a 503 SERVICE_BUSY is (the body budget, src/service/body.ts): the
 * 503 of every operation that takes a body names it, says nothing ran, and declares its
 * Retry-After header; an operation without a body says nothing of it. The document is built per
 * request of GET /docs, so building it again from the same app says it once.
 */
import { describe, expect, it } from 'vitest';
import { apiDocument, createApp } from '../../src/service/app.js';
import type { ServiceDeps } from '../../src/service/types.js';

/** The app as generatedApiDocument builds it: declaring routes needs no dependency. */
const noDeps = new Proxy({} as ServiceDeps, {
  get(_, prop) {
    throw new Error(`declaring routes must not need deps.${String(prop)}`);
  },
});

type Response503 = { description?: string; headers?: Record<string, unknown>; $ref?: string } | undefined;

describe('the 503 of operations that take a body', () => {
  it('names SERVICE_BUSY once, says nothing ran, and declares Retry-After; others do not', () => {
    const app = createApp(noDeps);
    apiDocument(app);
    const doc = apiDocument(app); // a second build, as a second GET /docs makes
    expect(doc.components?.headers?.['RetryAfter']?.description).toContain('SERVICE_BUSY');
    let withBody = 0;
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        const unavailable = operation.responses['503'] as Response503;
        const where = `${method} ${path}`;
        if (operation.requestBody === undefined) {
          expect(unavailable?.description ?? '', where).not.toContain('SERVICE_BUSY');
          continue;
        }
        withBody++;
        expect(unavailable?.description?.match(/SERVICE_BUSY/g), where).toHaveLength(1);
        expect(unavailable?.description, where).toContain('nothing ran');
        expect(unavailable?.headers?.['Retry-After'], where).toEqual({ $ref: '#/components/headers/RetryAfter' });
      }
    }
    expect(withBody).toBeGreaterThan(10);
    expect(doc.info.description).toContain('503 SERVICE_BUSY');
  });
});
