/**
 * The API description, served three ways: GET /openapi.yaml (the file as
 * written), GET /openapi.json (the same document as JSON) and GET /docs (one
 * self-contained HTML page: no scripts, no external resources, so it works
 * in air-gapped deployments).
 *
 * The file is found from this module's location (the package root holds
 * openapi.yaml next to package.json), read and parsed once, on first use.
 *
 * Parsing: the `yaml` package is a devDependency only, so production images
 * do not have it. openapi.yaml is written in a small YAML subset that
 * parseYamlSubset reads here: block mappings and sequences, plain and quoted
 * scalars, one-line flow collections, and literal/folded block scalars. It
 * refuses everything else (anchors, tags, multi-line plain scalars, ...)
 * rather than guess, and test/contract checks that it reads openapi.yaml
 * exactly as the `yaml` package does.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hono } from 'hono';
import { BatonError, ERROR_TABLE } from '../protocol/errors.js';
import type { AppEnv, ServiceDeps } from './types.js';

const CACHE_CONTROL = 'public, max-age=300';
/** The page has no scripts and loads nothing: forbid everything but its own inline style. */
const DOCS_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// ---------------------------------------------------------------- routes

export function docsRoutes(deps: ServiceDeps): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  const docs = (): ApiDocs => {
    try {
      return defaultDocs();
    } catch (e) {
      deps.log.error('api description unavailable', { error: e instanceof Error ? e.message : String(e) });
      throw new BatonError('INTERNAL', { message: 'The API description (openapi.yaml) could not be loaded.' });
    }
  };

  r.get('/openapi.yaml', (c) => c.body(docs().yaml, 200, { 'Content-Type': 'text/yaml; charset=utf-8', 'Cache-Control': CACHE_CONTROL }));
  r.get('/openapi.json', (c) =>
    c.body(docs().json, 200, { 'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': CACHE_CONTROL }),
  );
  r.get('/docs', (c) =>
    c.html(docs().html, 200, {
      'Cache-Control': CACHE_CONTROL,
      'Content-Security-Policy': DOCS_CSP,
      'X-Content-Type-Options': 'nosniff',
    }),
  );
  return r;
}

export interface ApiDocs {
  readonly file: string;
  readonly yaml: string;
  readonly spec: OpenApiDocument;
  readonly json: string;
  readonly html: string;
}

let cached: ApiDocs | undefined;

function defaultDocs(): ApiDocs {
  cached ??= loadApiDocs(findSpecFile());
  return cached;
}

/** openapi.yaml at the package root: the first directory above this module holding it and package.json. */
export function findSpecFile(from: string = dirname(fileURLToPath(import.meta.url))): string {
  for (let dir = from; ;) {
    const candidate = join(dir, 'openapi.yaml');
    if (existsSync(candidate) && existsSync(join(dir, 'package.json'))) return candidate;
    const up = dirname(dir);
    if (up === dir) throw new Error(`no openapi.yaml next to a package.json above ${from}; ship openapi.yaml at the package root`);
    dir = up;
  }
}

export function loadApiDocs(file: string): ApiDocs {
  const yaml = readFileSync(file, 'utf8');
  const parsed = parseYamlSubset(yaml);
  if (!isObject(parsed) || typeof parsed['openapi'] !== 'string' || !isObject(parsed['paths'])) {
    throw new Error(`${file} is not an OpenAPI document`);
  }
  const spec = parsed as unknown as OpenApiDocument;
  return { file, yaml, spec, json: `${JSON.stringify(spec, null, 2)}\n`, html: renderDocsPage(spec) };
}

// ---------------------------------------------------------------- YAML subset

export class YamlSubsetError extends Error {
  override name = 'YamlSubsetError';
}

interface SourceLine {
  /** Leading spaces. */
  indent: number;
  /** The rest of the line, trailing whitespace removed. */
  text: string;
}

const PLAIN_START_FORBIDDEN = new Set(['[', ']', '{', '}', ',', '#', '&', '*', '!', '|', '>', "'", '"', '%', '@', '`', '?', ':']);

/**
 * Parses the YAML subset openapi.yaml is written in. Throws YamlSubsetError,
 * naming the line, on anything outside it.
 */
