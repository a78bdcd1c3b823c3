#!/usr/bin/env bash
# deploy/fuzz-api.sh — fuzz the REST API against its own OpenAPI document with
# schemathesis: every operation of /openapi.json gets generated requests
# (valid and invalid), and every response must be no 5xx, match the documented
# schema, status code and content type.
#
#   ./deploy/fuzz-api.sh                 (after `cargo build --workspace --bins`)
#
# - schemathesis lives in a venv outside the clone, created once and reused:
#   ${CRONSHARD_TOOLS_DIR:-$HOME/.cache/cronshard}/fuzz-venv (pip only).
# - cronshard-api comes from ${CARGO_TARGET_DIR:-target}/debug; it runs on a free
#   loopback port against a fresh database cronshard_fuzz_<random> (dropped at
#   the end) and a unique CLUSTER_NAME; Redis/RabbitMQ are the local defaults.
# - FUZZ_MAX_EXAMPLES (default 25) bounds the test cases per operation;
#   FUZZ_SEED makes a run reproducible. Reports land in $FUZZ_REPORT_DIR
#   (default: a temporary directory, printed).
# Exits non-zero on any failure, after schemathesis' report.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

TOOLS=${CRONSHARD_TOOLS_DIR:-$HOME/.cache/cronshard}
VENV=$TOOLS/fuzz-venv
TARGET=${CARGO_TARGET_DIR:-target}
case $TARGET in /*) ;; *) TARGET=$ROOT/$TARGET ;; esac
BIN=$TARGET/debug/cronshard-api
PG_ADMIN=${FUZZ_PG_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres}

[[ -x $BIN ]] || {
    echo "fuzz-api.sh: $BIN not found; run cargo build --workspace --bins first" >&2
    exit 1
}

if [[ ! -x $VENV/bin/schemathesis ]]; then
    echo "==> creating $VENV (schemathesis)"
    mkdir -p "$TOOLS"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    "$VENV/bin/pip" install --quiet 'schemathesis>=4,<5'
fi

SUFFIX=$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
DB=cronshard_fuzz_$SUFFIX
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB
export CLUSTER_NAME=fuzz-$SUFFIX
export API_TOKENS=
# A throwaway key-encryption key, so that the routes which seal secrets
# (secret headers, signing keys) are fuzzed past their "not configured" answer.
SECRETS_KEK=fuzz:$(head -c 32 /dev/urandom | base64 | tr -d '\n')
export SECRETS_KEK
REPORT_DIR=${FUZZ_REPORT_DIR:-$(mktemp -d -t cronshard-fuzz.XXXXXX)}
LOG=$REPORT_DIR/cronshard-api.log
API_PID=

cleanup() {
    if [[ -n $API_PID ]] && kill -0 "$API_PID" 2>/dev/null; then
        kill "$API_PID" 2>/dev/null || true
        wait "$API_PID" 2>/dev/null || true
    fi
    psql -q "$PG_ADMIN" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT

psql -q "$PG_ADMIN" -c "CREATE DATABASE $DB" >/dev/null
"$BIN" migrate >"$REPORT_DIR/migrate.log" 2>&1 || {
    cat "$REPORT_DIR/migrate.log" >&2
    exit 1
}

# A free loopback port: bind to 0, read it back, release it.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
LISTEN_ADDR=127.0.0.1:$PORT "$BIN" >"$LOG" 2>&1 &
API_PID=$!
BASE=http://127.0.0.1:$PORT
for _ in $(seq 1 100); do
    curl -fsS "$BASE/healthz" >/dev/null 2>&1 && break
    kill -0 "$API_PID" 2>/dev/null || {
        cat "$LOG" >&2
        exit 1
    }
    sleep 0.1
done

# One worker: with several threads, hypothesis 6 on Python 3.11 intermittently fails inside
# its own code ("AST constructor recursion depth mismatch"), a runtime error unrelated to the API.
echo "==> schemathesis against $BASE/openapi.json (database $DB, reports in $REPORT_DIR)"
rc=0
# From the report directory: schemathesis keeps a .schemathesis/ cache in its working directory.
(cd "$REPORT_DIR" && "$VENV/bin/schemathesis" run "$BASE/openapi.json" \
    --checks not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance \
    --max-examples "${FUZZ_MAX_EXAMPLES:-25}" \
    ${FUZZ_SEED:+--seed "$FUZZ_SEED"} \
    --workers 1 \
    --request-timeout 10 \
    --suppress-health-check all \
    --report junit --report-dir "$REPORT_DIR") || rc=$?

if ((rc != 0)); then
    echo "==> fuzz-api.sh: schemathesis found failures (exit $rc); server log: $LOG" >&2
    grep -E '"level":"(ERROR|WARN)"|ERROR|panicked' "$LOG" | tail -20 >&2 || true
fi
exit "$rc"
