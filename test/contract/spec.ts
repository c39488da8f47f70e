/**
 * The contract side of the tests: openapi.yaml read with the `yaml` package
 * (independently of the service's own subset parser), JSON Schema 2020-12
 * validators for every documented response, and a record of which
 * (operation, status) pairs a test run actually observed.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import YAML from 'yaml';

export const SPEC_FILE = fileURLToPath(new URL('../../openapi.yaml', import.meta.url));
export const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;

/* eslint-disable @typescript-eslint/no-explicit-any -- the spec is arbitrary JSON */
export type Json = any;

export interface OperationRef {
  readonly id: string;
  readonly method: string;
  readonly path: string;
  readonly op: Json;
}

export function loadSpecText(): string {
  return readFileSync(SPEC_FILE, 'utf8');
}

export function loadSpec(): Json {
  return YAML.parse(loadSpecText(), { uniqueKeys: true });
}

const SCHEMA_ROOT = 'urn:baton:openapi';

/** Rewrites component references so they resolve inside the validator's root schema. */
function rewriteRefs(value: Json, to: (name: string) => string): Json {
  if (Array.isArray(value)) return value.map((v) => rewriteRefs(v, to));
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, Json> = {};
  for (const [k, v] of Object.entries(value)) {
    if (k === '$ref' && typeof v === 'string') {
      const m = /^#\/components\/schemas\/([^/]+)$/.exec(v);
      if (!m) throw new Error(`unsupported schema reference ${v}`);
      out[k] = to(m[1]!);
    } else {
      out[k] = rewriteRefs(v, to);
    }
  }
  return out;
}

/** Follows a local JSON pointer ("#/components/responses/X"). */
export function pointer(spec: Json, ref: string): Json {
  if (!ref.startsWith('#/')) throw new Error(`not a local reference: ${ref}`);
  let target: Json = spec;
  for (const part of ref.slice(2).split('/')) {
    target = target?.[part.replace(/~1/g, '/').replace(/~0/g, '~')];
  }
  if (target === undefined) throw new Error(`unresolved reference ${ref}`);
  return target;
}

export function deref(spec: Json, value: Json): Json {
  return value && typeof value === 'object' && typeof value.$ref === 'string' ? pointer(spec, value.$ref) : value;
}

export class Contract {
  readonly ajv: Ajv2020;
  readonly operations: OperationRef[] = [];
  /** "operationId status" pairs observed. */
  readonly observed = new Set<string>();
  private readonly validators = new Map<string, ValidateFunction>();
  private readonly matchers: { path: string; regex: RegExp; params: number }[] = [];

