/**
 * The API-key lifecycle routes, declared once: rotation without downtime.
 * (Creating, listing and revoking keys are declared with the other admin
 * routes.)
 */
import { createRoute, z } from '@hono/zod-openapi';
import { MAX_KEY_LIFETIME_SECONDS, MAX_ROTATION_GRACE_SECONDS } from '../store/api-keys.js';

/** The old key's grace period when the request names none: a day to deploy the new key. */
export const DEFAULT_ROTATION_GRACE_SECONDS = 86_400;

const ErrorBody = z
  .object({
    error: z.object({
      code: z.string(),
      message: z.string(),
      suggestion: z.string().optional(),
      details: z.record(z.string(), z.unknown()).optional(),
    }),
    request_id: z.string(),
  })
  .openapi('ErrorEnvelope');

const errorResponse = (description: string) => ({ description, content: { 'application/json': { schema: ErrorBody } } });

// Messages are predicates: parseRequest puts the field name in front of them.
const wholeSeconds = (min: number, max: number, maxText: string) =>
  z
    .number({ error: 'must be a whole number of seconds' })
    .int('must be a whole number of seconds')
    .min(min, min === 0 ? 'must not be negative' : `must be at least ${min}`)
    .max(max, `must be at most ${max} (${maxText})`);

/** A key's lifetime in seconds (creation and rotation); null or absent: it never expires. */
export const keyLifetimeSeconds = () => wholeSeconds(1, MAX_KEY_LIFETIME_SECONDS, '10 years').nullable().optional();

export const RotateApiKeyBody = z
  .strictObject({
    grace_seconds: wholeSeconds(0, MAX_ROTATION_GRACE_SECONDS, '30 days')
      .optional()
      .openapi({ description: 'How long the old key stays valid; default 86400 (24 h). 0 retires it now.', example: 3600 }),
    expires_in_seconds: keyLifetimeSeconds().openapi({
      description: "The new key's lifetime; default: it never expires.",
      example: 7_776_000,
    }),
  })
  .openapi('RotateApiKeyRequest');

const Timestamp = z.string().openapi({ format: 'date-time' });

const ApiKeyLifecycle = {
  id: z.string().openapi({ example: 'key_3f9c2a' }),
  tenant_id: z.string().nullable(),
  scopes: z.array(z.string()),
  name: z.string().nullable(),
  tool_server: z.string().nullable(),
  created_at: Timestamp,
  expires_at: Timestamp.nullable(),
  rotated_from: z.string().nullable(),
};

export const RotatedApiKey = z
  .object({
    key: z
      .object({ ...ApiKeyLifecycle, key: z.string().openapi({ description: 'The new secret. Shown only in this response.' }) })
      .openapi('RotatedNewApiKey'),
    previous: z
      .object({ ...ApiKeyLifecycle, revoked_at: Timestamp.nullable(), last_used_at: Timestamp.nullable() })
      .openapi('RotatedPreviousApiKey'),
  })
  .openapi('RotatedApiKey');

export const rotateApiKeyRoute = createRoute({
  method: 'post',
  path: '/v1/admin/api-keys/{id}/rotate',
  operationId: 'rotateApiKey',
  tags: ['admin'],
  summary: 'Rotate an API key without downtime',
  description:
    "Mints a new key with the old one's tenant, scopes, name and tool server, and brings the old key's expiry forward to the end of the grace period (never later than it already was). Both keys work during the window. The body is optional. Responses are `Cache-Control: no-store`.",
  security: [{ bearerAuth: [] }],
  request: {
    params: z.object({ id: z.string().openapi({ param: { name: 'id', in: 'path' }, example: 'key_3f9c2a' }) }),
    body: { required: false, content: { 'application/json': { schema: RotateApiKeyBody } } },
  },
  responses: {
    201: {
      description: 'The new key (secret shown once) and the old key with its new expiry.',
      content: { 'application/json': { schema: RotatedApiKey } },
    },
    400: errorResponse('The body is malformed (`INVALID_REQUEST`).'),
    401: errorResponse('No, or no valid, API key (`UNAUTHORIZED`).'),
    403: errorResponse('Not the admin key (`FORBIDDEN`).'),
    404: errorResponse('No tenant API key has this id (`NOT_FOUND`).'),
    409: errorResponse('The key is revoked or expired: there is nothing to keep alive; create a new key (`CONFLICT`).'),
    413: errorResponse('The body is too large (`PAYLOAD_TOO_LARGE`).'),
    503: errorResponse('The database is unavailable (`STORAGE_UNAVAILABLE`).'),
  },
});
