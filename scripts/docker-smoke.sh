#!/usr/bin/env bash
# Operator check of the Docker image (issue 12): runs it with --read-only as the
# Dockerfile's header says and checks it end to end, on embedded PGlite and on
# PostgreSQL. NOT part of CI or `npm test`: it needs a Docker engine (CI has
# none) and, for the PostgreSQL half, PostgreSQL server binaries on this host.
#
#   scripts/docker-smoke.sh [options] [IMAGE]     IMAGE defaults to baton:local
#
# Run `scripts/docker-smoke.sh --help` for the options. Each check prints a line
# as it passes; the first failure stops the run with a non-zero exit. Containers,
# volumes, the throwaway PostgreSQL cluster and temp files are removed on exit.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/docker-smoke.sh [options] [IMAGE]

Runs the Baton image IMAGE (default baton:local) with --read-only and checks it:
  PGlite (default store), data in a fresh volume:
    /healthz and /readyz answer; the admin API creates a tenant, an API key and
    a trusted root; the README quickstart round trip (keygen, delegate --submit,
    invoke, POST /v1/verify allows, chain read back and verified offline) runs
    with the image's own `baton` CLI; the HEALTHCHECK turns healthy; the root
    file system refuses writes and the service runs as uid 1000; the logs show
    no write errors (EROFS) and no tsx; `docker stop` (SIGTERM) ends it with
    exit code 0 or 143.
  PostgreSQL (a throwaway cluster on 127.0.0.1, container with --network host):
    without BATON_MASTER_KEY it refuses to start, naming the variable; with it,
    the same checks as above.

Options:
  --build               build IMAGE from this repository first (docker build --network host)
  --node-image IMAGE    base image for --build (the Dockerfile's NODE_IMAGE build argument)
  --pg-bin DIR          PostgreSQL server binaries (initdb, pg_ctl); default $BATON_PG_BIN,
                        else /usr/lib/postgresql/15/bin
  --database-url URL    use this PostgreSQL database instead of starting a cluster
                        (must be reachable from a --network host container)
  --no-postgres         skip the PostgreSQL half
  --no-roundtrip        skip the quickstart round trip (admin API checks still run)
  -h, --help            this text

Needs docker and curl. As root, the PostgreSQL cluster runs as the `postgres` user.
Where the docker CLI has no buildx plugin, build with DOCKER_BUILDKIT=0 (the classic builder).
EOF
}

IMAGE=baton:local
BUILD=0
NODE_IMAGE=
PG_BIN=${BATON_PG_BIN:-/usr/lib/postgresql/15/bin}
DATABASE_URL_GIVEN=
POSTGRES=1
ROUNDTRIP=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=1 ;;
    --node-image) NODE_IMAGE=${2:?--node-image needs an image}; shift ;;
    --pg-bin) PG_BIN=${2:?--pg-bin needs a directory}; shift ;;
    --database-url) DATABASE_URL_GIVEN=${2:?--database-url needs a URL}; shift ;;
    --no-postgres) POSTGRES=0 ;;
    --no-roundtrip) ROUNDTRIP=0 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) IMAGE=$1 ;;
  esac
  shift
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUN_ID="baton-smoke-$$"
CONTAINERS=()
VOLUMES=()
PG_DIR=
WORK=$(mktemp -d "${TMPDIR:-/tmp}/${RUN_ID}.XXXXXX")

pass() { printf 'ok    %s\n' "$*"; }
info() { printf '      %s\n' "$*"; }
fail() {
  printf 'FAIL  %s\n' "$*" >&2
  exit 1
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }

as_postgres() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cleanup() {
  local status=$?
  set +e
  for c in "${CONTAINERS[@]}"; do
    if [[ $status -ne 0 ]] && docker inspect "$c" >/dev/null 2>&1; then
      echo "----- last log lines of $c" >&2
      docker logs --tail 15 "$c" >&2 2>&1
    fi
    docker rm -f -v "$c" >/dev/null 2>&1
  done
  for v in "${VOLUMES[@]}"; do docker volume rm -f "$v" >/dev/null 2>&1; done
  if [[ -n $PG_DIR ]]; then
    as_postgres "$PG_BIN/pg_ctl" stop -D "$PG_DIR/data" -m immediate -w >/dev/null 2>&1
    rm -rf "$PG_DIR"
  fi
  rm -rf "$WORK"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v docker >/dev/null || fail "docker is not installed"
command -v curl >/dev/null || fail "curl is not installed"
docker info >/dev/null 2>&1 || fail "no Docker engine answers (docker info)"

# A loopback port nothing listens on (bash's /dev/tcp connects fail on a free port).
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  fail "no free port found"
}

