/**
 * The API-key lifecycle routes, declared once: rotation without downtime.
 * (Creating, listing and revoking keys are declared with the other admin
 * routes, and so are the key shapes.)
 */
import { createRoute, z } from '@hono/zod-openapi';
import { ApiKey, ApiKeyId, CreatedApiKey, keyLifetimeSeconds, MAX_ROTATION_GRACE_SECONDS, wholeSeconds } from './admin.js';
import {
  AdminBadRequestResponse,
  ConflictResponse,
  ForbiddenResponse,
  InternalResponse,
  NotFoundResponse,
  PayloadTooLargeResponse,
  StorageUnavailableResponse,
  UnauthorizedResponse,
} from './common.js';

/** The old key's grace period when the request names none: a day to deploy the new key. */
export const DEFAULT_ROTATION_GRACE_SECONDS = 86_400;

export const RotateApiKeyBody = z
  .strictObject({
    grace_seconds: wholeSeconds(0, MAX_ROTATION_GRACE_SECONDS, '30 days')
      .optional()
      .openapi({ description: 'How long the old key stays valid; default 86400 (24 h). 0 retires it now.' }),
    expires_in_seconds: keyLifetimeSeconds().openapi({ description: "The new key's lifetime; default: it never expires." }),
  })
  .openapi('RotateApiKeyRequest');

export const RotatedApiKey = z
  .strictObject({
    key: CreatedApiKey,
    previous: ApiKey,
  })
  .openapi('RotatedApiKey');

export const rotateApiKeyRoute = createRoute({
  method: 'post',
  path: '/v1/admin/api-keys/{id}/rotate',
  tags: ['admin'],
  operationId: 'rotateApiKey',
  summary: 'Rotate an API key without downtime',
  description:
    "Mints a new key with the old one's tenant, scopes, name and tool server, and brings the old key's expiry forward to the end of the grace period (never later than it already was). Both keys work during the window. The body is optional. Responses are `Cache-Control: no-store`.",
  'x-baton-scopes': ['admin'],
  security: [{ bearerAuth: [] }],
  request: {
    params: z.object({ id: ApiKeyId }),
    body: { required: false, content: { 'application/json': { schema: RotateApiKeyBody } } },
  },
  responses: {
    201: {
      description: 'The new key (secret shown once) and the old key with its new expiry.',
      content: { 'application/json': { schema: RotatedApiKey } },
    },
    400: AdminBadRequestResponse(),
    401: UnauthorizedResponse(),
    403: ForbiddenResponse('Not the admin key (`FORBIDDEN`).'),
    404: NotFoundResponse('No tenant API key has this id (`NOT_FOUND`).'),
    409: ConflictResponse(
      'The key is revoked or expired: there is nothing to keep alive; create a new key. Or it was rotated already and a successor (rotated from it, or from a successor of it) is live (`details.successor`): rotate that one instead (`CONFLICT`).',
    ),
    413: PayloadTooLargeResponse(),
    500: InternalResponse(),
    503: StorageUnavailableResponse(),
  },
});
