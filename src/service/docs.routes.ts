/**
 * The API description, served three ways: GET /openapi.json (the document
 * generated from the app's routes), GET /openapi.yaml (the same document as
 * YAML, byte for byte the checked-in openapi.yaml) and GET /docs (one
 * self-contained HTML page: no scripts, no external resources, so it works in
 * air-gapped deployments). Each is rendered once, on first use.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { ERROR_TABLE } from '../protocol/errors.js';
import { serviceErrorStatuses } from './error-status.js';
import { docsPageRoute, openapiJsonRoute, openapiYamlRoute } from '../api/docs.js';
import { toYaml } from '../api/yaml.js';
import { documentResolver, exampleFor, type RefResolver } from './docs-examples.js';
import { newRouter, serve } from './router.js';
import type { AppEnv } from './types.js';

const CACHE_CONTROL = 'public, max-age=300';
/** The page has no scripts and loads nothing: forbid everything but its own inline style. */
const DOCS_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// ---------------------------------------------------------------- routes

/** `document` is the whole app's generated document; asked for at the first request, when every route is mounted. */
export function docsRoutes(document: () => OpenApiDocument): OpenAPIHono<AppEnv> {
  const r = newRouter();
  let rendered: { yaml: string; json: string; html: string } | undefined;
  const docs = () => {
    if (!rendered) {
      const spec = document();
      rendered = { yaml: toYaml(spec), json: `${JSON.stringify(spec, null, 2)}\n`, html: renderDocsPage(spec) };
    }
    return rendered;
  };

  serve(r, openapiYamlRoute, (c) =>
    c.body(docs().yaml, 200, { 'Content-Type': 'text/yaml; charset=utf-8', 'Cache-Control': CACHE_CONTROL }),
  );
  serve(r, openapiJsonRoute, (c) =>
    c.body(docs().json, 200, { 'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': CACHE_CONTROL }),
  );
  serve(r, docsPageRoute, (c) =>
    c.html(docs().html, 200, {
      'Cache-Control': CACHE_CONTROL,
      'Content-Security-Policy': DOCS_CSP,
      'X-Content-Type-Options': 'nosniff',
    }),
  );
  return r;
}

// ---------------------------------------------------------------- HTML page

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
    headers?: Record<string, { description?: string; schema?: Schema }>;
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
  headers?: Record<string, Ref | { description?: string; schema?: Schema }>;
}

export const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

