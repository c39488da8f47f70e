/**
 * GET /docs, /openapi.yaml and /openapi.json, and the YAML subset parser
 * that lets production serve them without the `yaml` devDependency: it must
 * read openapi.yaml exactly as the `yaml` package does, and refuse what it
 * does not understand rather than guess.
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { ERROR_TABLE } from '../../src/protocol/errors.js';
import { findSpecFile, loadApiDocs, parseYamlSubset, YamlSubsetError } from '../../src/service/docs.routes.js';
import { startTestService, type TestService } from '../support/service.js';
import { loadSpec, loadSpecText, SPEC_FILE } from './spec.js';

describe('parseYamlSubset', () => {
  it('reads openapi.yaml exactly as the yaml package does', () => {
    expect(parseYamlSubset(loadSpecText())).toStrictEqual(loadSpec());
  });

  it('agrees with the yaml package on every construct it supports', () => {
    const samples = [
      'a: 1\nb: -2.5\nc: true\nd: null\ne: ~\nf: "x\\ny \\u00e9"\ng: \'it\'\'s\'\nh: plain text, here\ni: 1e3\nj: 4.0\nk: "4.0"\n',
      'list:\n- a\n- b: 1\n  c: [x, "y", 3, null]\n-\n  - nested\n- - inline nested\n',
      'k:\n  - {a: 1, b: [2, {c: d}]}\n  - []\n  - {}\n  - {\'q\': "r, s"}\n',
      'lit: |\n  line1\n\n    indented\n  line3\n\nfold: >-\n  a\n  b\n\n  c\nstrip: |-\n  x\nclip: >\n  y\n  z\n\n\nend: 1\n',
      "\"quoted key\": v\n'single': w # comment\nurl: mcp://x/y\npath/{id}: 2\n$ref: '#/a/b'\n",
      '# leading comment\nroot:\n  child:\n    leaf: 1 # trailing\n\n  # inner comment\n  other: 2\nempty:\nafter: 3\n',
      'seq:\n- a\n- b\nnext: c\n',
      '\'200\':\n  description: ok\n"404": x\n',
    ];
    for (const sample of samples) expect(parseYamlSubset(sample), sample).toStrictEqual(YAML.parse(sample));
  });

  it('refuses what it does not support, naming the line', () => {
    const refused = [
      'a: &x 1\nb: *x\n',
      'a: !!str 1\n',
      'a: b\n  continued\n',
      'a:\n\t- b\n',
      'a: b: c\n',
      'a: 1\na: 2\n',
      'f: >\n  a\n    more indented\n',
      'a: 0x1F\n',
      'a: .inf\n',
      '---\na: 1\n',
      'a: |+\n  x\n',
      'a: |2\n  x\n',
      '? complex\n: key\n',
      'a: [1, 2\n',
      'a: {b}\n',
      'a: "\\x41"\n',
      "a: 'open\n",
    ];
    for (const text of refused) {
      expect(() => parseYamlSubset(text), JSON.stringify(text)).toThrow(YamlSubsetError);
      expect(() => parseYamlSubset(text)).toThrow(/line \d+/);
    }
  });

  it('never sets a prototype from a key', () => {
    const parsed = parseYamlSubset('__proto__:\n  polluted: true\n') as Record<string, unknown>;
    expect(Object.getPrototypeOf(parsed)).toBe(Object.prototype);
    expect(Object.keys(parsed)).toEqual(['__proto__']);
    expect(({} as Record<string, unknown>)['polluted']).toBeUndefined();
  });
});

describe('finding openapi.yaml', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'baton-docs-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('is the one at the package root, found from the module location', () => {
    expect(findSpecFile()).toBe(SPEC_FILE);
    const nested = join(dir, 'pkg', 'dist', 'src', 'service');
    mkdirSync(nested, { recursive: true });
    writeFileSync(join(dir, 'pkg', 'package.json'), '{}');
    writeFileSync(join(dir, 'pkg', 'openapi.yaml'), 'openapi: 3.1.0\ninfo:\n  title: t\n  version: v\npaths: {}\n');
    expect(findSpecFile(nested)).toBe(join(dir, 'pkg', 'openapi.yaml'));
    expect(() => findSpecFile(dirname(dir))).toThrow(/openapi\.yaml/);
  });

  it('a file that is not an OpenAPI document is refused', () => {
    const file = join(dir, 'bad.yaml');
    writeFileSync(file, 'just: a mapping\n');
    expect(() => loadApiDocs(file)).toThrow(/not an OpenAPI document/);
  });
});

describe('served documents', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startTestService();
  });
  afterAll(async () => svc?.close());

  it('GET /openapi.yaml is the file, byte for byte', async () => {
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
