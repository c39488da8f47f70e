/** zod at the HTTP edge: every problem listed under one stable code. */
import type { Context } from 'hono';
import type { z } from 'zod';
import { BatonError } from '../protocol/errors.js';
import { parseWith } from '../protocol/records.js';
import { readJsonBody } from './body.js';

export function parseRequest<T>(schema: z.ZodType<T>, value: unknown, what: string): T {
  return parseWith(schema, value, what, 'INVALID_REQUEST');
}

/** The body, read strictly (body.ts) and parsed with the route's request schema from the contract (src/api). */
export async function parseJsonBody<S extends z.ZodType>(c: Context, maxBytes: number, schema: S): Promise<z.output<S>> {
  return parseRequest(schema, await readJsonBody(c, maxBytes), 'request body') as z.output<S>;
}

/** The path parameters, parsed with the route's params schema from the contract (src/api). */
export function parseParams<S extends z.ZodType>(c: Context, schema: S): z.output<S> {
  return parseRequest(schema, c.req.param(), 'path') as z.output<S>;
}

/**
 * Each query parameter at most once: a repeated one is ambiguous, so it is refused. (One with no
 * name, which Hono's parser drops, was refused before: see undeclared-input.ts.)
 */
function singleValuedQuery(c: Context): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, values] of Object.entries(c.req.queries())) {
    if (values.length !== 1) {
      throw new BatonError('INVALID_REQUEST', {
        message: `The query parameter "${name}" is given ${values.length} times; give it once.`,
        details: { parameter: name },
      });
    }
    // defineProperty, not assignment: a parameter named __proto__ must become
    // an own (and so refused, unknown) key rather than set the prototype.
    Object.defineProperty(out, name, { value: values[0] as string, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/** Parses the query string with a strict schema (unknown and repeated parameters are refused). */
export function parseQuery<T>(c: Context, schema: z.ZodType<T>): T {
  return parseRequest(schema, singleValuedQuery(c), 'query');
}
