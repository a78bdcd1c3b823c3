#!/usr/bin/env bash
# Runs the cronshard benchmark suite on this machine and writes the figures
# into docs/benchmarks.md (the section between the GENERATED markers; the
# hand-written text around it is kept).
#
#   loadtest/run-suite.sh [options]
#
# Each scenario of `cronshard-loadtest` starts its own stack from the release
# binaries (API, schedulers, workers) on a fresh database, on loopback, and
# stops by itself. Every figure in the document comes from a result file of
# this run, with the exact command that produced it, the machine facts and
# the versions.
#
# Options (environment variable in brackets; defaults are the full suite):
#   --quick                 smoke preset, about 3 minutes; writes into the
#                           results directory, NOT docs/, unless --doc is given
#   --schedulers N          scheduler nodes per stack          [SCHEDULERS=3]
#   --workers N             worker processes per stack         [WORKERS=2]
#   --herd-sizes A,B,..     herd job counts                    [HERD_SIZES=10000,50000,100000]
#   --steady-rate R         steady fires/s                     [STEADY_RATE=2000]
#   --steady-secs D         steady measured window             [STEADY_SECS=600]
#   --failover-rate R       failover fires/s                   [FAILOVER_RATE=2000]
#   --failover-secs D       failover window; kill at D/3, add at 2D/3 [FAILOVER_SECS=180]
#   --recovery-rate R       recovery fires/s                   [RECOVERY_RATE=200]
#   --recovery-outage-secs K  all schedulers down for K s      [RECOVERY_OUTAGE_SECS=120]
#   --ceiling-messages N    broker ceiling messages            [CEILING_MESSAGES=100000]
#   --churn-jobs N          churn: jobs changed near their slots [CHURN_JOBS=60]
#   --churn-secs D          churn: seconds of changes            [CHURN_SECS=180]
#   --only LIST             run only these of: ceiling,herd,steady,failover,recovery,churn [ONLY]
#   --results DIR           result files                       [RESULTS_DIR=.run/bench/<time>]
#   --doc PATH              document to fill in                [BENCH_DOC=docs/benchmarks.md; quick: <results>/benchmarks.md]
#   --plots-dir DIR         where plots go                     [BENCH_PLOTS=docs/bench; quick: <results>/bench]
#   --no-build              use the binaries as they are       [NO_BUILD=1]
#
# CARGO_TARGET_DIR is honoured (binaries in $CARGO_TARGET_DIR/release). Run
# the suite on a quiet machine: another checkout building into the same target
# directory during the run replaces the binaries under test, and anything else
# using the cores makes the figures worse.
# Services: deploy/scripts/services.sh ensure (reuses running ones).
# A failing scenario does not stop the suite; it is listed as failed in the
# document, with no figures. Exit status 1 if any scenario failed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

QUICK=0
SCHEDULERS=${SCHEDULERS:-3}
WORKERS=${WORKERS:-2}
HERD_SIZES=${HERD_SIZES:-}
STEADY_RATE=${STEADY_RATE:-}
STEADY_SECS=${STEADY_SECS:-}
FAILOVER_RATE=${FAILOVER_RATE:-}
FAILOVER_SECS=${FAILOVER_SECS:-}
RECOVERY_RATE=${RECOVERY_RATE:-}
RECOVERY_OUTAGE_SECS=${RECOVERY_OUTAGE_SECS:-}
CEILING_MESSAGES=${CEILING_MESSAGES:-}
CHURN_JOBS=${CHURN_JOBS:-}
CHURN_SECS=${CHURN_SECS:-}
ONLY=${ONLY:-ceiling,herd,steady,failover,recovery,churn}
RESULTS_DIR=${RESULTS_DIR:-}
BENCH_DOC=${BENCH_DOC:-}
BENCH_PLOTS=${BENCH_PLOTS:-}
NO_BUILD=${NO_BUILD:-0}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

