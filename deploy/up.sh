#!/usr/bin/env bash
# deploy/up.sh — run a whole cronshard cluster on this machine and watch a demo job fire.
#
#   ./deploy/up.sh                 run until Ctrl-C
#   ./deploy/up.sh --seconds 20    stop by itself after 20 s (same as DEMO_SECONDS=20)
#   ./deploy/up.sh --once          the same with 20 s; exit 1 if no delivery arrived
#   ./deploy/up.sh --no-build      use the binaries already built
#
# Builds the binaries, makes sure PostgreSQL, Redis and RabbitMQ run
# (deploy/scripts/services.sh), applies the migrations, starts the API, 3 scheduler
# nodes, 2 workers and a callback sink (all on 127.0.0.1, logs in .run/logs/),
# creates a demo job firing every 5 seconds into the sink and prints each delivery.
#
# Auth is on, as in production: a random token (64 hex digits) is kept in
# $CRONSHARD_STATE_DIR/api-token (mode 600; made on the first run, reused after; delete
# the file for a new one, or give API_TOKEN), passed to the API as API_TOKENS, and sent by
# this script from a header file (api-auth.header), never on a command line or in a URL.
# The script prints the dashboard URL (http://127.0.0.1:$API_PORT/ui/) and the token once.
#
# Secret header values are sealed at rest, so the API, the migrate step and the workers get a
# key-encryption key, SECRETS_KEK (the schedulers do not): kept in $CRONSHARD_STATE_DIR/secrets-kek
# (mode 600; "local-1:" and 32 random bytes in base64; made on the first run, reused after),
# or given as SECRETS_KEK (used for that run only, never written to the file). It goes through
# the environment and is never printed. Deleting the file makes the secret header values
# already stored unreadable; to change the key, rotate it as docs/security.md describes.
#
# Ctrl-C or SIGTERM stops every process this script started (SIGTERM, then SIGKILL
# after STOP_TIMEOUT seconds) and deletes the demo job; services this run had to
# start are stopped too (KEEP_SERVICES=1 keeps them), services that were already
# running are left alone. Nothing else is touched.
#
# Environment (defaults): API_PORT 8080, SINK_PORT 8099, SCHEDULERS 3,
# SCHEDULER_METRICS_PORT 9100 (node i uses +i), WORKERS 2, WORKER_METRICS_PORT 9110,
# DEMO_SECONDS 0 (= until Ctrl-C), DEMO_CRON '*/5 * * * * *', SKIP_BUILD 0,
# KEEP_DEMO_JOB 0, KEEP_SERVICES 0, STOP_TIMEOUT 15, READY_TIMEOUT 60,
# CRONSHARD_STATE_DIR .run, CLUSTER_NAME cronshard, LOG_FORMAT text,
# DATABASE_URL postgres://postgres@127.0.0.1:5432/cronshard,
# REDIS_URLS redis://127.0.0.1:6379, AMQP_URL amqp://guest:guest@127.0.0.1:5672/%2f,
# CALLBACK_ALLOW_CIDRS 127.0.0.0/8 (API and workers), CARGO_TARGET_DIR (cargo's default: target/),
# API_TOKEN (default: the one in $CRONSHARD_STATE_DIR/api-token, made when missing),
# SECRETS_KEK (default: the one in $CRONSHARD_STATE_DIR/secrets-kek, made when missing).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

DEMO_SECONDS=${DEMO_SECONDS:-0}
SKIP_BUILD=${SKIP_BUILD:-0}
ONCE=0
while (($#)); do
    case $1 in
        --once) ONCE=1 ;;
        --seconds)
            [[ $# -ge 2 ]] || {
                echo "up.sh: --seconds needs a number" >&2
                exit 2
            }
            DEMO_SECONDS=$2
            shift
            ;;
        --seconds=*) DEMO_SECONDS=${1#--seconds=} ;;
        --no-build) SKIP_BUILD=1 ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            echo "up.sh: unknown argument '$1' (try --help)" >&2
            exit 2
            ;;
    esac
    shift