# `json FIELD` reads JSON on stdin and prints FIELD, with the image's own Node (the host needs none).
json() { docker run --rm -i --network none "$IMAGE" node -e "let s='';process.stdin.on('data',(d)=>s+=d).on('end',()=>{const v=JSON.parse(s)$1;if(v===undefined)process.exit(1);console.log(typeof v==='string'?v:JSON.stringify(v))})"; }

# ---------------------------------------------------------------- image

if [[ $BUILD -eq 1 ]]; then
  args=(build --network host -t "$IMAGE")
  [[ -n $NODE_IMAGE ]] && args+=(--build-arg "NODE_IMAGE=$NODE_IMAGE")
  info "building $IMAGE from $REPO${NODE_IMAGE:+ on $NODE_IMAGE} ..."
  started=$(now_ms)
  docker "${args[@]}" "$REPO" >"$WORK/build.log" 2>&1 || {
    tail -30 "$WORK/build.log" >&2
    fail "docker build"
  }
  pass "built $IMAGE in $(secs $(($(now_ms) - started))) s"
fi
docker image inspect "$IMAGE" >/dev/null 2>&1 || fail "no image $IMAGE (build it, or pass --build)"
pass "image $IMAGE: $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}'), node $(docker run --rm --network none "$IMAGE" node --version)"
docker run --rm --network none "$IMAGE" sh -c 'test ! -e node_modules/tsx && test ! -e node_modules/typescript' ||
  fail "the image carries tsx or typescript (dev dependencies)"
pass "no tsx or typescript in the image's node_modules"

ADMIN_KEY="bt_admin_smoke_$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
MASTER_KEY=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')

# ---------------------------------------------------------------- checks on a running container

# wait_ready NAME URL DATABASE: /healthz then /readyz answer, naming the expected database.
wait_ready() {
  local name=$1 url=$2 database=$3 started=$4 body
  for _ in $(seq 1 240); do
    if curl -sf "$url/healthz" >/dev/null 2>&1; then break; fi
    [[ $(docker inspect -f '{{.State.Running}}' "$name") == true ]] || fail "$name exited before answering /healthz"
    sleep 0.25
  done
  curl -sf "$url/healthz" >/dev/null || fail "$name: /healthz did not answer within 60 s"
  pass "$name: /healthz 200 after $(secs $(($(now_ms) - started))) s"
  body=$(curl -sf "$url/readyz") || fail "$name: /readyz did not answer 200"
  [[ $body == *'"ready"'* && $body == *"\"$database\""* ]] || fail "$name: /readyz said $body, expected ready on $database"
  pass "$name: /readyz $body"
}

