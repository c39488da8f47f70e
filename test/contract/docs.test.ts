/**
 * The generated contract: openapi.yaml is written from the app's routes
 * (npm run openapi) and must not go stale; the YAML writer must produce what
 * the `yaml` package reads back as the same document; sub-apps mounted with
 * app.route(...) land in the document; and GET /docs, /openapi.yaml and
 * /openapi.json serve it.
 */
import { createRoute, z } from '@hono/zod-openapi';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { WIRE_TYPES_FILE, wireTypesSource } from '../../scripts/wire-types.js';
import { toYaml } from '../../src/api/yaml.js';
import { ERROR_TABLE } from '../../src/protocol/errors.js';
import { apiDocument, generatedApiDocument } from '../../src/service/app.js';
import { newRouter } from '../../src/service/router.js';
import { startTestService, type TestService } from '../support/service.js';
import { loadSpec, loadSpecText } from './spec.js';

describe('openapi.yaml is generated', () => {
  it('the checked-in file is what `npm run openapi` writes now (run it after changing a route)', () => {
    expect(loadSpecText()).toBe(toYaml(generatedApiDocument()));
  });

  it('the checked-in SDK wire types (src/api/wire-types.ts) are what `npm run openapi` writes now', async () => {
    expect(readFileSync(WIRE_TYPES_FILE, 'utf8')).toBe(await wireTypesSource(generatedApiDocument()));
  });

  it('the YAML writer round-trips through the yaml package', () => {
    const doc = generatedApiDocument();
    expect(YAML.parse(toYaml(doc), { uniqueKeys: true })).toStrictEqual(JSON.parse(JSON.stringify(doc)));
    const samples: unknown[] = [
      { a: 1, b: -2.5, c: true, d: null, e: '', f: 'x: y', g: 'a #b', h: ' lead', i: 'trail ', j: 'end\n', k: 'multi\nline\n\n  indented' },
      { t: ['true', 'null', 'yes', 'No', '~', '1e3', '4.0', '0x1F', '.inf', '-', '- x', '? q', '*a', '&a', '!t', '%p', '@a', '`c`'] },
      { '200': { '/v1/x/{h}': 'ok' }, 'x-ext': [[1, [2]], {}, [], { '': 'empty key', 'a b': 'space', __proto__key: 1 }] },
      { s: 'tab\there', r: 'cr\rhere', u: 'caf\u00e9 \u2028 \u0000', q: '"quoted"', sq: "'single'", bs: 'back\\slash' },
    ];
    for (const sample of samples) expect(YAML.parse(toYaml(sample)), JSON.stringify(sample)).toStrictEqual(sample);
  });

  it('a sub-app mounted with app.route(...) lands in the document', () => {
    const sub = newRouter();
    sub.openapi(
      createRoute({
        method: 'get',
        path: '/v1/example/{id}',
        operationId: 'exampleSubApp',
        request: { params: z.object({ id: z.string() }) },
        responses: {
          200: { description: 'ok', content: { 'application/json': { schema: z.object({ id: z.string() }).openapi('ExampleThing') } } },
        },
      }),
      (c) => c.json({ id: c.req.valid('param').id }, 200),
    );
    const app = newRouter();
    app.route('/', sub);
    const doc = apiDocument(app) as unknown as {
      paths: Record<string, { get?: { operationId?: string } }>;
      components: { schemas: Record<string, unknown> };
    };
    expect(doc.paths['/v1/example/{id}']?.get?.operationId).toBe('exampleSubApp');
    expect(doc.components.schemas['ExampleThing']).toBeDefined();
  });
});

describe('no client-visible text points outside the repository', () => {
  it('error messages and suggestions, and the whole generated document', () => {
    const outside = /DESIGN\.md|DESIGN section|\.\.\/shared/;
    for (const [code, entry] of Object.entries(ERROR_TABLE)) {
      expect(entry.message, code).not.toMatch(outside);
      expect(entry.suggestion, code).not.toMatch(outside);
    }
    expect(JSON.stringify(generatedApiDocument())).not.toMatch(outside);
  });
});

describe('served documents', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startTestService();
  });
  afterAll(async () => svc?.close());

  it('GET /openapi.yaml is the checked-in file, byte for byte', async () => {
    const res = await svc.app.request('/openapi.yaml');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/yaml/);
    expect(await res.text()).toBe(loadSpecText());
  });

  it('GET /openapi.json is the same document', async () => {
    const res = await svc.app.request('/openapi.json');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await res.json()).toEqual(loadSpec());
  });

  it('GET /docs renders every operation, schema and error code, self-contained', async () => {
    const res = await svc.app.request('/docs');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(res.headers.get('content-security-policy')).toContain("default-src 'none'");
    const html = await res.text();
    const spec = loadSpec();

    for (const [path, item] of Object.entries<Record<string, { operationId: string; summary: string }>>(spec.paths)) {
      for (const [method, op] of Object.entries(item)) {
        expect(html, op.operationId).toContain(`id="op-${op.operationId}"`);
        expect(html).toContain(`<span class="method ${method}">${method.toUpperCase()}</span> <code class="path">${path}</code>`);
      }
    }
    for (const name of Object.keys(spec.components.schemas)) expect(html, name).toContain(`id="schema-${name}"`);
    for (const [code, entry] of Object.entries(ERROR_TABLE)) {
      expect(html, code).toContain(`<code>${code}</code></td><td>${entry.status}</td>`);
    }

    // Nothing to fetch: no scripts, stylesheets, images, frames or remote URLs.
    expect(html).not.toMatch(/<script|<link|<img|<iframe|<object|<embed|<base|@import/i);
    const styles = [...html.matchAll(/<style>([\s\S]*?)<\/style>/g)].map((m) => m[1]).join('');
    expect(styles).not.toMatch(/url\(/i);
    expect(html).not.toMatch(/(?:src|href|action)\s*=\s*["']?(?:https?:)?\/\//i);
    // Every in-page link lands on an element of the page.
    const ids = new Set([...html.matchAll(/\sid="([^"]+)"/g)].map((m) => m[1]));
    const targets = [...html.matchAll(/href="#([^"]+)"/g)].map((m) => m[1]!);
    expect(targets.length).toBeGreaterThan(50);
    expect(targets.filter((t) => !ids.has(t))).toEqual([]);
  });
});