while (($#)); do
    case $1 in
        --quick) QUICK=1 ;;
        --schedulers | --nodes) SCHEDULERS=$2 && shift ;;
        --workers) WORKERS=$2 && shift ;;
        --herd-sizes) HERD_SIZES=$2 && shift ;;
        --steady-rate) STEADY_RATE=$2 && shift ;;
        --steady-secs) STEADY_SECS=$2 && shift ;;
        --failover-rate) FAILOVER_RATE=$2 && shift ;;
        --failover-secs) FAILOVER_SECS=$2 && shift ;;
        --recovery-rate) RECOVERY_RATE=$2 && shift ;;
        --recovery-outage-secs) RECOVERY_OUTAGE_SECS=$2 && shift ;;
        --ceiling-messages) CEILING_MESSAGES=$2 && shift ;;
        --churn-jobs) CHURN_JOBS=$2 && shift ;;
        --churn-secs) CHURN_SECS=$2 && shift ;;
        --only) ONLY=$2 && shift ;;
        --results) RESULTS_DIR=$2 && shift ;;
        --doc) BENCH_DOC=$2 && shift ;;
        --plots-dir) BENCH_PLOTS=$2 && shift ;;
        --no-build) NO_BUILD=1 ;;
        -h | --help) usage 0 ;;
        *)
            echo "unknown option: $1" >&2
            usage 2
            ;;
    esac
    shift
done

# Presets: the full suite (the load targets of docs/benchmarks.md) and a quick smoke run.
if ((QUICK)); then
    PRESET=quick
    : "${HERD_SIZES:=500}" "${STEADY_RATE:=50}" "${STEADY_SECS:=20}" "${FAILOVER_RATE:=50}" "${FAILOVER_SECS:=36}"
    : "${RECOVERY_RATE:=20}" "${RECOVERY_OUTAGE_SECS:=20}" "${CEILING_MESSAGES:=10000}"
    : "${CHURN_JOBS:=12}" "${CHURN_SECS:=35}"
    WARMUP=5 GRACE=5 RECOVERY_BEFORE=10 RECOVERY_AFTER=60
else
    PRESET=full
    : "${HERD_SIZES:=10000,50000,100000}" "${STEADY_RATE:=2000}" "${STEADY_SECS:=600}" "${FAILOVER_RATE:=2000}"
    : "${FAILOVER_SECS:=180}" "${RECOVERY_RATE:=200}" "${RECOVERY_OUTAGE_SECS:=120}" "${CEILING_MESSAGES:=100000}"
    : "${CHURN_JOBS:=60}" "${CHURN_SECS:=180}"
    WARMUP=15 GRACE=10 RECOVERY_BEFORE=30 RECOVERY_AFTER=300
fi
# The suite command with every setting explicit (flags and environment alike).
QUICK_FLAG=''
if ((QUICK)); then QUICK_FLAG=' --quick'; fi
SUITE_COMMAND="loadtest/run-suite.sh$QUICK_FLAG --schedulers $SCHEDULERS --workers $WORKERS"
SUITE_COMMAND+=" --herd-sizes $HERD_SIZES --steady-rate $STEADY_RATE --steady-secs $STEADY_SECS"
SUITE_COMMAND+=" --failover-rate $FAILOVER_RATE --failover-secs $FAILOVER_SECS --recovery-rate $RECOVERY_RATE"
SUITE_COMMAND+=" --recovery-outage-secs $RECOVERY_OUTAGE_SECS --ceiling-messages $CEILING_MESSAGES"
SUITE_COMMAND+=" --churn-jobs $CHURN_JOBS --churn-secs $CHURN_SECS --only $ONLY"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
: "${RESULTS_DIR:=$ROOT/.run/bench/$PRESET-$STAMP}"
if ((QUICK)); then
    : "${BENCH_DOC:=$RESULTS_DIR/benchmarks.md}" "${BENCH_PLOTS:=$RESULTS_DIR/bench}"
else
    : "${BENCH_DOC:=$ROOT/docs/benchmarks.md}" "${BENCH_PLOTS:=$ROOT/docs/bench}"
fi
mkdir -p "$RESULTS_DIR"
LOG=$RESULTS_DIR/suite.log

say() { printf '[suite] %s\n' "$*" | tee -a "$LOG" >&2; }

# ------------------------------------------------------------ services, build

deploy/scripts/services.sh ensure
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=$TARGET_DIR/release
if ((NO_BUILD == 0)); then
    say "building release binaries (cargo build --release --locked --workspace --bins, target $TARGET_DIR)"
    cargo build --release --locked --workspace --bins
