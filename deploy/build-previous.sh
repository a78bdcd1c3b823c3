#!/usr/bin/env bash
# deploy/build-previous.sh — builds the previous release's binaries (the commit
# in deploy/previous-release) for a rolling upgrade under load, and prints the
# directory that holds them.
#
#   deploy/build-previous.sh     release build of cronshard-api, -scheduler and -worker
#
# The release is checked out in a git worktree (PREV_WORKTREE, default
# /var/tmp/cronshard-prev-<short hash>, the one deploy/compat.sh uses too) and
# built with a target directory of its own (PREV_TARGET_DIR, default
# /var/tmp/cronshard-prev-target): a full release build the first time, about
# ten minutes on two cores, then nothing to do. The last line of the output is
# the binaries' directory, for `cronshard-loadtest chaos --previous-bin-dir`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

case ${1:-} in
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    "") ;;
    *)
        echo "build-previous.sh: unknown argument '$1'" >&2
        exit 2
        ;;
esac

PREV=$(grep -v '^[[:space:]]*#' deploy/previous-release | grep -m1 -o '[0-9a-f]\{40\}') || {
    echo "build-previous.sh: deploy/previous-release names no full commit hash" >&2
    exit 1
}
git cat-file -e "$PREV^{commit}" 2>/dev/null || {
    echo "build-previous.sh: commit $PREV is not in this clone (fetch its history)" >&2
    exit 1
}
WORKTREE=${PREV_WORKTREE:-/var/tmp/cronshard-prev-${PREV:0:7}}
PREV_TARGET=${PREV_TARGET_DIR:-/var/tmp/cronshard-prev-target}
if [[ ! -e $WORKTREE/.git ]]; then
    git worktree add --detach "$WORKTREE" "$PREV" >&2
fi
# The release as it was (deploy/compat.sh adds a generator to this worktree).
git -C "$WORKTREE" checkout --quiet --detach --force "$PREV"
(cd "$WORKTREE" && CARGO_TARGET_DIR=$PREV_TARGET cargo build --release --locked --bins \
    -p cronshard-api -p cronshard-scheduler -p cronshard-worker) >&2
echo "$PREV_TARGET/release"