export function parseYamlSubset(source: string): unknown {
  return new YamlSubsetParser(source).document();
}

class YamlSubsetParser {
  private readonly raw: string[];
  private readonly lines: (SourceLine | null)[];
  private i = 0;

  constructor(source: string) {
    this.raw = source.replace(/^\uFEFF/, '').split(/\r?\n/);
    this.lines = this.raw.map((line, n) => {
      const indent = line.length - line.replace(/^ +/, '').length;
      const text = line.slice(indent).trimEnd();
      if (text === '' || text.startsWith('#')) return null; // blank or comment: insignificant outside block scalars
      if (text.startsWith('\t')) throw this.fail('tabs are not allowed in indentation', n);
      return { indent, text };
    });
  }

  document(): unknown {
    const first = this.peek();
    if (first === undefined) return null;
    if (first.line.text.startsWith('---') || first.line.text.startsWith('%'))
      throw this.fail('directives and document markers are not supported', first.n);
    const value = this.node(first.line.indent);
    const rest = this.peek();
    if (rest !== undefined) throw this.fail('unexpected content (check its indentation)', rest.n);
    return value;
  }

  private fail(message: string, n: number = this.i): YamlSubsetError {
    return new YamlSubsetError(`openapi.yaml line ${n + 1}: ${message}`);
  }

  /** The next significant line (skipping blanks and comments), without consuming it. */
  private peek(): { n: number; line: SourceLine } | undefined {
    while (this.i < this.lines.length && this.lines[this.i] === null) this.i++;
    const line = this.lines[this.i];
    return line ? { n: this.i, line } : undefined;
  }

  private node(indent: number): unknown {
    const next = this.peek();
    if (next === undefined) return null;
    return isSequenceItem(next.line.text) ? this.sequence(indent) : this.mapping(indent);
  }

  private mapping(indent: number): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    for (let next = this.peek(); next !== undefined && next.line.indent >= indent; next = this.peek()) {
      if (next.line.indent > indent) throw this.fail('unexpected indentation', next.n);
      if (isSequenceItem(next.line.text)) throw this.fail('a sequence item where a mapping key was expected', next.n);
      const entry = splitKey(next.line.text);
      if (entry === null) throw this.fail('expected "key: value"', next.n);
      if (Object.prototype.hasOwnProperty.call(out, entry.key)) throw this.fail(`duplicate key ${JSON.stringify(entry.key)}`, next.n);
      this.i = next.n + 1;
      define(out, entry.key, this.value(entry.rest, indent, true, next.n));
    }
    return out;
  }

  private sequence(indent: number): unknown[] {
    const out: unknown[] = [];
    for (let next = this.peek(); next !== undefined && next.line.indent >= indent; next = this.peek()) {
      const { n, line } = next;
      if (line.indent > indent) throw this.fail('unexpected indentation', n);
      if (!isSequenceItem(line.text)) break;
      const rest = line.text.slice(1).replace(/^ +/, '');
      if (rest === '' || rest.startsWith('#')) {
        this.i = n + 1;
        const child = this.peek();
        out.push(child !== undefined && child.line.indent > indent ? this.node(child.line.indent) : null);
        continue;
      }
      if (isSequenceItem(rest) || splitKey(rest) !== null) {
        // "- key: value" or "- - x": the item is a block node starting at this column.
        this.lines[n] = { indent: indent + (line.text.length - rest.length), text: rest };
        out.push(this.node(this.lines[n]!.indent));
        continue;
      }
      this.i = n + 1;
      out.push(this.value(rest, indent, false, n));
    }
    return out;
  }

  /** The value after "key:" or "- ": nested block, block scalar, or one-line scalar / flow collection. */
  private value(rest: string, parentIndent: number, inMapping: boolean, n: number): unknown {
    if (rest === '' || rest.startsWith('#')) {
      const next = this.peek();
      if (next === undefined) return null;
      if (next.line.indent > parentIndent) return this.node(next.line.indent);
      if (inMapping && next.line.indent === parentIndent && isSequenceItem(next.line.text)) return this.sequence(parentIndent);
      return null;
    }
    if (rest[0] === '|' || rest[0] === '>') return this.blockScalar(rest, parentIndent, n);
    try {
      return inlineValue(rest);
    } catch (e) {
      throw this.fail(e instanceof Error ? e.message : String(e), n);
    }
  }

  private blockScalar(header: string, parentIndent: number, n: number): string {
    const m = /^([|>])(-?)(?:\s+#.*)?$/.exec(header);
    if (!m) throw this.fail('only |, |-, > and >- block scalars are supported', n);
    const folded = m[1] === '>';
    const strip = m[2] === '-';
    const body: string[] = [];
    let contentIndent: number | undefined;
    let j = n + 1;
    for (; j < this.raw.length; j++) {
      const line = this.raw[j]!;
      if (line.trim() === '') {
        body.push('');
        continue;
      }
      const indent = line.length - line.replace(/^ +/, '').length;
      if (indent <= parentIndent) break;
      contentIndent ??= indent;
      if (indent < contentIndent) throw this.fail('a block scalar line is less indented than its first line', j);
      body.push(line.slice(contentIndent).trimEnd());
    }
    // Trailing blank lines belong to the chomping, not the content.
    while (body.length > 0 && body[body.length - 1] === '') body.pop();
    this.i = j;
    for (let k = n + 1; k < j; k++) this.lines[k] = null;
    let text: string;
    if (!folded) {
      text = body.join('\n');
    } else {
      text = '';
      let breaks = 0;
      let started = false;
      for (const line of body) {
        if (line === '') {
          breaks++;
          continue;
        }
        if (line.startsWith(' ') || line.startsWith('\t'))
          throw this.fail('more-indented lines in a folded (>) block scalar are not supported; use |', n);
        text += started ? (breaks === 0 ? ' ' : '\n'.repeat(breaks)) : '\n'.repeat(breaks);
        text += line;
        breaks = 0;
        started = true;
      }
    }
    return strip || text === '' ? text : `${text}\n`;
  }
}