function esc(s: unknown): string {
  return String(s).replace(/[&<>"']/g, (c) => HTML_ESCAPES[c] ?? c);
}

/**
 * The little Markdown the descriptions use: paragraphs, "- " lists whose items
 * may wrap onto following lines, `code` and **bold**.
 */
function prose(text: string | undefined): string {
  if (!text) return '';
  const inline = (s: string) =>
    esc(s)
      .replace(/`([^`]+)`/g, '<code>$1</code>')
      .replace(/\*\*([^*]+)\*\*/g, '<strong>$1</strong>');
  return text
    .trim()
    .split(/\n{2,}/)
    .map((block) => {
      const out: string[] = [];
      let paragraph: string[] = [];
      let items: string[] | undefined;
      const flushParagraph = () => {
        if (paragraph.length > 0) out.push(`<p>${inline(paragraph.join(' '))}</p>`);
        paragraph = [];
      };
      const flushList = () => {
        if (items) out.push(`<ul>${items.map((item) => `<li>${inline(item)}</li>`).join('')}</ul>`);
        items = undefined;
      };
      for (const line of block.split('\n')) {
        if (line.startsWith('- ')) {
          flushParagraph();
          (items ??= []).push(line.slice(2).trim());
        } else if (items && /^\s/.test(line)) {
          items[items.length - 1] += ` ${line.trim()}`; // an item wrapped onto an indented line
        } else {
          flushList();
          paragraph.push(line.trim());
        }
      }
      flushParagraph();
      flushList();
      return out.join('');
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

/** A short, linked type label: "ServiceReceiptRef or null", "array of RecordHash", "string (date-time)". */
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

/** A JSON example, pretty-printed, in a block that scrolls sideways on a narrow screen. */
function exampleHtml(label: string, value: unknown): string {
  if (value === undefined) return '';
  return `<div class="example"><div class="mt">${esc(label)}</div><pre><code>${esc(JSON.stringify(value, null, 2))}</code></pre></div>`;
}

/** `withExample`: show a JSON example of the schema (request bodies and success responses). */
function contentHtml(
  content: Record<string, { schema?: Schema }> | undefined,
  examples?: { label: string; resolveRef: RefResolver; requiredOnly?: boolean },
): string {
  if (!content) return '';
  return Object.entries(content)
    .map(([type, media]) => {
      const s = media.schema;
      const nested = expandable(s);
      const example =
        examples && type.includes('json')
          ? exampleHtml(examples.label, exampleFor(s, examples.resolveRef, { requiredOnly: examples.requiredOnly ?? false }))
          : '';
      return `<div class="media"><span class="mt">${esc(type)}</span> ${typeLabel(s)}${constraints(s)}${nested ? schemaBody(nested, 1) : ''}${example}</div>`;
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

function operationHtml(spec: OpenApiDocument, resolveRef: RefResolver, method: string, path: string, op: Operation): string {
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
    bodyHtml = `<h4>Request body${body.required ? ' <span class="req">required</span>' : ''}</h4>${prose(body.description)}${contentHtml(body.content, { label: 'Example request', resolveRef, requiredOnly: true })}`;
  }
  const responses = Object.entries(op.responses)
    .map(([status, raw]) => {
      const { value: res, description } = resolve<ResponseObject>(spec, raw);
      const examples = status.startsWith('2') ? { label: `Example ${status} response`, resolveRef } : undefined;
      return `<tr><td class="status s${esc(status[0])}">${esc(status)}</td><td>${prose(description ?? res.description)}${contentHtml(res.content, examples)}</td></tr>`;
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
code{overflow-wrap:break-word}
pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:8px;overflow-x:auto;margin:4px 0}
pre code{background:none;padding:0;overflow-wrap:normal}
.example{margin:8px 0}
@media (max-width:640px){
main{padding:12px}
nav ul{columns:1}
table.props{display:block;overflow-x:auto}
table.props td,table.props th{padding:3px 5px}
details.op>summary .summary{display:block;margin-top:2px}
.opbody{padding:4px 8px 10px}
}
`;

export function renderDocsPage(spec: OpenApiDocument): string {
  const resolveRef = documentResolver(spec);
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
      return `<section id="${anchor('tag', t.name)}"><h2>${esc(t.name)}</h2>${prose(t.description)}${mine.map((o) => operationHtml(spec, resolveRef, o.method, o.path, o.op)).join('\n')}</section>`;
    })
    .join('\n');

  const security = Object.entries(spec.components?.securitySchemes ?? {})
    .map(([name, s]) => `<h3>${esc(name)}</h3><p>HTTP <code>${esc(s.scheme ?? s.type)}</code></p>${prose(s.description)}`)
    .join('');

  const codes = serviceErrorStatuses()
    .map(([code, status]) => {
      const spec_ = ERROR_TABLE[code];
      const block = 'block' in spec_ ? spec_.block : '';
      return `<tr><td><code>${esc(code)}</code></td><td>${esc(status)}</td><td>${esc(block)}</td><td>${esc(spec_.message)}</td><td>${esc(spec_.suggestion)}</td></tr>`;
    })
    .join('');

  const refusalExample = {
    error: { code: 'NOT_FOUND', message: ERROR_TABLE.NOT_FOUND.message, suggestion: ERROR_TABLE.NOT_FOUND.suggestion },
    request_id: '3f2b8c1e-9d4a-4f6b-8e2a-1c5d7e9f0a3b',
  };

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
${exampleHtml('Example refusal', refusalExample)}
<table class="props"><thead><tr><th>Code</th><th>Status</th><th>Block</th><th>Message</th><th>Suggestion</th></tr></thead><tbody>${codes}</tbody></table></section>
<section id="schemas"><h2>Schemas</h2>${schemas}</section>
</main></body></html>
`;
}