# admin_and_roundtrip NAME URL: the admin API, then the README quickstart with the image's CLI.
admin_and_roundtrip() {
  local name=$1 url=$2 tenant key dir operator agent_a agent_b root leaf verdict tree
  local auth=(-H "Authorization: Bearer $ADMIN_KEY" -H 'content-type: application/json')
  tenant=$(curl -sf -X POST "$url/v1/admin/tenants" "${auth[@]}" -d '{"name":"smoke"}' | json .id) ||
    fail "$name: POST /v1/admin/tenants"
  pass "$name: admin API created tenant $tenant"
  key=$(curl -sf -X POST "$url/v1/admin/tenants/$tenant/api-keys" "${auth[@]}" \
    -d '{"scopes":["issue","verify","report","audit"]}' | json .key) || fail "$name: POST /v1/admin/tenants/{id}/api-keys"
  pass "$name: admin API created an API key (${key:0:6}...)"
  [[ $ROUNDTRIP -eq 1 ]] || return 0

  # The CLI runs from the image too (read-only as well), as uid 1000, writing its files in $dir.
  dir="$WORK/$name-cli"
  mkdir -p "$dir"
  chmod 0777 "$dir"
  baton() { docker run --rm --read-only --network host -u 1000:1000 -v "$dir:/work" -w /work "$IMAGE" node /app/bin/baton.js "$@"; }
  operator=$(baton keygen --out operator.key 2>/dev/null) || fail "$name: baton keygen"
  agent_a=$(baton keygen --out agent-a.key 2>/dev/null) || fail "$name: baton keygen"
  agent_b=$(baton keygen --out agent-b.key 2>/dev/null) || fail "$name: baton keygen"
  curl -sf -X POST "$url/v1/admin/tenants/$tenant/roots" "${auth[@]}" -d "{\"did\":\"$operator\"}" >/dev/null ||
    fail "$name: POST /v1/admin/tenants/{id}/roots"
  pass "$name: admin API trusts the operator's root $operator"
  root=$(baton delegate --key operator.key --to "$agent_a" --tools web_search,file_read --max-cost 1 --max-calls 100 \
    --out root.json --submit --server "$url" 2>/dev/null) || fail "$name: baton delegate (root) --submit"
  leaf=$(baton delegate --key agent-a.key --parent root.json --to "$agent_b" --tools web_search --max-cost 0.1 \
    --max-calls 3 --out chain.json --submit --server "$url" 2>/dev/null) || fail "$name: baton delegate (sub) --submit"
  pass "$name: submitted a root and a sub-delegation ($leaf)"
  baton invoke --key agent-b.key --chain chain.json --tool web_search --tool-server mcp://search \
    --args '{"query":"weather","estimated_cost_usd":0.05}' --out bundle.json >/dev/null 2>&1 || fail "$name: baton invoke"
  verdict=$(curl -s -X POST "$url/v1/verify" -H "Authorization: Bearer $key" -H 'content-type: application/json' \
    -d "@$dir/bundle.json" | json .valid) || fail "$name: POST /v1/verify gave no JSON"
  [[ $verdict == true ]] || fail "$name: POST /v1/verify did not allow the invocation"
  pass "$name: POST /v1/verify allowed the signed invocation"
  curl -sf "$url/v1/delegations/$leaf/chain" -H "Authorization: Bearer $key" >"$dir/fetched.json" ||
    fail "$name: GET /v1/delegations/{hash}/chain"
  baton verify fetched.json --chain-only --trust "$operator" >/dev/null 2>&1 || fail "$name: baton verify of the fetched chain"
  pass "$name: the chain read back verifies offline against the operator's root"
  tree=$(baton chain "$root" --server "$url" --api-key "$key" 2>/dev/null) || fail "$name: baton chain"
  grep -q 'calls   1/3 used' <<<"$tree" || fail "$name: baton chain does not show the counted call"
  pass "$name: baton chain shows the call counted (1/3)"
}

# wait_healthy NAME STARTED_MS: Docker's own HEALTHCHECK (first probe 30 s after start).
wait_healthy() {
  local name=$1 started=$2 status
  for _ in $(seq 1 150); do
    status=$(docker inspect -f '{{.State.Health.Status}}' "$name")
    case "$status" in
      healthy)
        pass "$name: HEALTHCHECK healthy $(secs $(($(now_ms) - started))) s after docker run"
        return
        ;;
      unhealthy) fail "$name: HEALTHCHECK unhealthy" ;;
    esac
    sleep 1
  done
  fail "$name: HEALTHCHECK still $status after 150 s"
}

# read_only_checks NAME: the root file system refuses writes, the service is uid 1000, logs are clean.
read_only_checks() {
  local name=$1 logs
  [[ $(docker inspect -f '{{.HostConfig.ReadonlyRootfs}}' "$name") == true ]] || fail "$name: not --read-only"
  if docker exec "$name" sh -c 'touch /app/smoke 2>/dev/null || touch /tmp/smoke 2>/dev/null'; then
    fail "$name: could write to the root file system"
  fi
  [[ $(docker exec "$name" id -u) == 1000 ]] || fail "$name: the service does not run as uid 1000"
  pass "$name: root file system read-only (writes to /app and /tmp refused), service runs as uid 1000"
  logs=$(docker logs "$name" 2>&1)
  if grep -Eiq 'EROFS|read-only file system' <<<"$logs"; then fail "$name: write errors in the logs"; fi
  if grep -Eiq 'tsx' <<<"$logs"; then fail "$name: the logs mention tsx"; fi
  if grep -Eq '"level":"error"' <<<"$logs"; then fail "$name: error lines in the logs"; fi
  pass "$name: logs show no EROFS, no tsx, no errors ($(wc -l <<<"$logs") lines)"
}

