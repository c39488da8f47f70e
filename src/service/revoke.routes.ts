/**
 * POST /v1/delegations/{hash}/revoke: with an `issue` or admin API key and
 * {confirm: true, reason}, or without a key and {revocation: <signed JWS>}.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { DelegationHashParams, revokeDelegationRoute, RevokeWithKeyRequest, RevokeWithSignatureRequest } from '../api/delegations.js';
import { BatonError } from '../protocol/errors.js';
import { assertScope, authenticateRequest } from './auth.js';
import { readJsonBody } from './body.js';
import { revokeWithKey, revokeWithSignature } from './revoke.handlers.js';
import { parseJsonBody, parseParams, parseRequest } from './validate.js';
import { newRouter, serve } from './router.js';
import type { AppEnv, ServiceDeps } from './types.js';

export function revokeRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const r = newRouter();

  serve(r, revokeDelegationRoute, async (c) => {
    const { hash } = parseParams(c, DelegationHashParams);
    if (c.req.header('authorization') === undefined) {
      const raw = await readJsonBody(c, deps.config.maxBodyBytes);
      if (
        raw !== null &&
        typeof raw === 'object' &&
        !Array.isArray(raw) &&
        !('revocation' in raw) &&
        ('confirm' in raw || 'reason' in raw)
      ) {
        throw new BatonError('UNAUTHORIZED', {
          message: 'Revoking with {confirm, reason} needs an API key (issue scope of the tenant, or admin).',
          suggestion:
            'Send Authorization: Bearer <key>, or, without a key, {"revocation": "<JWS>"} signed by the issuer or an ancestor holder.',
        });
      }
      const body = parseRequest(RevokeWithSignatureRequest, raw, 'request body');
      return c.json(await revokeWithSignature(deps, hash, body.revocation, c.get('commitGate')), 200);
    }
    const auth = await authenticateRequest(deps, c);
    assertScope(auth, ['issue', 'admin']);
    const body = await parseJsonBody(c, deps.config.maxBodyBytes, RevokeWithKeyRequest);
    return c.json(await revokeWithKey(deps, auth, hash, body, c.get('commitGate')), 200);
  });

  return r;
}
