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
import { serviceErrorStatuses } from '../../src/service/error-status.js';
import { apiDocument, generatedApiDocument } from '../../src/service/app.js';
import { newRouter } from '../../src/service/router.js';
import { startTestService, type TestService } from '../support/service.js';
import { documentResolver, exampleFor } from '../../src/service/docs-examples.js';
import { Contract, deref, loadSpec, loadSpecText } from './spec.js';

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

describe('the bearerAuth security scheme', () => {
  it('names every bearer credential, the /metrics token too (BATON_METRICS_TOKEN), not only tenant and admin keys', () => {
    const spec = loadSpec();
    const scheme = spec.components.securitySchemes.bearerAuth.description as string;
    expect(scheme).toContain('BATON_ADMIN_KEY');
    expect(scheme).toMatch(/\/metrics.*BATON_METRICS_TOKEN/);
    // The scheme calls it a token for /metrics alone: no other operation may claim to take it.
    const takers: string[] = [];
    for (const [path, item] of Object.entries(spec.paths as Record<string, Record<string, { description?: string }>>))
      for (const [method, op] of Object.entries(item))
        if (op.description?.includes('BATON_METRICS_TOKEN')) takers.push(`${method.toUpperCase()} ${path}`);
    expect(takers).toEqual(['GET /metrics']);
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
    for (const [code, status] of serviceErrorStatuses()) {
      expect(html, code).toContain(`<code>${code}</code></td><td>${status}</td>`);
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

describe('docs page examples', () => {
  const spec = loadSpec();
  const contract = new Contract(spec);
  const resolveRef = documentResolver(spec);
  /** Every JSON request body and success response the page shows an example for. */
  const shown = contract.operations.flatMap((o) => {
    const out: { what: string; schema: unknown; requiredOnly: boolean }[] = [];
    const body = o.op.requestBody ? deref(spec, o.op.requestBody) : undefined;
    const reqSchema = body?.content?.['application/json']?.schema;
    if (reqSchema) out.push({ what: `${o.id} request`, schema: reqSchema, requiredOnly: true });
    for (const [status, raw] of Object.entries<unknown>(o.op.responses)) {
      const schema = deref(spec, raw as never)?.content?.['application/json']?.schema;
      if (status.startsWith('2') && schema) out.push({ what: `${o.id} ${status}`, schema, requiredOnly: false });
    }
    return out;
  });

  it('there is an example for every JSON request body and success response', () => {
    expect(shown.length).toBeGreaterThan(40);
    for (const { what, schema, requiredOnly } of shown) expect(exampleFor(schema, resolveRef, { requiredOnly }), what).toBeDefined();
  });

  it('every example is valid under the schema it illustrates (ajv strict, JSON Schema 2020-12)', () => {
    const invalid = shown.flatMap(({ what, schema, requiredOnly }) => {
      const validate = contract.compile(schema as never);
      const example = exampleFor(schema, resolveRef, { requiredOnly });
      return validate(example) ? [] : [`${what}: ${contract.ajv.errorsText(validate.errors)}\n  ${JSON.stringify(example).slice(0, 400)}`];
    });
    expect(invalid).toEqual([]);
  });

  it('the page shows them, and reads at 390 px: tables and examples scroll inside their box', async () => {
    const { renderDocsPage } = await import('../../src/service/docs.routes.js');
    const html = renderDocsPage(spec);
    const requests = shown.filter((s) => s.what.endsWith(' request')).length;
    expect(html.split('Example request').length - 1).toBe(requests);
    expect(html).toContain('Example refusal');
    const style = [...html.matchAll(/<style>([\s\S]*?)<\/style>/g)].map((m) => m[1]).join('');
    // No fixed width wider than a phone; a narrow-screen rule lets wide tables scroll.
    const widths = [...style.matchAll(/(?<!max-)(?<!min-)width:(\d+)px/g)].map((m) => Number(m[1]));
    expect(widths.filter((w) => w > 390)).toEqual([]);
    expect(style).toMatch(/@media \(max-width:\d+px\)\{[^@]*table\.props\{display:block;overflow-x:auto\}/);
    expect(style).toMatch(/pre\{[^}]*overflow-x:auto/);
    expect(html).toContain('<meta name="viewport" content="width=device-width, initial-scale=1">');
  });

  it('descriptions render as written: list items that wrap onto indented lines stay one item, **bold** is bold', async () => {
    const { renderDocsPage } = await import('../../src/service/docs.routes.js');
    const html = renderDocsPage(spec);
    expect(html).toContain(
      '<li><strong>Retry after a lost answer.</strong> The same invocation (same <code>jti</code> and same signed bytes) sent again',
    );
    expect(html).not.toMatch(/<p>[^<]*- \*\*/);
    expect(html).not.toContain('**');
  });
});