# stop_check NAME: docker stop (SIGTERM) ends it gracefully, well before Docker's 10 s SIGKILL.
stop_check() {
  local name=$1 started code took
  started=$(now_ms)
  docker stop "$name" >/dev/null
  took=$(($(now_ms) - started))
  code=$(docker inspect -f '{{.State.ExitCode}}' "$name")
  [[ $code == 0 || $code == 143 ]] || fail "$name: exit code $code after docker stop (expected 0 or 143)"
  ((took < 9000)) || fail "$name: docker stop took $(secs "$took") s (SIGTERM not handled?)"
  grep -q '"msg":"shutting down"' <<<"$(docker logs "$name" 2>&1)" || fail "$name: no 'shutting down' log line"
  pass "$name: docker stop took $(secs "$took") s, exit code $code, logged its shutdown"
}

# ---------------------------------------------------------------- PGlite

echo "== embedded PGlite, --read-only, data in a volume"
name="$RUN_ID-pglite"
volume="$RUN_ID-data"
port=$(free_port)
url="http://127.0.0.1:$port"
VOLUMES+=("$volume")
CONTAINERS+=("$name")
started=$(now_ms)
docker run -d --name "$name" --read-only -v "$volume:/var/lib/baton" -e BATON_ADMIN_KEY="$ADMIN_KEY" \
  -p "127.0.0.1:$port:8080" "$IMAGE" >/dev/null
wait_ready "$name" "$url" pglite "$started"
admin_and_roundtrip "$name" "$url"
wait_healthy "$name" "$started"
read_only_checks "$name"
stop_check "$name"

# ---------------------------------------------------------------- PostgreSQL

if [[ $POSTGRES -eq 1 ]]; then
  echo "== PostgreSQL, --read-only, --network host"
  if [[ -n $DATABASE_URL_GIVEN ]]; then
    database_url=$DATABASE_URL_GIVEN
    pass "using the given DATABASE_URL"
  else
    [[ -x $PG_BIN/initdb && -x $PG_BIN/pg_ctl ]] || fail "no initdb/pg_ctl in $PG_BIN (set --pg-bin, or --no-postgres)"
    PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/${RUN_ID}-pg.XXXXXX")
    [[ $(id -u) -eq 0 ]] && chown postgres: "$PG_DIR"
    pg_port=$(free_port)
    as_postgres "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth=trust --encoding=UTF8 --no-locale --no-sync \
      >"$WORK/initdb.log" 2>&1 || {
      cat "$WORK/initdb.log" >&2
      fail "initdb"
    }
    as_postgres "$PG_BIN/pg_ctl" start -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
      -o "-p $pg_port -h 127.0.0.1 -k $PG_DIR -c fsync=off" >/dev/null || {
      tail -20 "$PG_DIR/server.log" >&2
      fail "pg_ctl start"
    }
    database_url="postgres://postgres@127.0.0.1:$pg_port/postgres"
    pass "throwaway PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$pg_port"
  fi

  name="$RUN_ID-pg-nokey"
  CONTAINERS+=("$name")
  port=$(free_port)
  set +e
  timeout 60 docker run --name "$name" --read-only --network host -e PORT="$port" -e DATABASE_URL="$database_url" \
    -e BATON_ADMIN_KEY="$ADMIN_KEY" "$IMAGE" >"$WORK/nokey.log" 2>&1
  code=$?
  set -e
  [[ $code -ne 0 && $code -ne 124 ]] || fail "without BATON_MASTER_KEY it did not refuse to start (exit $code)"
  grep -q 'BATON_MASTER_KEY' "$WORK/nokey.log" || fail "without BATON_MASTER_KEY: the refusal does not name it"
  pass "without BATON_MASTER_KEY it refuses to start (exit $code): $(grep -m1 BATON_MASTER_KEY "$WORK/nokey.log" | cut -c1-110)..."

  name="$RUN_ID-pg"
  CONTAINERS+=("$name")
  port=$(free_port)
  url="http://127.0.0.1:$port"
  started=$(now_ms)
  docker run -d --name "$name" --read-only --network host -e PORT="$port" -e DATABASE_URL="$database_url" \
    -e BATON_MASTER_KEY="$MASTER_KEY" -e BATON_ADMIN_KEY="$ADMIN_KEY" "$IMAGE" >/dev/null
  wait_ready "$name" "$url" postgres "$started"
  admin_and_roundtrip "$name" "$url"
  wait_healthy "$name" "$started"
  read_only_checks "$name"
  stop_check "$name"
fi

echo "all checks passed"