done
if ((ONCE)) && [[ $DEMO_SECONDS == 0 ]]; then DEMO_SECONDS=20; fi

HOST=127.0.0.1 # loopback only, on purpose
API_PORT=${API_PORT:-8080}
SINK_PORT=${SINK_PORT:-8099}
SCHEDULERS=${SCHEDULERS:-3}
WORKERS=${WORKERS:-2}
SCHEDULER_METRICS_PORT=${SCHEDULER_METRICS_PORT:-9100}
WORKER_METRICS_PORT=${WORKER_METRICS_PORT:-9110}
STOP_TIMEOUT=${STOP_TIMEOUT:-15}
READY_TIMEOUT=${READY_TIMEOUT:-60}
DEMO_CRON=${DEMO_CRON:-'*/5 * * * * *'}
DEMO_JOB_NAME=cronshard-demo
KEEP_DEMO_JOB=${KEEP_DEMO_JOB:-0}
KEEP_SERVICES=${KEEP_SERVICES:-0}
STATE_DIR=${CRONSHARD_STATE_DIR:-$ROOT/.run}
LOG_DIR=$STATE_DIR/logs

export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/cronshard}
export REDIS_URLS=${REDIS_URLS:-redis://127.0.0.1:6379}
export AMQP_URL=${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}
export CLUSTER_NAME=${CLUSTER_NAME:-cronshard}
export LOG_FORMAT=${LOG_FORMAT:-text}
CALLBACK_ALLOW_CIDRS=${CALLBACK_ALLOW_CIDRS:-127.0.0.0/8}

API_URL=http://$HOST:$API_PORT
SINK_URL=http://$HOST:$SINK_PORT
SINK_LOG=$LOG_DIR/sink.log
TOKEN_FILE=$STATE_DIR/api-token
AUTH_HEADER=$STATE_DIR/api-auth.header
KEK_FILE=$STATE_DIR/secrets-kek
# Only the API, the migrate step and the workers get the key, each through its environment.
SECRETS_KEK=${SECRETS_KEK:-}
KEK_GIVEN=0
[[ -z $SECRETS_KEK ]] || KEK_GIVEN=1
export -n SECRETS_KEK

say() { printf '==> %s\n' "$*"; }
warn() { printf 'up.sh: %s\n' "$*" >&2; }
die() {
    warn "ERROR: $*"
    exit 1
}

for v in API_PORT SINK_PORT SCHEDULERS WORKERS SCHEDULER_METRICS_PORT WORKER_METRICS_PORT STOP_TIMEOUT READY_TIMEOUT DEMO_SECONDS; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, got '${!v}'"
done
((SCHEDULERS >= 1 && WORKERS >= 1)) || die "SCHEDULERS and WORKERS must be at least 1"

# ------------------------------------------------------------ port checks

port_open() {
    # shellcheck disable=SC2016 # $1 is expanded by the inner bash
    timeout 2 bash -c ': >"/dev/tcp/127.0.0.1/$1"' port_open "$1" 2>/dev/null
}

PORTS=("$API_PORT" "$SINK_PORT")
PORT_NAMES=(API sink)
for ((i = 0; i < SCHEDULERS; i++)); do
    PORTS+=($((SCHEDULER_METRICS_PORT + i)))
    PORT_NAMES+=("scheduler-$i metrics")
done
for ((i = 0; i < WORKERS; i++)); do
    PORTS+=($((WORKER_METRICS_PORT + i)))
    PORT_NAMES+=("worker-$i metrics")
done
dups=$(printf '%s\n' "${PORTS[@]}" | sort | uniq -d)
[[ -z $dups ]] || die "port(s) $(echo "$dups" | tr '\n' ' ')assigned twice; change API_PORT, SINK_PORT, SCHEDULER_METRICS_PORT or WORKER_METRICS_PORT"

check_ports() {
    local taken=() i
    for i in "${!PORTS[@]}"; do
        if port_open "${PORTS[i]}"; then taken+=("$HOST:${PORTS[i]} (${PORT_NAMES[i]})"); fi
    done
    if ((${#taken[@]})); then
        warn "ERROR: these ports are already taken: ${taken[*]}"
        warn "Is another ./deploy/up.sh running? Stop it, or pick other ports (and a state dir), e.g. API_PORT=18080 SINK_PORT=18099 SCHEDULER_METRICS_PORT=19100 WORKER_METRICS_PORT=19110 CRONSHARD_STATE_DIR=.run-2 ./deploy/up.sh"
        exit 1
    fi
}

# ------------------------------------------------------ process bookkeeping

PIDS=()
NAMES=()
JOB_ID=
SERVICES_RECORD=$STATE_DIR/services-started.up
CLEANING=0
FORCE=0
STARTED=0

# Each child runs in a session of its own, so the terminal's Ctrl-C reaches only
# this script, which then stops them in order (demo job deleted first). They get
# SIGTERM even if this script is SIGKILLed (Linux parent-death signal).
PDEATH=()
if command -v setsid >/dev/null 2>&1; then PDEATH+=(setsid); fi
if command -v setpriv >/dev/null 2>&1 && setpriv --pdeathsig TERM -- true 2>/dev/null; then
    PDEATH+=(setpriv --pdeathsig TERM --)
fi

running() { [[ -e /proc/$1 ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

# start NAME CMD...: starts CMD in the background with its output in $LOG_DIR/NAME.log.
start() {
    local name=$1
    shift
    STARTED=1
    "${PDEATH[@]}" "$@" >"$LOG_DIR/$name.log" 2>&1 </dev/null 8>&- &
    PIDS+=("$!")
    NAMES+=("$name")
    printf '%s %s\n' "$!" "$name" >>"$STATE_DIR/up.pids"
}

# shellcheck disable=SC2317 # called from the EXIT trap
stop_all() {
    ((${#PIDS[@]})) || return 0
    local i pid left deadline=$((SECONDS + STOP_TIMEOUT))
    say "stopping ${#PIDS[@]} processes started by this script (SIGTERM, up to ${STOP_TIMEOUT}s)"
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    while :; do
        left=0
        for pid in "${PIDS[@]}"; do if running "$pid"; then left=$((left + 1)); fi; done
        ((left > 0 && SECONDS < deadline && FORCE == 0)) || break
        sleep 0.2
    done
    for i in "${!PIDS[@]}"; do
        if running "${PIDS[i]}"; then
            warn "${NAMES[i]} (pid ${PIDS[i]}) did not stop in time: SIGKILL"
            kill -KILL "${PIDS[i]}" 2>/dev/null || true
        fi
    done
    wait "${PIDS[@]}" 2>/dev/null || true
    PIDS=()
    NAMES=()
}

# shellcheck disable=SC2317 # called from the EXIT trap
ledger_summary() {
    curl -fsS --max-time 5 -H @"$AUTH_HEADER" "$API_URL/v1/jobs/$JOB_ID/executions?limit=100" 2>/dev/null |
        # A row `running` before its slot is one a worker has armed for a coming slot, not a
        # delivery under way: named as such.
        jq -r '.items
            | map(if .status == "running" and ((.scheduled_at | sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601) > now)
                  then "armed for a coming slot" else .status end)
            | group_by(.) | map("\(.[0]) \(length)") | join(", ")' 2>/dev/null
}

# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    local rc=$?
    ((CLEANING == 0)) || return 0
    CLEANING=1
    trap 'FORCE=1' INT TERM # a second Ctrl-C skips the graceful wait
    if ((STARTED)); then echo; fi
    if [[ -n $JOB_ID ]] && running "${PIDS[0]:-0}"; then
        local summary
        summary=$(ledger_summary || true)
        [[ -z $summary ]] || say "ledger rows of the demo job: $summary"
        if [[ $KEEP_DEMO_JOB == 1 ]]; then
            say "keeping the demo job $JOB_ID (KEEP_DEMO_JOB=1)"
        elif curl -fsS --max-time 5 -o /dev/null -H @"$AUTH_HEADER" -X DELETE "$API_URL/v1/jobs/$JOB_ID"; then
            say "deleted the demo job $JOB_ID"
        else
            warn "could not delete the demo job $JOB_ID"
        fi
    fi
    stop_all
    rm -f "$STATE_DIR/up.pids"
    [[ -s $SERVICES_RECORD ]] || rm -f "$SERVICES_RECORD"
    if [[ -s $SERVICES_RECORD ]]; then
        if [[ $KEEP_SERVICES == 1 ]]; then
            say "leaving running the services this run started (KEEP_SERVICES=1); stop them with: deploy/scripts/services.sh stop-started $SERVICES_RECORD"
        else
            "$ROOT/deploy/scripts/services.sh" stop-started "$SERVICES_RECORD" 8>&- || rc=1
        fi
    fi
    if ((STARTED)); then say "stopped (exit $rc)"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ build

command -v cargo >/dev/null 2>&1 || die "cargo not found: install a Rust toolchain (https://rustup.rs); rust-toolchain.toml picks the version"
check_ports
mkdir -p "$LOG_DIR"
# One up.sh per state directory (fd 8 is closed for everything this script starts).
if command -v flock >/dev/null 2>&1; then
    exec 8>"$STATE_DIR/up.lock"
    flock -n 8 || die "another deploy/up.sh is using $STATE_DIR; stop it, or give this one its own CRONSHARD_STATE_DIR and ports"
fi
: >"$SERVICES_RECORD"
: >"$STATE_DIR/up.pids"

# The API token: given, kept from an earlier run, or made now. Only this user may read it.
(
    umask 077
    if [[ -n ${API_TOKEN:-} ]]; then
        printf '%s\n' "$API_TOKEN" >"$TOKEN_FILE"
    elif [[ ! -s $TOKEN_FILE ]]; then
        od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$TOKEN_FILE"
        echo >>"$TOKEN_FILE"
    fi
    printf 'authorization: Bearer %s\n' "$(head -n1 "$TOKEN_FILE")" >"$AUTH_HEADER"
)
API_TOKEN=$(head -n1 "$TOKEN_FILE")
[[ $API_TOKEN =~ ^[!-~]+$ ]] || die "$TOKEN_FILE must hold one token of visible ASCII characters"

# The key-encryption key of secret header values: given (this run only), kept from an earlier
# run, or made now. Only this user may read the file; the key is never printed.
if ((KEK_GIVEN)); then
    KEK_SOURCE="the environment (SECRETS_KEK)"
else
    KEK_SOURCE=$KEK_FILE
    (
        umask 077
        if [[ ! -s $KEK_FILE ]]; then
            printf 'local-1:%s\n' "$(head -c 32 /dev/urandom | base64 | tr -d '\n')" >"$KEK_FILE"
        fi
        chmod 600 "$KEK_FILE"
    )
    SECRETS_KEK=$(head -n1 "$KEK_FILE")
fi
# ID:BASE64KEY[,ID:BASE64KEY...], each key 32 bytes; the message never shows the value.
kek_valid() {
    local rest=$1, entry n=0
    while [[ -n $rest ]]; do
        entry=${rest%%,*}
        rest=${rest#*,}
        [[ $entry =~ ^[[:space:]]*$ ]] && continue
        [[ $entry =~ ^[[:space:]]*[A-Za-z0-9._-]{1,64}:[[:space:]]*[A-Za-z0-9+/]{43}=[[:space:]]*$ ]] || return 1
        n=$((n + 1))
    done
    ((n > 0))
}
kek_valid "$SECRETS_KEK" ||
    die "the key-encryption key from $KEK_SOURCE must be ID:BASE64KEY[,ID:BASE64KEY...], each key 32 bytes in base64 (e.g. local-1:\$(openssl rand -base64 32))"

if [[ $SKIP_BUILD == 1 ]]; then
    say "skipping the build (SKIP_BUILD=1)"
else
    say "cargo build --workspace --bins"
    cargo build --workspace --bins
fi
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$ROOT/$TARGET_DIR
BIN=$TARGET_DIR/debug
for b in cronshard-api cronshard-scheduler cronshard-worker cronshard-loadtest cronshard; do
    [[ -x $BIN/$b ]] || die "$BIN/$b is missing; build with: cargo build --workspace --bins"
done

# --------------------------------------------------------------- services

say "services (PostgreSQL, Redis, RabbitMQ)"
CRONSHARD_STATE_DIR=$STATE_DIR CRONSHARD_SERVICES_RECORD=$SERVICES_RECORD "$ROOT/deploy/scripts/services.sh" ensure 8>&-

say "migrations ($BIN/cronshard-api migrate)"
# With SECRETS_KEK, migrate also seals secret header values an older version stored in clear.
if ! SECRETS_KEK=$SECRETS_KEK timeout --foreground 120 "$BIN/cronshard-api" migrate >"$LOG_DIR/migrate.log" 2>&1 8>&-; then
    tail -n 20 "$LOG_DIR/migrate.log" >&2
    die "cronshard-api migrate failed (log: $LOG_DIR/migrate.log)"
fi

# ------------------------------------------------------------- the stack

check_ports
say "starting the API and the sink (logs: $LOG_DIR/)"
# The API refuses callback URLs naming an internal address the workers would refuse: same list.
# The token and the key go through the environment (not the command line, which ps shows).
API_TOKENS=$API_TOKEN SECRETS_KEK=$SECRETS_KEK start api env LISTEN_ADDR="$HOST:$API_PORT" CALLBACK_ALLOW_CIDRS="$CALLBACK_ALLOW_CIDRS" "$BIN/cronshard-api"
start sink "$BIN/cronshard-loadtest" sink --listen "$HOST:$SINK_PORT"

# Fails (and shows the log) when a started process has exited.
check_alive() {
    local i
    for i in "${!PIDS[@]}"; do
        if ! running "${PIDS[i]}"; then
            warn "${NAMES[i]} exited unexpectedly; last lines of $LOG_DIR/${NAMES[i]}.log:"
            tail -n 20 "$LOG_DIR/${NAMES[i]}.log" >&2 || true
            exit 1
        fi
    done
}

deadline=$((SECONDS + READY_TIMEOUT))
until curl -fsS --max-time 2 -o /dev/null "$API_URL/readyz" 2>/dev/null && port_open "$SINK_PORT"; do
    check_alive
    ((SECONDS < deadline)) || die "the API ($API_URL/readyz) or the sink did not get ready within ${READY_TIMEOUT}s; see $LOG_DIR/"
    sleep 0.5
done

# Demo jobs left behind by a run that could not clean up (kill -9) would fire into this sink too.
stale=$(curl -fsS --max-time 5 -H @"$AUTH_HEADER" "$API_URL/v1/jobs?name_prefix=$DEMO_JOB_NAME&limit=100" 2>/dev/null |
    jq -r --arg n "$DEMO_JOB_NAME" '.items[]? | select(.name == $n) | .id' 2>/dev/null || true)
for id in $stale; do
    if curl -fsS --max-time 5 -o /dev/null -H @"$AUTH_HEADER" -X DELETE "$API_URL/v1/jobs/$id"; then
        say "deleted a demo job left over by an earlier run: $id"
    fi
done

say "starting $SCHEDULERS schedulers and $WORKERS workers"
for ((i = 0; i < SCHEDULERS; i++)); do
    start "scheduler-$i" env NODE_ID="scheduler-$i" METRICS_ADDR="$HOST:$((SCHEDULER_METRICS_PORT + i))" "$BIN/cronshard-scheduler"
done
for ((i = 0; i < WORKERS; i++)); do
    SECRETS_KEK=$SECRETS_KEK start "worker-$i" env WORKER_ID="worker-$i" METRICS_ADDR="$HOST:$((WORKER_METRICS_PORT + i))" \
        CALLBACK_ALLOW_CIDRS="$CALLBACK_ALLOW_CIDRS" "$BIN/cronshard-worker"
done
deadline=$((SECONDS + 30))
live=0
while :; do
    check_alive
    live=$(curl -fsS --max-time 2 -H @"$AUTH_HEADER" "$API_URL/v1/cluster" 2>/dev/null | jq -r '.live_nodes // 0' 2>/dev/null || echo 0)
    if ((live >= SCHEDULERS || SECONDS >= deadline)); then break; fi
    sleep 0.5
done
((live >= SCHEDULERS)) || warn "only $live of $SCHEDULERS scheduler nodes are visible in $API_URL/v1/cluster after 30s; see $LOG_DIR/scheduler-*.log"

# ---------------------------------------------------------------- demo job

body=$(jq -n --arg name "$DEMO_JOB_NAME" --arg expr "$DEMO_CRON" --arg url "$SINK_URL/hook/demo" \
    '{name: $name, schedule: {kind: "cron", expr: $expr, timezone: "UTC"}, target: {kind: "http", url: $url, method: "POST"}}')
resp=$(curl -sS --max-time 10 -w '\n%{http_code}' -H @"$AUTH_HEADER" -H 'content-type: application/json' -d "$body" "$API_URL/v1/jobs") ||
    die "POST $API_URL/v1/jobs failed"
code=${resp##*$'\n'}
resp=${resp%$'\n'*}
[[ $code == 201 ]] || die "creating the demo job returned HTTP $code: $resp"
JOB_ID=$(jq -r '.id' <<<"$resp")
next=$(jq -r '.next_fire_at // "?"' <<<"$resp")

cat <<EOF

cronshard is running: cluster "$CLUSTER_NAME", $live scheduler node(s) live, $WORKERS worker(s).
  dashboard     $API_URL/ui/    (sign in with the API token)
  API token     $API_TOKEN
                (kept in $TOKEN_FILE; curl -H @$AUTH_HEADER sends it)
  secrets key   SECRETS_KEK of the API and workers from $KEK_SOURCE (not shown)
  API           $API_URL          cluster: curl -s -H @$AUTH_HEADER $API_URL/v1/cluster | jq
  demo job      $JOB_ID  (cron "$DEMO_CRON" UTC -> $SINK_URL/hook/demo, next fire $next)
  executions    curl -s -H @$AUTH_HEADER $API_URL/v1/jobs/$JOB_ID/executions | jq
  sink          $SINK_URL/deliveries
  logs          $LOG_DIR/  (api, scheduler-N, worker-N, sink, migrate)
  metrics       $HOST:$SCHEDULER_METRICS_PORT.. (schedulers), $HOST:$WORKER_METRICS_PORT.. (workers): /metrics

EOF
if ((DEMO_SECONDS > 0)); then
    say "deliveries arriving at the sink (stopping by itself after ${DEMO_SECONDS}s; Ctrl-C stops earlier):"
else
    say "deliveries arriving at the sink (Ctrl-C stops everything this script started):"
fi

# ------------------------------------------------------- show deliveries

seen=0
count=0
show_new_deliveries() {
    local total
    total=$(wc -l <"$SINK_LOG")
    ((total > seen)) || return 0
    # Only complete lines (seen+1 .. total); the sink prints one JSON object per delivery.
    while IFS=$'\t' read -r at attempt late id; do
        count=$((count + 1))
        printf '  #%-4s %s  attempt %-2s  lateness %6s ms  %s\n' "$count" "$at" "$attempt" "$late" "$id"
    done < <(sed -n "$((seen + 1)),${total}p" "$SINK_LOG" |
        jq -R -r 'fromjson? | select(type == "object" and has("execution_id"))
                  | [(.received_at | sub("\\.(?<f>[0-9]{3})[0-9]*"; ".\(.f)")), .attempt, .lateness_ms, .execution_id] | @tsv')
    seen=$total
}

end=$((SECONDS + DEMO_SECONDS))
while :; do
    check_alive
    show_new_deliveries
    if ((DEMO_SECONDS > 0 && SECONDS >= end)); then break; fi
    sleep 1
done

say "$count deliveries in ${DEMO_SECONDS}s"
if ((count == 0)); then
    warn "no delivery reached the sink; see $LOG_DIR/"
    exit 1
fi
exit 0