function isSequenceItem(text: string): boolean {
  return text === '-' || text.startsWith('- ');
}

/** Sets an own, enumerable property even for names like __proto__. */
function define(target: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

/** "key: rest" (plain or quoted key), or null when the text is not a mapping entry. */
function splitKey(text: string): { key: string; rest: string } | null {
  if (text[0] === '"' || text[0] === "'") {
    let quoted: { value: string; end: number };
    try {
      quoted = readQuoted(text, 0);
    } catch {
      return null;
    }
    const after = /^\s*:(?:\s+|$)/.exec(text.slice(quoted.end));
    return after ? { key: quoted.value, rest: text.slice(quoted.end + after[0].length) } : null;
  }
  if (PLAIN_START_FORBIDDEN.has(text[0]!) || isSequenceItem(text)) return null;
  const colon = /:(?:\s+|$)/.exec(text);
  if (!colon) return null;
  const key = text.slice(0, colon.index).trimEnd();
  if (key === '' || /\s#/.test(key)) return null;
  return { key, rest: text.slice(colon.index + colon[0].length) };
}

/** A one-line value: a flow collection, a quoted scalar, or a plain scalar, then at most a comment. */
function inlineValue(text: string): unknown {
  const reader = new FlowReader(text);
  const value = reader.value(false);
  reader.end();
  return value;
}

function readQuoted(text: string, start: number): { value: string; end: number } {
  const quote = text[start];
  if (quote === "'") {
    let value = '';
    for (let i = start + 1; i < text.length; i++) {
      if (text[i] === "'") {
        if (text[i + 1] === "'") {
          value += "'";
          i++;
          continue;
        }
        return { value, end: i + 1 };
      }
      value += text[i];
    }
    throw new YamlSubsetError('unterminated single-quoted scalar');
  }
  for (let i = start + 1; i < text.length; i++) {
    if (text[i] === '\\') {
      i++;
      continue;
    }
    if (text[i] === '"') {
      try {
        // Only the JSON subset of YAML's double-quoted escapes is accepted.
        return { value: JSON.parse(text.slice(start, i + 1)) as string, end: i + 1 };
      } catch {
        throw new YamlSubsetError('unsupported escape in a double-quoted scalar');
      }
    }
  }
  throw new YamlSubsetError('unterminated double-quoted scalar');
}

/** YAML 1.2 core schema for plain scalars; refuses the forms this subset does not read. */
function resolvePlain(s: string): unknown {
  if (/^(?:null|Null|NULL|~)$/.test(s)) return null;
  if (/^(?:true|True|TRUE)$/.test(s)) return true;
  if (/^(?:false|False|FALSE)$/.test(s)) return false;
  if (/^[-+]?[0-9]+$/.test(s)) return Number(s);
  if (/^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$/.test(s)) return Number(s);
  if (/^0[ox]/.test(s) || /^[-+]?\.(?:inf|Inf|INF|nan|NaN|NAN)$/.test(s))
    throw new YamlSubsetError(`unsupported number form ${s}; quote it if it is text`);
  return s;
}

class FlowReader {
  private pos = 0;
  constructor(private readonly text: string) {}

  private skip(): void {
    while (this.text[this.pos] === ' ') this.pos++;
  }

  end(): void {
    this.skip();
    if (this.pos < this.text.length && this.text[this.pos] !== '#')
      throw new YamlSubsetError(`unexpected ${JSON.stringify(this.text.slice(this.pos))}`);
    if (this.text[this.pos] === '#' && this.text[this.pos - 1] !== ' ') throw new YamlSubsetError('a comment needs a space before #');
  }

  value(inFlow: boolean): unknown {
    this.skip();
    const c = this.text[this.pos];
    if (c === '[') return this.list();
    if (c === '{') return this.map();
    if (c === '"' || c === "'") {
      const q = readQuoted(this.text, this.pos);
      this.pos = q.end;
      return q.value;
    }
    return resolvePlain(this.plain(inFlow));
  }

  private plain(inFlow: boolean): string {
    const start = this.pos;
    const c = this.text[start];
    if (
      c === undefined ||
      PLAIN_START_FORBIDDEN.has(c) ||
      (c === '-' && (this.text[start + 1] === ' ' || this.text[start + 1] === undefined))
    ) {
      throw new YamlSubsetError(`unsupported value ${JSON.stringify(this.text.slice(start))}`);
    }
    let i = start;
    for (; i < this.text.length; i++) {
      const ch = this.text[i]!;
      if (inFlow && (ch === ',' || ch === ']' || ch === '}' || ch === '[' || ch === '{')) break;
      if (ch === ':' && (i + 1 === this.text.length || this.text[i + 1] === ' ' || (inFlow && ',]}'.includes(this.text[i + 1]!)))) {
        if (inFlow) break;
        throw new YamlSubsetError('": " inside a plain scalar; quote the value');
      }
      if (ch === '#' && this.text[i - 1] === ' ') break;
    }
    this.pos = i;
    const s = this.text.slice(start, i).trimEnd();
    if (s === '') throw new YamlSubsetError('empty value');
    return s;
  }

  private list(): unknown[] {
    this.pos++;
    const out: unknown[] = [];
    for (;;) {
      this.skip();
      if (this.text[this.pos] === ']') {
        this.pos++;
        return out;
      }
      out.push(this.value(true));
      this.skip();
      const c = this.text[this.pos];
      if (c === ',') this.pos++;
      else if (c !== ']') throw new YamlSubsetError('expected , or ] in a flow sequence');
    }
  }

  private map(): Record<string, unknown> {
    this.pos++;
    const out: Record<string, unknown> = {};
    for (;;) {
      this.skip();
      if (this.text[this.pos] === '}') {
        this.pos++;
        return out;
      }
      const c = this.text[this.pos];
      let key: string;
      if (c === '"' || c === "'") {
        const q = readQuoted(this.text, this.pos);
        this.pos = q.end;
        key = q.value;
      } else {
        key = this.plain(true);
      }
      this.skip();
      if (this.text[this.pos] !== ':') throw new YamlSubsetError('expected : after a flow mapping key');
      this.pos++;
      if (Object.prototype.hasOwnProperty.call(out, key)) throw new YamlSubsetError(`duplicate key ${JSON.stringify(key)}`);
      define(out, key, this.value(true));
      this.skip();
      const d = this.text[this.pos];
      if (d === ',') this.pos++;
      else if (d !== '}') throw new YamlSubsetError('expected , or } in a flow mapping');
    }
  }
}

// ---------------------------------------------------------------- rendering

type Schema = Record<string, unknown>;

export interface OpenApiDocument {
  openapi: string;
  info: { title: string; version: string; summary?: string; description?: string; license?: { name: string } };
  tags?: { name: string; description?: string }[];
  paths: Record<string, Record<string, Operation>>;
  components?: {
    schemas?: Record<string, Schema>;
    parameters?: Record<string, Parameter>;
    responses?: Record<string, ResponseObject>;
    requestBodies?: Record<string, RequestBody>;
    securitySchemes?: Record<string, { type: string; scheme?: string; description?: string }>;
  };
}

interface Operation {
  operationId?: string;
  tags?: string[];
  summary?: string;
  description?: string;
  security?: Record<string, unknown>[];
  parameters?: (Parameter | Ref)[];
  requestBody?: RequestBody | Ref;
  responses: Record<string, ResponseObject | Ref>;
  'x-baton-scopes'?: string[];
}
interface Ref {
  $ref: string;
  description?: string;
}
interface Parameter {
  name: string;
  in: string;
  required?: boolean;
  description?: string;
  schema?: Schema;
}
interface RequestBody {
  required?: boolean;
  description?: string;
  content?: Record<string, { schema?: Schema }>;
}
interface ResponseObject {
  description?: string;
  content?: Record<string, { schema?: Schema }>;
}

export const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

function esc(s: unknown): string {
  return String(s).replace(/[&<>"']/g, (c) => HTML_ESCAPES[c] ?? c);
}

/** The little Markdown the descriptions use: paragraphs, "- " lists, `code`. */
function prose(text: string | undefined): string {
  if (!text) return '';
  const inline = (s: string) => esc(s).replace(/`([^`]+)`/g, '<code>$1</code>');
  return text
    .trim()
    .split(/\n{2,}/)
    .map((block) => {
      const lines = block.split('\n');
      if (lines.every((l) => l.startsWith('- '))) return `<ul>${lines.map((l) => `<li>${inline(l.slice(2))}</li>`).join('')}</ul>`;
      return `<p>${inline(lines.join(' '))}</p>`;
    })
    .join('');
}

function refName(ref: string): string {
  return ref.slice(ref.lastIndexOf('/') + 1);
}

function anchor(kind: string, name: string): string {
  return `${kind}-${name.replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

function resolve<T>(spec: OpenApiDocument, value: T | Ref): { value: T; description: string | undefined } {
  if (isObject(value) && typeof value['$ref'] === 'string') {
    const ref = value['$ref'];
    const parts = ref.replace(/^#\//, '').split('/');
    let target: unknown = spec;
    for (const p of parts) target = isObject(target) ? target[p] : undefined;
    if (target === undefined) throw new Error(`unresolved reference ${ref}`);
    const description = value['description'];
    return { value: target as T, description: typeof description === 'string' ? description : undefined };
  }
  return { value: value as T, description: undefined };
}

/** A short, linked type label: "ReceiptRef or null", "array of RecordHash", "string (date-time)". */
function typeLabel(s: unknown): string {
  if (!isObject(s)) return 'any';
  if (typeof s['$ref'] === 'string') {
    const name = refName(s['$ref']);
    return `<a href="#${anchor('schema', name)}">${esc(name)}</a>`;
  }
  if ('const' in s) return `<code>${esc(JSON.stringify(s['const']))}</code>`;
  if (Array.isArray(s['enum'])) return s['enum'].map((v) => `<code>${esc(JSON.stringify(v))}</code>`).join(' | ');
  for (const k of ['oneOf', 'anyOf'] as const) {
    if (Array.isArray(s[k])) return (s[k] as unknown[]).map(typeLabel).join(' or ');
  }
  if (Array.isArray(s['allOf'])) return (s['allOf'] as unknown[]).map(typeLabel).join(' + ');
  const types = Array.isArray(s['type']) ? (s['type'] as string[]) : typeof s['type'] === 'string' ? [s['type']] : [];
  if (types.length === 0) return 'any';
  return types
    .map((t) => {
      if (t === 'array') return `array of ${typeLabel(s['items'])}`;
      if (t === 'string' && typeof s['format'] === 'string') return `string (${esc(s['format'])})`;
      return esc(t);
    })
    .join(' or ');
}

function constraints(s: unknown): string {
  if (!isObject(s)) return '';
  const out: string[] = [];
  const add = (k: string, label: string) => {
    if (s[k] !== undefined) out.push(`${label} ${esc(JSON.stringify(s[k]))}`);
  };
  add('minimum', 'min');
  add('maximum', 'max');
  add('minLength', 'min length');
  add('maxLength', 'max length');
  add('minItems', 'min items');
  add('maxItems', 'max items');
  add('pattern', 'pattern');
  add('default', 'default');
  if (s['uniqueItems'] === true) out.push('unique items');
  return out.length > 0 ? `<div class="constraints">${out.join('; ')}</div>` : '';
}

/** Inline object schemas (not references) are expanded as nested property tables. */
function expandable(s: unknown): Schema | undefined {
  if (!isObject(s) || '$ref' in s) return undefined;
  if (isObject(s['properties']) || Array.isArray(s['allOf'])) return s;
  if (Array.isArray(s['oneOf'])) return s;
  if (s['type'] === 'array' && isObject(s['items'])) return expandable(s['items']);
  return undefined;
}

function schemaBody(s: Schema, depth: number): string {
  const parts: string[] = [];
  for (const k of ['oneOf', 'anyOf'] as const) {
    const alts = s[k];
    if (Array.isArray(alts) && alts.some((a) => expandable(a) !== undefined)) {
      parts.push(
        `<div class="alts">${k === 'oneOf' ? 'Exactly one of:' : 'Any of:'}<ol>${alts
          .map((a) => `<li>${typeLabel(a)}${expandable(a) && depth < 4 ? schemaBody(a as Schema, depth + 1) : ''}</li>`)
          .join('')}</ol></div>`,
      );
    }
  }
  if (Array.isArray(s['allOf'])) {
    const refs = s['allOf'].filter((p) => isObject(p) && '$ref' in p);
    if (refs.length > 0) parts.push(`<div class="alts">All properties of ${refs.map(typeLabel).join(', ')}, and:</div>`);
    for (const p of s['allOf']) if (isObject(p) && !('$ref' in p)) parts.push(schemaBody(p, depth));
  }
  if (isObject(s['properties'])) {
    const required = new Set(Array.isArray(s['required']) ? (s['required'] as string[]) : []);
    const rows = Object.entries(s['properties']).map(([name, prop]) => {
      const nested = expandable(prop);
      const description = isObject(prop) && typeof prop['description'] === 'string' ? prose(prop['description']) : '';
      return `<tr><td><code>${esc(name)}</code>${required.has(name) ? ' <span class="req">required</span>' : ''}</td><td>${typeLabel(prop)}</td><td>${description}${constraints(prop)}${
        nested && depth < 4 ? schemaBody(nested, depth + 1) : ''
      }</td></tr>`;
    });
    parts.push(
      `<table class="props"><thead><tr><th>Property</th><th>Type</th><th>Description</th></tr></thead><tbody>${rows.join('')}</tbody></table>`,
    );
  }
  if (s['additionalProperties'] === false || s['unevaluatedProperties'] === false)
    parts.push('<div class="note">No other properties.</div>');
  else if (s['additionalProperties'] === true && isObject(s['properties']))
    parts.push('<div class="note">Other properties are allowed.</div>');
  return parts.join('');
}

function contentHtml(spec: OpenApiDocument, content: Record<string, { schema?: Schema }> | undefined): string {
  if (!content) return '';
  return Object.entries(content)
    .map(([type, media]) => {
      const s = media.schema;
      const nested = expandable(s);
      return `<div class="media"><span class="mt">${esc(type)}</span> ${typeLabel(s)}${constraints(s)}${nested ? schemaBody(nested, 1) : ''}</div>`;
    })
    .join('');
}

function authHtml(op: Operation): string {
  const scopes = op['x-baton-scopes'] ?? [];
  const security = op.security;
  if (security !== undefined && security.length === 0) return '<p class="auth">Public: no API key.</p>';
  const optional = security?.some((req) => Object.keys(req).length === 0) ?? false;
  const scopeText = scopes.length > 0 ? ` with one of the scopes ${scopes.map((s) => `<code>${esc(s)}</code>`).join(', ')}` : '';
  return `<p class="auth">${optional ? 'API key optional; when sent, a key' : 'API key'}${scopeText}.</p>`;
}

function operationHtml(spec: OpenApiDocument, method: string, path: string, op: Operation): string {
  const id = anchor('op', op.operationId ?? `${method}-${path}`);
  const params = (op.parameters ?? []).map((p) => resolve<Parameter>(spec, p).value);
  const paramsHtml =
    params.length === 0
      ? ''
      : `<h4>Parameters</h4><table class="props"><thead><tr><th>Name</th><th>In</th><th>Type</th><th>Description</th></tr></thead><tbody>${params
          .map(
            (p) =>
              `<tr><td><code>${esc(p.name)}</code>${p.required ? ' <span class="req">required</span>' : ''}</td><td>${esc(p.in)}</td><td>${typeLabel(p.schema)}${constraints(p.schema)}</td><td>${prose(p.description)}</td></tr>`,
          )
          .join('')}</tbody></table>`;
  let bodyHtml = '';
  if (op.requestBody) {
    const { value: body } = resolve<RequestBody>(spec, op.requestBody);
    bodyHtml = `<h4>Request body${body.required ? ' <span class="req">required</span>' : ''}</h4>${prose(body.description)}${contentHtml(spec, body.content)}`;
  }
  const responses = Object.entries(op.responses)
    .map(([status, raw]) => {
      const { value: res, description } = resolve<ResponseObject>(spec, raw);
      return `<tr><td class="status s${esc(status[0])}">${esc(status)}</td><td>${prose(description ?? res.description)}${contentHtml(spec, res.content)}</td></tr>`;
    })
    .join('');
  return `<details class="op" id="${id}"><summary><span class="method ${esc(method)}">${esc(method.toUpperCase())}</span> <code class="path">${esc(path)}</code> <span class="summary">${esc(op.summary ?? '')}</span></summary>
<div class="opbody">${prose(op.description)}${authHtml(op)}${paramsHtml}${bodyHtml}<h4>Responses</h4><table class="props responses"><tbody>${responses}</tbody></table></div></details>`;
}

const STYLE = `
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1f24;background:#fff}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{margin:0 0 4px}h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:40px}h3{margin-bottom:4px}h4{margin:16px 0 6px}
code{font:13px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f3f4f6;padding:1px 4px;border-radius:4px}
a{color:#0550ae;text-decoration:none}a:hover{text-decoration:underline}
nav ul{columns:2;padding-left:18px}nav li{break-inside:avoid}
details.op{border:1px solid #d0d7de;border-radius:6px;margin:8px 0}
details.op>summary{cursor:pointer;padding:8px 10px;list-style-position:inside}
details.op[open]>summary{border-bottom:1px solid #d0d7de;background:#f6f8fa}
.opbody{padding:4px 14px 12px}
.method{display:inline-block;min-width:58px;text-align:center;font:bold 12px ui-monospace,monospace;color:#fff;border-radius:4px;padding:2px 4px}
.get{background:#1f6feb}.post{background:#1a7f37}.delete{background:#cf222e}.put,.patch{background:#9a6700}
.path{background:none;font-size:14px}.summary{color:#57606a}
table.props{border-collapse:collapse;width:100%;margin:4px 0}
table.props th,table.props td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
table.props th{background:#f6f8fa}table.props table.props{font-size:14px}
.req{font-size:11px;color:#cf222e;text-transform:uppercase}
.constraints,.note{color:#57606a;font-size:13px}
.status{font:bold 14px ui-monospace,monospace;width:56px}.s2{color:#1a7f37}.s4{color:#9a6700}.s5{color:#cf222e}
.media{margin:4px 0}.mt{font:12px ui-monospace,monospace;color:#57606a}
.alts{margin:6px 0}.alts ol{margin:4px 0}
td p,li p{margin:2px 0}
`;

export function renderDocsPage(spec: OpenApiDocument): string {
  const ops: { tag: string; method: string; path: string; op: Operation }[] = [];
  for (const [path, item] of Object.entries(spec.paths)) {
    for (const method of HTTP_METHODS) {
      const op = item[method];
      if (op) ops.push({ tag: op.tags?.[0] ?? 'other', method, path, op });
    }
  }
  const tags = [...(spec.tags ?? [])];
  for (const { tag } of ops) if (!tags.some((t) => t.name === tag)) tags.push({ name: tag });

  const toc = tags
    .map((t) => {
      const mine = ops.filter((o) => o.tag === t.name);
      return `<li><a href="#${anchor('tag', t.name)}">${esc(t.name)}</a><ul>${mine
        .map(
          (o) =>
            `<li><a href="#${anchor('op', o.op.operationId ?? `${o.method}-${o.path}`)}"><code>${esc(o.method.toUpperCase())} ${esc(o.path)}</code></a></li>`,
        )
        .join('')}</ul></li>`;
    })
    .join('');

  const sections = tags
    .map((t) => {
      const mine = ops.filter((o) => o.tag === t.name);
      return `<section id="${anchor('tag', t.name)}"><h2>${esc(t.name)}</h2>${prose(t.description)}${mine.map((o) => operationHtml(spec, o.method, o.path, o.op)).join('\n')}</section>`;
    })
    .join('\n');

  const security = Object.entries(spec.components?.securitySchemes ?? {})
    .map(([name, s]) => `<h3>${esc(name)}</h3><p>HTTP <code>${esc(s.scheme ?? s.type)}</code></p>${prose(s.description)}`)
    .join('');

  const codes = Object.entries(ERROR_TABLE)
    .map(([code, spec_]) => {
      const block = 'block' in spec_ ? spec_.block : '';
      return `<tr><td><code>${esc(code)}</code></td><td>${esc(spec_.status)}</td><td>${esc(block)}</td><td>${esc(spec_.message)}</td><td>${esc(spec_.suggestion)}</td></tr>`;
    })
    .join('');

  const schemas = Object.entries(spec.components?.schemas ?? {})
    .sort(([a], [b]) => a.localeCompare(b))
    .map(
      ([name, s]) =>
        `<section class="schema" id="${anchor('schema', name)}"><h3>${esc(name)}</h3>${prose(typeof s['description'] === 'string' ? s['description'] : undefined)}<div>${typeLabel(
          isObject(s['properties']) || Array.isArray(s['allOf']) ? { type: s['type'] ?? 'object' } : s,
        )}${constraints(s)}</div>${schemaBody(s, 1)}</section>`,
    )
    .join('\n');

  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(spec.info.title)} API ${esc(spec.info.version)}</title><style>${STYLE}</style></head>
<body><main>
<h1>${esc(spec.info.title)} API <small>${esc(spec.info.version)}</small></h1>
<p>OpenAPI ${esc(spec.openapi)} · <a href="/openapi.yaml">openapi.yaml</a> · <a href="/openapi.json">openapi.json</a>${spec.info.license ? ` · ${esc(spec.info.license.name)}` : ''}</p>
${spec.info.summary ? `<p><strong>${esc(spec.info.summary)}</strong></p>` : ''}
${prose(spec.info.description)}
<nav><h2>Contents</h2><ul>${toc}<li><a href="#authentication">Authentication</a></li><li><a href="#error-codes">Error codes</a></li><li><a href="#schemas">Schemas</a></li></ul></nav>
${sections}
<section id="authentication"><h2>Authentication</h2>${security}</section>
<section id="error-codes"><h2>Error codes</h2><p>Every refusal carries one of these codes in <code>error.code</code>. The status is the usual one; a few routes use another where the context changes it (for example a policy escalation is 403 at verify and 422 at issuance).</p>
<table class="props"><thead><tr><th>Code</th><th>Status</th><th>Block</th><th>Message</th><th>Suggestion</th></tr></thead><tbody>${codes}</tbody></table></section>
<section id="schemas"><h2>Schemas</h2>${schemas}</section>
</main></body></html>
`;
}
