/**
 * Request and response examples for the docs page, derived from the generated
 * document's schemas, so an example can never describe a shape the API does
 * not have. A schema's own `example` wins (the API declares them on the
 * shared primitives: hashes, DIDs, JWSs); otherwise a value is built from the
 * schema: `const`, the first `enum` value, the first alternative of a union
 * that is not null, every property of an object (only the required ones for
 * a minimal request), one item of an array, and the smallest number the
 * bounds allow.
 */

type Schema = Record<string, unknown>;

/** Looks up `#/components/...` references in the document. */
export type RefResolver = (ref: string) => Schema | undefined;

/** Nesting bound; references already being expanded on the current path are not expanded again (recursive schemas). */
const MAX_DEPTH = 32;

function isObject(v: unknown): v is Schema {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Strings by format, for schemas that give a format but no example. */
const FORMAT_EXAMPLES: Record<string, string> = {
  'date-time': '2026-11-23T09:30:00.000Z',
  date: '2026-11-23',
  uri: 'https://baton.example.com/hooks/approvals',
  url: 'https://baton.example.com/hooks/approvals',
  email: 'ops@example.com',
  uuid: '0b9e4f0c-6f55-4c55-9a4e-2f1e7d8c3a10',
};

function typesOf(s: Schema): string[] {
  if (Array.isArray(s['type'])) return s['type'].filter((t): t is string => typeof t === 'string');
  return typeof s['type'] === 'string' ? [s['type']] : [];
}

function isNullSchema(s: unknown): boolean {
  return isObject(s) && (s['type'] === 'null' || ('const' in s && s['const'] === null));
}

function numberExample(s: Schema, integer: boolean): number {
  const min = typeof s['minimum'] === 'number' ? s['minimum'] : undefined;
  const exclusiveMin = typeof s['exclusiveMinimum'] === 'number' ? s['exclusiveMinimum'] : undefined;
  const max = typeof s['maximum'] === 'number' ? s['maximum'] : undefined;
  let n = integer ? 1 : 0.5;
  if (min !== undefined && n < min) n = min;
  if (exclusiveMin !== undefined && n <= exclusiveMin) n = integer ? Math.floor(exclusiveMin) + 1 : exclusiveMin + 0.5;
  if (max !== undefined && n > max) n = max;
  return n;
}

function stringExample(s: Schema, name: string | undefined): string {
  if (typeof s['format'] === 'string' && FORMAT_EXAMPLES[s['format']]) return FORMAT_EXAMPLES[s['format']]!;
  const minLength = typeof s['minLength'] === 'number' ? s['minLength'] : 0;
  const base = name ?? 'string';
  return base.length >= minLength ? base : base.padEnd(minLength, 'x');
}

/**
 * An example value for `schema`, or `undefined` when none can be built
 * (an unresolvable reference, or nesting deeper than MAX_DEPTH).
 * `name` is the property the value sits under, used for plain strings.
 */
export interface ExampleOptions {
  /** Leave out optional properties (a minimal request); objects with no required property keep all. */
  readonly requiredOnly?: boolean;
}

export function exampleFor(schema: unknown, resolveRef: RefResolver, options: ExampleOptions = {}): unknown {
  return build(schema, { resolveRef, requiredOnly: options.requiredOnly ?? false }, undefined, 0, new Set());
}

interface Walk {
  readonly resolveRef: RefResolver;
  readonly requiredOnly: boolean;
}

function build(schema: unknown, walk: Walk, name: string | undefined, depth: number, expanding: ReadonlySet<string>): unknown {
  const { resolveRef } = walk;
  if (!isObject(schema) || depth > MAX_DEPTH) return undefined;
  if ('example' in schema) return schema['example'];
  if (Array.isArray(schema['examples']) && schema['examples'].length > 0) return schema['examples'][0];
  if (typeof schema['$ref'] === 'string') {
    const ref = schema['$ref'];
    const target = expanding.has(ref) ? undefined : resolveRef(ref);
    return target === undefined ? undefined : build(target, walk, name, depth + 1, new Set([...expanding, ref]));
  }
  if ('const' in schema) return schema['const'];
  if (Array.isArray(schema['enum']) && schema['enum'].length > 0) return schema['enum'][0];
  if ('default' in schema) return schema['default'];
  for (const k of ['oneOf', 'anyOf'] as const) {
    const alts = schema[k];
    if (Array.isArray(alts) && alts.length > 0) {
      const chosen = alts.find((a) => !isNullSchema(a)) ?? alts[0];
      return build(chosen, walk, name, depth + 1, expanding);
    }
  }
  if (Array.isArray(schema['allOf'])) {
    let merged: Record<string, unknown> | undefined;
    for (const part of schema['allOf']) {
      const v = build(part, walk, name, depth + 1, expanding);
      if (isObject(v)) merged = { ...(merged ?? {}), ...v };
      else if (v !== undefined && merged === undefined) return v;
    }
    if (isObject(schema['properties'])) merged = { ...(merged ?? {}), ...(objectExample(schema, walk, depth, expanding) ?? {}) };
    return merged;
  }
  const types = typesOf(schema).filter((t) => t !== 'null');
  const type = types[0] ?? (isObject(schema['properties']) ? 'object' : undefined);
  switch (type) {
    case 'object':
      return objectExample(schema, walk, depth, expanding) ?? {};
    case 'array': {
      const item = build(schema['items'], walk, name, depth + 1, expanding);
      const minItems = typeof schema['minItems'] === 'number' ? schema['minItems'] : 0;
      if (item === undefined) return minItems > 0 ? undefined : [];
      return Array.from({ length: Math.max(1, minItems) }, () => item);
    }
    case 'string':
      return stringExample(schema, name);
    case 'integer':
      return numberExample(schema, true);
    case 'number':
      return numberExample(schema, false);
    case 'boolean':
      return true;
    default:
      return undefined;
  }
}

function objectExample(schema: Schema, walk: Walk, depth: number, expanding: ReadonlySet<string>): Record<string, unknown> | undefined {
  if (!isObject(schema['properties'])) return undefined;
  const required = new Set(Array.isArray(schema['required']) ? schema['required'] : []);
  const out: Record<string, unknown> = {};
  for (const [prop, sub] of Object.entries(schema['properties'])) {
    if (walk.requiredOnly && required.size > 0 && !required.has(prop)) continue;
    const v = build(sub, walk, prop, depth + 1, expanding);
    if (v !== undefined) out[prop] = v;
  }
  return out;
}

/** A resolver over a whole OpenAPI document's `#/...` pointers. */
export function documentResolver(document: unknown): RefResolver {
  return (ref) => {
    if (!ref.startsWith('#/')) return undefined;
    let target: unknown = document;
    for (const part of ref.slice(2).split('/'))
      target = isObject(target) ? target[part.replace(/~1/g, '/').replace(/~0/g, '~')] : undefined;
    return isObject(target) ? target : undefined;
  };
}
