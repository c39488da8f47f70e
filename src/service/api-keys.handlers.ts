/**
 * API-key lifecycle handlers (the admin key). Thin: parse, call one store
 * function, map the outcome.
 */
import type { OpenAPIHono, z } from '@hono/zod-openapi';
import { BatonError } from '../protocol/errors.js';
import { DEFAULT_ROTATION_GRACE_SECONDS, RotateApiKeyBody, rotateApiKeyRoute } from '../api/api-keys.js';
import { rotateApiKey } from '../store/api-keys.js';
import type { CommitCheck } from '../store/db.js';
import { apiKeyJson, createdApiKeyJson, UNKNOWN_KEY_ID, type ApiKeyJson, type CreatedApiKeyJson } from './api-key-views.js';
import { assertScope, authenticateRequest, evictApiKey } from './auth.js';
import { hasBody, readJsonBody } from './body.js';
import { newRouter, serve } from './router.js';
import { parseRequest } from './validate.js';
import type { AppEnv, ServiceDeps } from './types.js';

export async function rotateApiKeyHandler(
  deps: ServiceDeps,
  keyId: string,
  body: z.output<typeof RotateApiKeyBody>,
  gate: CommitCheck | undefined,
): Promise<{ key: CreatedApiKeyJson; previous: ApiKeyJson }> {
  const outcome = await rotateApiKey(
    deps.store.db,
    keyId,
    {
      graceSeconds: body.grace_seconds ?? DEFAULT_ROTATION_GRACE_SECONDS,
      expiresInSeconds: body.expires_in_seconds ?? null,
    },
    gate,
  );
  switch (outcome.kind) {
    case 'not-found':
      throw new BatonError('NOT_FOUND', { message: 'No tenant API key has this id.', suggestion: UNKNOWN_KEY_ID });
    case 'not-live':
      throw new BatonError('CONFLICT', {
        message: 'This API key is revoked or expired: rotation keeps a live key working while its successor is deployed.',
        suggestion: 'Create a new key instead (POST /v1/admin/tenants/{tenant}/api-keys, or baton keys create).',
      });
    case 'already-rotated':
      throw new BatonError('CONFLICT', {
        message: `This API key was rotated already: its successor ${outcome.successor} is live, and a second successor would be a live key nobody deployed.`,
        suggestion: `Rotate ${outcome.successor} instead, or revoke it first (DELETE /v1/admin/api-keys/${outcome.successor}, or baton keys revoke) if it was never deployed.`,
        details: { successor: outcome.successor },
      });
    case 'rotated': {
      // This node's cache must learn the old key's new expiry now (others within their TTL; verify at once).
      evictApiKey(deps, outcome.previous.id);
      const answer = { key: createdApiKeyJson(outcome.key, outcome.created), previous: apiKeyJson(outcome.previous) };
      deps.log.info('api key rotated', {
        tenant_id: answer.key.tenant_id,
        key_id: answer.key.id,
        rotated_from: answer.previous.id,
        previous_expires_at: answer.previous.expires_at,
      });
      return answer;
    }
  }
}

/** The lifecycle routes as a sub-app; the route is documented from its declaration in src/api/api-keys.ts. */
export function apiKeyLifecycleRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const app = newRouter();
  // The body is optional, so it is read here (strict reader: size, UTF-8, duplicate keys).
  serve(app, rotateApiKeyRoute, async (c) => {
    const auth = await authenticateRequest(deps, c);
    assertScope(auth, ['admin']);
    const raw = (await hasBody(c, deps.config.maxBodyBytes)) ? await readJsonBody(c, deps.config.maxBodyBytes) : {};
    const answer = await rotateApiKeyHandler(
      deps,
      c.req.param('id'),
      parseRequest(RotateApiKeyBody, raw, 'request body'),
      c.get('commitGate'),
    );
    c.header('Cache-Control', 'no-store');
    return c.json(answer, 201);
  });
  return app;
}
