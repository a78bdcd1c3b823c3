#!/usr/bin/env bash
# Counts the instructions the workers execute per slot in a herd, with
# valgrind's callgrind: a figure that does not move with the machine's speed
# or load, for comparing two builds of the worker. (Wall-clock figures on a
# shared 2-core machine move by a third between runs minutes apart.)
#
#   loadtest/herd-instructions.sh BIN_DIR [JOBS]        JOBS defaults to 5000
#
# HERD_ARGS adds arguments to the herd (for example `--signing-keys 1`).
#
# BIN_DIR holds the release binaries (cronshard-api, cronshard-scheduler,
# cronshard-worker, cronshard-loadtest). The herd's stack runs as usual, its
# two workers under callgrind (tens of times slower, so the herd's lateness
# means nothing here). Once the herd has ended, the workers are stopped with
# SIGTERM, callgrind writes its counts, and the script prints the
# instructions of both workers over their whole life (start-up included)
# divided by the slots delivered. The profiles stay in the work directory it
# names, for `callgrind_annotate --inclusive=yes`. Installs valgrind (a
# Debian package) when it is missing; uses the machine's services as the
# benchmarks do (deploy/scripts/services.sh ensure).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${1:?usage: loadtest/herd-instructions.sh BIN_DIR [JOBS]}
JOBS=${2:-5000}
BIN=$(cd "$BIN" && pwd)

# shellcheck source=../deploy/scripts/services.sh
source "$ROOT/deploy/scripts/services.sh"
command -v valgrind >/dev/null 2>&1 || apt_install valgrind
ensure_all

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cronshard-instructions.XXXXXX")
for b in cronshard-api cronshard-scheduler cronshard-loadtest; do
    ln -s "$BIN/$b" "$WORK/$b"
done
cp "$BIN/cronshard-worker" "$WORK/cronshard-worker-real"
# Not exec'd: the stack ends its processes with SIGKILL, which takes this
# shell; valgrind lives on until it is stopped below, then writes its counts.
cat >"$WORK/cronshard-worker" <<EOF
#!/bin/sh
valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.out.%p" "$WORK/cronshard-worker-real" "\$@" &
wait
EOF
chmod +x "$WORK/cronshard-worker"

cd "$ROOT"
# shellcheck disable=SC2086 # HERD_ARGS is split into its words on purpose
"$WORK/cronshard-loadtest" herd --jobs "$JOBS" --lead-secs 60 --timeout-secs 600 --bin-dir "$WORK" \
    --out "$WORK/results" ${HERD_ARGS:-} > "$WORK/herd.log" 2>&1 &
herd=$!
# Split at the due instant: 2 s before it (every slot armed by then, with a
# 60 s lead) each worker's counts so far are dumped and zeroed, so the
# final counts are the due instant's work on: the drain and the outcomes.
due=""
while kill -0 "$herd" 2>/dev/null && [[ -z $due ]]; do
    due=$(grep -oE 'due at [0-9T:.-]+Z' "$WORK/herd.log" | awk '{print $3}' || true)
    sleep 0.5
done
split="no"
if [[ -n $due ]]; then
    wait_ms=$(( $(date -d "$due" +%s%3N) - $(date +%s%3N) - 2000 ))
    if ((wait_ms > 0)); then
        sleep "$((wait_ms / 1000)).$(printf '%03d' $((wait_ms % 1000)))"
        for pid in $(pgrep -f "$WORK/cronshard-worker-real"); do
            callgrind_control --dump=before-due "$pid" >/dev/null
        done
        split="yes"
    fi
fi
wait "$herd"
cat "$WORK/herd.log"
pkill -TERM -f "$WORK/cronshard-worker-real" || true
for _ in $(seq 120); do
    pgrep -f "$WORK/cronshard-worker-real" >/dev/null || break
    sleep 1
done
pkill -KILL -f "$WORK/cronshard-worker-real" || true

delivered=$(grep -oE 'delivered / missed / duplicates +[0-9,]+' "$WORK/herd.log" | grep -oE '[0-9,]+$' | tr -d ,)
count() { grep -m1 -E '^(summary|totals):' "$1" | awk '{print $2}'; }
before=0
for f in "$WORK"/callgrind.out.*.1; do
    [[ -e $f ]] || continue
    before=$((before + $(count "$f")))
done
total=0
for f in "$WORK"/callgrind.out.*; do
    n=$(grep -m1 -E '^(summary|totals):' "$f" | awk '{print $2}')
    [[ -n $n ]] || { echo "no count in $f: did the worker end?" >&2; exit 1; }
    total=$((total + n))
done
((delivered > 0)) || { echo "no slot delivered" >&2; exit 1; }
echo "workers' instructions: $total for $delivered slots = $((total / delivered)) per slot (profiles in $WORK)"
if [[ $split == yes ]]; then
    echo "  up to 2 s before the due instant (start-up, arming): $((before / delivered)) per slot (callgrind.out.PID.1)"
    echo "  from then on (the drain, the outcomes, stopping): $(((total - before) / delivered)) per slot (callgrind.out.PID)"
fi