fi
for b in cronshard-api cronshard-scheduler cronshard-worker cronshard-loadtest; do
    [[ -x $BIN/$b ]] || {
        say "missing $BIN/$b (build first or drop --no-build)"
        exit 1
    }
done
LT=$BIN/cronshard-loadtest

# --------------------------------------------------------------------- facts

pg_version=$(psql -h 127.0.0.1 -U postgres -w -d postgres -Atc 'SHOW server_version' 2>/dev/null || echo unknown)
redis_version=$(redis-cli -h 127.0.0.1 INFO server 2>/dev/null | tr -d '\r' | sed -n 's/^redis_version://p')
rabbit_version=$(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null || echo unknown)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then commit="$commit (with uncommitted changes)"; fi
os=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")
STARTED_AT=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# ----------------------------------------------------------------- scenarios

common=(--schedulers "$SCHEDULERS" --workers "$WORKERS" --bin-dir "$BIN" --out "$RESULTS_DIR")
failed=()
want() { [[ ",$ONLY," == *",$1,"* ]]; }

# run NAME ARGS...: one scenario; its table goes to the log, a failure is recorded.
run() {
    local name=$1
    shift
    say "running $name: $LT $*"
    if "$LT" "$@" 2>&1 | tee -a "$LOG"; then
        say "$name done"
    else
        say "$name FAILED (see $LOG)"
        failed+=("$name")
    fi
}

if want ceiling; then
    run ceiling ceiling --ceiling-messages "$CEILING_MESSAGES" --out "$RESULTS_DIR"
fi
if want herd; then
    IFS=, read -r -a sizes <<<"$HERD_SIZES"
    for n in "${sizes[@]}"; do
        run "herd-$n" herd --jobs "$n" --with-ceiling --ceiling-messages "$CEILING_MESSAGES" "${common[@]}"
    done
fi
if want steady; then
    run steady steady --rate "$STEADY_RATE" --duration-secs "$STEADY_SECS" --warmup-secs "$WARMUP" \
        --grace-secs "$GRACE" --cron-share 0.5 "${common[@]}"
fi
if want failover; then
    run failover failover --rate "$FAILOVER_RATE" --duration-secs "$FAILOVER_SECS" --warmup-secs "$WARMUP" \
        --grace-secs "$GRACE" --kill-at-secs $((FAILOVER_SECS / 3)) --add-at-secs $((2 * FAILOVER_SECS / 3)) \
        --cron-share 0.5 "${common[@]}"
fi
if want recovery; then
    run recovery recovery --rate "$RECOVERY_RATE" --outage-secs "$RECOVERY_OUTAGE_SECS" \
        --before-secs "$RECOVERY_BEFORE" --after-secs "$RECOVERY_AFTER" --misfire mixed "${common[@]}"
fi
if want churn; then
    run churn churn --jobs "$CHURN_JOBS" --seconds "$CHURN_SECS" "${common[@]}"
fi

# ---------------------------------------------------------------- document

failed_json=$(printf '%s\n' "${failed[@]+"${failed[@]}"}" | jq -R . | jq -s 'map(select(. != ""))')
jq -n --arg preset "$PRESET" --arg cmd "$SUITE_COMMAND" --arg os "$os" \
    --arg rustc "$(rustc --version 2>/dev/null || echo unknown)" --arg pg "$pg_version" \
    --arg redis "${redis_version:-unknown}" --arg rabbit "$rabbit_version" --arg commit "$commit" \
    --arg started "$STARTED_AT" --arg finished "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --argjson failed "$failed_json" \
    '{preset: $preset, suite_command: $cmd, os: $os, started_at: $started, finished_at: $finished, failed: $failed,
      versions: {rustc: $rustc, postgres: $pg, redis: $redis, rabbitmq: $rabbit, commit: $commit}}' \
    >"$RESULTS_DIR/facts.json"

if [[ ! -f $BENCH_DOC ]]; then
    cp "$ROOT/docs/benchmarks.md" "$BENCH_DOC"
fi
"$LT" report --results "$RESULTS_DIR" --doc "$BENCH_DOC" --plots-dir "$BENCH_PLOTS"
say "results: $RESULTS_DIR; document: $BENCH_DOC; plots: $BENCH_PLOTS"
if ((${#failed[@]})); then
    say "failed: ${failed[*]}"
    exit 1
fi
