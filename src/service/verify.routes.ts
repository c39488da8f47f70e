/** POST /v1/verify, its dry run POST /v1/verify/dry-run, and the DRS-compatible POST /verify (a `verify` key). */
import type { OpenAPIHono } from '@hono/zod-openapi';
import {
  BATON_ONLY_OPTIONS,
  verifyDrsRoute,
  verifyDryRunRoute,
  VerifyQuery,
  VerifyQueryDrs,
  VerifyRequestBody,
  VerifyRequestBodyDrs,
  verifyRoute,
} from '../api/verify.js';
import { requireScopeWithCache, tenantOf } from './auth.js';
import { hasBody, readJsonBody } from './body.js';
import { uploadTooSlow } from './deadline.js';
import { bundleFrom, verifyWithinDeadline } from './verify.handlers.js';
import { parseQuery, parseRequest } from './validate.js';
import { newRouter, serve } from './router.js';
import type { AppEnv, ServiceDeps } from './types.js';

export function verifyRoutes(deps: ServiceDeps): OpenAPIHono<AppEnv> {
  const r = newRouter();
  for (const route of [verifyRoute, verifyDryRunRoute, verifyDrsRoute]) {
    // The verify statements re-check the key in their transaction, so the hot path may use the key cache.
    serve(r, route, requireScopeWithCache(deps, 'verify'), async (c) => {
      const auth = c.get('auth');
      const drs = route === verifyDrsRoute;
      const dryRun = route === verifyDryRunRoute;
      // Refused before the body is read. (Most verifies carry no query at all, and skip the parse.)
      if (c.req.url.includes('?')) {
        if (!drs) parseQuery(c, VerifyQuery);
        // /verify ignores parameters it does not know, as drs-verify does (repeated ones too), and
        // refuses Baton's options: DRS clients read only `valid`.
        else parseRequest(VerifyQueryDrs, optionsIn(c.req.queries()), 'query');
      }
      // DRS clients may send the bundle only in X-DRS-Bundle, with no body at all. An empty header is none.
      const drsHeader = c.req.header('x-drs-bundle')?.trim() || undefined;
      // Reading the body moves the deadline on by the upload's time (deadline.ts, UploadClock): it
      // bounds the wait for a decision, not the client's link (a slow one was answered 503 "no
      // decision from the database").
      const raw =
        drsHeader !== undefined && !(await hasBody(c, deps.config.maxBodyBytes)) ? {} : await readJsonBody(c, deps.config.maxBodyBytes);
      // A body slower than the deadline, which then passed before the body was whole: the client's
      // doing, and nothing was sent to the database, so nothing was counted (a 503 said the database
      // was too slow). A deadline passed for another reason (a slow key lookup) keeps its 503.
      const upload = c.get('upload');
      if (upload.outlasted(deps.config.verifyDeadlineMs) && Date.now() >= c.get('deadline').getTime())
        throw uploadTooSlow(upload.ms, 'nothing was decided or counted');
      const parsed = { ...parseRequest(drs ? VerifyRequestBodyDrs : VerifyRequestBody, raw, 'request body'), dry_run: dryRun };
      // DRS clients read only `valid`: a re-sent invocation is a replay to them (it would run the tool
      // again), and a body that is not the signed args is a deny, as require_binding makes it on
      // /v1/verify: a DRS client that does not check `binding` itself would run the body, not what was
      // signed. (With no body nothing is compared: DRS's MCP middleware sends none.)
      const req = drs ? { ...parsed, retryAsReplay: true, ...(parsed.body !== undefined ? { require_binding: true } : {}) } : parsed;
      const path = drs ? '/verify' : route.path;
      const result = await verifyWithinDeadline(deps, auth, tenantOf(auth), req, bundleFrom(req, drsHeader), c.get('deadline'), path);
      return c.json(result.body, result.status);
    });
  }
  return r;
}

/** Baton's options among the query's parameters (their first values): all /verify looks at. */
function optionsIn(queries: Record<string, string[]>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const option of BATON_ONLY_OPTIONS) if (Object.hasOwn(queries, option)) out[option] = queries[option]![0] ?? '';
  return out;
}