  constructor(readonly spec: Json) {
    // strict: unknown keywords, typos and ill-typed keywords in the spec fail compilation.
    this.ajv = new Ajv2020({ strict: true, allErrors: true, allowUnionTypes: true });
    addFormatsModule.default(this.ajv);
    // OpenAPI 3.1's Schema Object allows `example` beside the JSON Schema keywords.
    this.ajv.addKeyword('example');
    this.ajv.addSchema({
      $id: SCHEMA_ROOT,
      $defs: rewriteRefs(spec.components?.schemas ?? {}, (name) => `#/$defs/${name}`),
    });
    for (const [path, item] of Object.entries<Json>(spec.paths)) {
      for (const method of HTTP_METHODS) {
        const op = item[method];
        if (op) this.operations.push({ id: op.operationId, method, path, op });
      }
      const names: string[] = [];
      // A parameter marked x-baton-multi-segment (a tile path) spans slashes.
      const multi = new Set(
        HTTP_METHODS.flatMap((m) => (item[m]?.parameters ?? []) as Json[])
          .filter((p) => p['x-baton-multi-segment'] === true)
          .map((p) => p.name as string),
      );
      const source = path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\\?\{([^}]+)\\?\}/g, (_m, name: string) => {
        names.push(name);
        return multi.has(name) ? '(.+)' : '([^/]+)';
      });
      this.matchers.push({ path, regex: new RegExp(`^${source}$`), params: names.length });
    }
  }

  /** Compiles a schema that may reference components. */
  compile(schema: Json): ValidateFunction {
    return this.ajv.compile(rewriteRefs(schema, (name) => `${SCHEMA_ROOT}#/$defs/${name}`));
  }

  /** Compiles every component schema on its own (strict mode reports mistakes). */
  compileAllComponents(): void {
    for (const name of Object.keys(this.spec.components?.schemas ?? {})) {
      if (!this.ajv.getSchema(`${SCHEMA_ROOT}#/$defs/${name}`)) this.compile({ $ref: `#/components/schemas/${name}` });
    }
  }

  /** The documented operation serving a concrete request path (literal segments win over parameters). */
  operationFor(method: string, rawPath: string): OperationRef {
    const path = rawPath.split('?')[0]!;
    const m = method.toLowerCase();
    const candidates = this.matchers.filter((t) => t.regex.test(path) && this.spec.paths[t.path][m]).sort((a, b) => a.params - b.params);
    const best = candidates[0];
    if (!best) throw new Error(`openapi.yaml documents no operation for ${method} ${path}`);
    return this.operations.find((o) => o.path === best.path && o.method === m)!;
  }

  documentedStatuses(op: OperationRef): string[] {
    return Object.keys(op.op.responses);
  }

  /**
   * Checks one response against the spec: the status is documented, the
   * content type is one the spec lists, and the body validates against its
   * schema. Records the pair as observed. Returns problems (empty when valid).
   */
  check(op: OperationRef, status: number, contentType: string | null, body: unknown): string[] {
    const key = `${op.id} ${status}`;
    const declared = op.op.responses[String(status)];
    if (!declared) return [`${op.method.toUpperCase()} ${op.path}: status ${status} is not documented`];
    this.observed.add(key);
    const response = deref(this.spec, declared);
    const content: Record<string, Json> | undefined = response.content;
    if (!content) {
      return body === undefined || body === '' ? [] : [`${key}: documented without a body, got ${JSON.stringify(body).slice(0, 200)}`];
    }
    const mediaType = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
    const media = content[mediaType];
    if (!media) return [`${key}: content type ${mediaType || '(none)'} is not documented (${Object.keys(content).join(', ')})`];
    if (!media.schema) return [];
    const cacheKey = `${key} ${mediaType}`;
    let validate = this.validators.get(cacheKey);
    if (!validate) {
      validate = this.compile(media.schema);
      this.validators.set(cacheKey, validate);
    }
    if (validate(body)) return [];
    return [
      `${key}: body does not match the schema: ${this.ajv.errorsText(validate.errors, { separator: '; ' })}\n  body: ${JSON.stringify(body).slice(0, 1500)}`,
    ];
  }

  /** Checks a request body the app accepted against the documented request schema. */
  checkRequest(op: OperationRef, contentType: string | undefined, body: unknown): string[] {
    if (!op.op.requestBody) return body === undefined ? [] : [`${op.id}: sent a body to an operation documented without one`];
    const requestBody = deref(this.spec, op.op.requestBody);
    const mediaType = (contentType ?? 'application/json').split(';')[0]!.trim().toLowerCase();
    const schema = requestBody.content?.[mediaType]?.schema;
    if (!schema) return [`${op.id}: request content type ${mediaType} is not documented`];
    const cacheKey = `${op.id} request ${mediaType}`;
    let validate = this.validators.get(cacheKey);
    if (!validate) {
      validate = this.compile(schema);
      this.validators.set(cacheKey, validate);
    }
    return validate(body)
      ? []
      : [`${op.id}: an accepted request body does not match the documented schema: ${this.ajv.errorsText(validate.errors)}`];
  }
}

/** Hono `:param` (optionally with a `{regex}`) to OpenAPI `{param}`. */
export function honoPathToOpenApi(path: string): string {
  return path.replace(/:([A-Za-z0-9_]+)(\{[^}]*\})?/g, '{$1}');
}
