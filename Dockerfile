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
# The service runs its TypeScript through tsx (a production dependency), the
# same way `npm start` does, so the image runs exactly the sources the tests
# ran; there is no separate compiled tree to drift from them. The build stage
# type-checks those sources and checks that openapi.yaml loads without the
# `yaml` devDependency, so a broken tree never becomes an image.

ARG NODE_IMAGE=node:20-bookworm-slim

# ---------------------------------------------------------------- build
# Full install (dev dependencies included) to type-check the sources.
FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --ignore-scripts
COPY tsconfig.json openapi.yaml ./
COPY bin ./bin
COPY migrations ./migrations
COPY src ./src
# tsconfig.json also includes test/ and bench/; they are not in the build
# context (.dockerignore), so this checks the shipped sources only.
RUN npx tsc -p tsconfig.json --noEmit
RUN node --import tsx --input-type=module -e "const m = await import('./src/service/docs.routes.ts'); m.loadApiDocs(m.findSpecFile());"

# ---------------------------------------------------------------- production dependencies
# Installed on the same base image as the runtime, so platform packages
# (esbuild's binary, used by tsx) match. Install scripts are not needed.
FROM ${NODE_IMAGE} AS prod-deps
WORKDIR /app
COPY package.json package-lock.json ./
COPY scripts ./scripts
# Dependencies' install scripts stay off; Baton's own driver fix is applied explicitly.
RUN npm ci --omit=dev --no-audit --no-fund --ignore-scripts \
 && node scripts/patch-postgres.mjs \
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
COPY --from=build /app/package.json /app/package-lock.json /app/tsconfig.json /app/openapi.yaml ./
COPY --from=build /app/bin ./bin
COPY --from=build /app/migrations ./migrations
COPY --from=build /app/src ./src

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
CMD ["node", "--import", "tsx", "src/main.ts"]
