/**
 * The service's public verification keys, current and retired: anyone can
 * fetch them to re-verify service receipts offline. Public routes, no API key.
 */
import type { OpenAPIHono } from '@hono/zod-openapi';
import { getJwksRoute, listServiceKeysRoute } from '../api/keys.js';
import { publishedServiceKeys, type PublishedServiceKey } from './signer.js';
import { newRouter, serve } from './router.js';
import type { AppEnv, ServiceDeps } from './types.js';

/** Short, so verifiers pick up a rotation quickly; retired keys never disappear. */
const CACHE_CONTROL = 'public, max-age=60';

function keyView(k: PublishedServiceKey) {
  return {
    kid: k.kid,
    did: k.did,
    alg: 'EdDSA' as const,
    public_key: k.publicKeyB64,
    status: k.status,
    created_at: k.createdAt.toISOString(),
    retired_at: k.retiredAt?.toISOString() ?? null,
  };
}

function jwkView(k: PublishedServiceKey) {
  return { kty: 'OKP' as const, crv: 'Ed25519' as const, x: k.publicKeyB64, kid: k.kid, use: 'sig' as const, alg: 'EdDSA' as const };
}

export function keyRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const app = newRouter();

  serve(app, listServiceKeysRoute, async (c) => {
    const keys = await publishedServiceKeys(deps.store.db);
    c.header('Cache-Control', CACHE_CONTROL);
    return c.json({ keys: keys.map(keyView) }, 200);
  });

  serve(app, getJwksRoute, async (c) => {
    const keys = await publishedServiceKeys(deps.store.db);
    c.header('Cache-Control', CACHE_CONTROL);
    return c.json({ keys: keys.map(jwkView) }, 200);
  });

  return app;
}
