# syntax=docker/dockerfile:1
#
# Baton service image.
#
#   docker build -t baton .
#   docker run -p 8080:8080 -e DATABASE_URL=postgres://... -e BATON_MASTER_KEY=<64 hex> \
#              -e BATON_ADMIN_KEY=<at least 24 chars> baton
#
# Without DATABASE_URL the service runs on embedded PGlite in /var/lib/baton
# (a volume); without BATON_MASTER_KEY it generates a development key there
# and warns. Set both in production.
#
# The image runs the compiled server package (dist/packages/server, built by
# scripts/build.mjs, the same tree `npm start` runs and `npm pack` ships) with
# plain Node: no tsx, no compiler and nothing written at run time outside the
# data volume, so it runs with --read-only:
#
#   docker run --read-only -v baton-data:/var/lib/baton -p 8080:8080 ... baton
#
# scripts/docker-smoke.sh [--build] [IMAGE] checks exactly that end to end, on
# PGlite and on PostgreSQL (an operator check: needs a Docker engine, not in CI).
#
# The build stage type-checks while compiling (tsc fails the build on any
# error) and checks that the built package generates the openapi.yaml it ships.

# Node 24 is the active LTS (supported into 2028); the code also runs on 20.19+ and 22.
ARG NODE_IMAGE=node:24-bookworm-slim

# ---------------------------------------------------------------- build
# Full install (dev dependencies: TypeScript, esbuild) to compile and assemble the packages.
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.json tsconfig.build.json openapi.yaml LICENSE ./
COPY scripts ./scripts
COPY migrations ./migrations
COPY src ./src
RUN node scripts/build.mjs
# The served document is generated from the compiled routes: it must equal the openapi.yaml the package ships.
RUN node --input-type=module -e "const { generatedApiDocument } = await import('./dist/packages/server/lib/service/app.js'); const { toYaml } = await import('./dist/packages/server/lib/api/yaml.js'); const { readFileSync } = await import('node:fs'); if (toYaml(generatedApiDocument()) !== readFileSync('dist/packages/server/openapi.yaml', 'utf8')) { console.error('build: the compiled routes do not generate the shipped openapi.yaml (npm run openapi)'); process.exit(1); }"

# ---------------------------------------------------------------- production dependencies
# Installed on the same base image as the runtime, so platform packages match.
# No install scripts: nothing is patched at install; the server package
# carries its own guarded copy of the postgres.js driver (vendor/postgres).
FROM ${NODE_IMAGE} AS prod-deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts \
 && npm cache clean --force

# ---------------------------------------------------------------- runtime
FROM ${NODE_IMAGE} AS runtime
LABEL org.opencontainers.image.title="baton" \
      org.opencontainers.image.description="Signed DRS 4.0 delegation records for AI agents, verified fail-closed." \
      org.opencontainers.image.licenses="Apache-2.0"

ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    BATON_DATA_DIR=/var/lib/baton

WORKDIR /app
# Code and dependencies stay owned by root (read-only to the service user);
# only the data folder is writable by it.
RUN mkdir -p /var/lib/baton && chown node:node /var/lib/baton
COPY --from=prod-deps /app/node_modules ./node_modules
# The server package itself: package.json, lib/, cli/, bin/, vendor/, migrations/, openapi.yaml.
COPY --from=build /app/dist/packages/server ./

# The unprivileged user of the official Node image (uid 1000).
USER node
VOLUME ["/var/lib/baton"]
EXPOSE 8080

# Liveness through Node itself (the slim image has no curl or wget).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 8080) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

# Node runs as PID 1 directly (not under npm), so SIGTERM reaches the
# service's handler and it shuts down gracefully: stops accepting, finishes
# in-flight requests, closes the database.
STOPSIGNAL SIGTERM
CMD ["node", "lib/main.js"]
