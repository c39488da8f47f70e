/** POST /v1/explain (contract style); handler in src/service/explain.handlers.ts. */
import { createRoute, z } from '@hono/zod-openapi';
import { MAX_CHAIN_DEPTH } from '../protocol/records.js';
import { RecordHash } from './common.js';
import { ErrorSchema } from './tools.js';

export const ExplainBody = z
  .strictObject({
    /** Stored delegations of the tenant, root first. */
    dr_chain: z.array(RecordHash).min(1).max(MAX_CHAIN_DEPTH),
    /** The args the call would carry. */
    args: z.record(z.string(), z.unknown()),
    /** Runtime facts to assume; by default read from the store (near_limit) or false. */
    context: z.strictObject({ near_limit: z.boolean().optional(), cost_calibration: z.boolean().optional() }).optional(),
  })
  .openapi('ExplainRequest', {
    example: { dr_chain: ['sha256:…'], args: { tool: 'crm_export', estimated_cost_usd: 0.1, write_access: true, pii_access: false } },
  });

const ExplanationSchema = z
  .object({
    decision: z.enum(['allow', 'deny', 'require_approval']),
    violations: z.array(z.object({ code: z.string(), field: z.string(), remediation: z.string() }).passthrough()),
    catalog_version: z.int(),
  })
  .passthrough()
  .openapi('Explanation');

const json = (schema: z.ZodType, description: string) => ({ description, content: { 'application/json': { schema } } });

export const explainRoute = createRoute({
  method: 'post',
  path: '/v1/explain',
  summary: 'Every unmet condition of a hypothetical call, each with a remediation; nothing is counted',
  request: { body: { required: true, content: { 'application/json': { schema: ExplainBody } } } },
  responses: {
    200: json(ExplanationSchema, 'The explanation'),
    400: json(ErrorSchema, 'Invalid request'),
    401: json(ErrorSchema, 'No valid API key'),
    403: json(ErrorSchema, 'Scope missing'),
    404: json(ErrorSchema, 'A delegation of dr_chain is not stored for this tenant'),
  },
});
