#!/usr/bin/env bash
# deploy/chaos.sh — builds the release binaries and runs the chaos scenario:
# steady load while faults are injected one after another, on private Redis,
# RabbitMQ and PostgreSQL instances the scenario starts itself (the machine's
# shared services are never restarted), ending with a fault × figures matrix.
#
#   deploy/chaos.sh                    the quick subsets (CI-sized, 500 fires/s): 5 faults of
#                                      single services, then a Redis primary and a Postgres
#                                      primary failing over on replicated services
#   deploy/chaos.sh -- ARGS...         more arguments for `cronshard-loadtest chaos`,
#                                      e.g. -- --faults kill-worker,redis-restart
#   FULL=1 deploy/chaos.sh             every fault at 2,000 fires/s: the 14 of single services
#                                      (about 35 minutes), the 4 of replicated ones, then a
#                                      rolling upgrade from the previous release and back
#                                      (deploy/build-previous.sh builds it the first time)
#
# Exits with the scenario's status: non-zero when a slot was duplicated, lost
# (missed and not explained by a misfire or retry policy), left without a
# final ledger status or delivered before its due instant (by a millisecond
# or more: every process and receiver here reads the same clock), or when
# the run itself failed.
#
# Makes sure the service packages are installed (deploy/scripts/services.sh
# ensure faketime: PostgreSQL, Redis and RabbitMQ, whose binaries the
# scenario runs privately, and libfaketime for the clock-skew fault).
# Environment:
#   CARGO_TARGET_DIR   honoured (binaries from $CARGO_TARGET_DIR/<profile>, default target/<profile>)
#   PROFILE            release (default) or debug: deploy/test.sh runs the quick subset on the
#                      debug binaries it already built (figures then mean little; the verdict
#                      on duplicates, losses and final statuses holds)
#   CHAOS_OUT          result directory   [.run/chaos/<time>]
#   CARGO_BUILD_LOCK   a file to hold with flock(1) around the build (a shared machine)
#   SKIP_BUILD=1       use the binaries already built
#   SKIP_SERVICES=1    skip the package check
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

case ${1:-} in
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    --) shift ;;
    "") ;;
    *)
        echo "chaos.sh: unknown argument '$1' (scenario arguments go after --)" >&2
        exit 2
        ;;
esac

if [[ ${SKIP_SERVICES:-0} != 1 ]]; then
    deploy/scripts/services.sh ensure faketime replicated
fi

TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
PROFILE=${PROFILE:-release}
case $PROFILE in
    release) profile_flag=(--release) ;;
    debug) profile_flag=() ;;
    *)
        echo "chaos.sh: PROFILE must be release or debug, not '$PROFILE'" >&2
        exit 2
        ;;
esac
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
    build=(cargo build "${profile_flag[@]}" --locked --bins -p cronshard-api -p cronshard-scheduler -p cronshard-worker
        -p cronshard-loadtest)
    if [[ -n ${CARGO_BUILD_LOCK:-} ]]; then build=(flock "$CARGO_BUILD_LOCK" "${build[@]}"); fi
    "${build[@]}"
fi

OUT=${CHAOS_OUT:-$ROOT/.run/chaos/$(date -u +%Y%m%dT%H%M%SZ)}
mode=(--quick)
if [[ ${FULL:-0} == 1 ]]; then mode=(); fi
chaos=("$TARGET/$PROFILE/cronshard-loadtest" chaos "${mode[@]}" --bin-dir "$TARGET/$PROFILE")
set -x
if (($# > 0)); then
    exec "${chaos[@]}" --out "$OUT" "$@"
fi
# The single services' faults, then those of replicated services on a
# topology of their own; both run, the status is the worse.
status=0
"${chaos[@]}" --out "$OUT/single" || status=$?
"${chaos[@]}" --replicated --out "$OUT/replicated" || status=$?
if [[ ${FULL:-0} == 1 ]]; then
    # A rolling upgrade from the previous release and back, under the same load.
    previous=$(deploy/build-previous.sh | tail -1)
    "${chaos[@]}" --faults rolling-upgrade,rolling-rollback --previous-bin-dir "$previous" --out "$OUT/upgrade" ||
        status=$?
fi
exit "$status"
