#!/usr/bin/env bash
# deploy/compat.sh — the upgrade compatibility corpus (docs/operations.md, "Upgrades").
#
#   ./deploy/compat.sh            all of it (builds the previous release: expensive, opt-in)
#   ./deploy/compat.sh current    only regenerate compat/current/ with this tree's code
#
# All of it:
#   1. builds this tree's generator (compat/generator) and writes compat/current/;
#   2. checks out the previous release (the commit in deploy/previous-release) in a git worktree
#      (PREV_WORKTREE, default /var/tmp/cronshard-prev-<short hash>), adds a generator to its
#      workspace (its own compat/generator at that commit when it has one, else this tree's) and
#      builds it with a target directory of its own (PREV_TARGET_DIR, default
#      /var/tmp/cronshard-prev-target): a full debug build the first time, 5 to 10 minutes on
#      two cores, then seconds;
#   3. the previous release writes its corpus, compat/<short hash>/;
#   4. the previous release reads compat/current/ (old code reads new): every message and its
#      headers with the meaning it was written with, the key layout and a heartbeat, the queue
#      declarations of both queue types over its own (RabbitMQ refuses inequivalent arguments),
#      and this release's rows after this tree's migrations (its store reads each); then it runs
#      its database scenario on a database with this tree's migrations (its statements on the new
#      schema); and says whether its own `cronshard-api migrate` would refuse that database;
#   5. runs the compat test (cargo nextest run -p cronshard-compat): this release reads
#      compat/<short hash>/ and still writes compat/current/.
# Stops at the first failure. Commit compat/current/ and compat/<short hash>/ afterwards.
#
# Services as for the tests: TEST_DATABASE_URL (an admin DSN), TEST_REDIS_URL, TEST_AMQP_URL,
# the local ones by default. This tree's build uses CARGO_TARGET_DIR as given.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

case ${1:-} in
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    current | "") ;;
    *)
        echo "compat.sh: unknown argument ${1}; see --help" >&2
        exit 2
        ;;
esac

die() {
    echo "compat.sh: $*" >&2
    exit 1
}
step() { printf '\n==> %s\n' "$*"; }

START=$SECONDS
PREV=$(grep -v '^[[:space:]]*#' deploy/previous-release | grep -m1 -o '[0-9a-f]\{40\}') ||
    die "deploy/previous-release names no full commit hash"
SHORT=${PREV:0:7}
git cat-file -e "$PREV^{commit}" 2>/dev/null || die "commit $PREV is not in this clone (fetch its history)"

step "this tree's generator writes compat/current/"
cargo build -p cronshard-compat --bin cronshard-compat
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
"$target_dir/debug/cronshard-compat" write compat/current --commit current
[[ ${1:-} == current ]] && exit 0

WORKTREE=${PREV_WORKTREE:-/var/tmp/cronshard-prev-$SHORT}
PREV_TARGET=${PREV_TARGET_DIR:-/var/tmp/cronshard-prev-target}
step "the previous release $PREV in $WORKTREE"
if [[ ! -e $WORKTREE/.git ]]; then
    git worktree add --detach "$WORKTREE" "$PREV"
fi
# The worktree is this script's: whatever an earlier run added to it goes.
git -C "$WORKTREE" checkout --quiet --detach --force "$PREV"
git -C "$WORKTREE" clean -fdq -- compat
if git cat-file -e "$PREV:compat/generator/Cargo.toml" 2>/dev/null; then
    echo "using the previous release's own generator"
else
    echo "the previous release has no generator: using this tree's"
    mkdir -p "$WORKTREE/compat"
    cp -r compat/generator "$WORKTREE/compat/generator"
    rm -rf "$WORKTREE/compat/generator/target"
    grep -q '"compat/generator"' "$WORKTREE/Cargo.toml" ||
        sed -i 's|^members = \[|members = [\n    "compat/generator",|' "$WORKTREE/Cargo.toml"
fi

step "building the previous release's generator (target $PREV_TARGET)"
t0=$SECONDS
(cd "$WORKTREE" && CARGO_TARGET_DIR=$PREV_TARGET cargo build -p cronshard-compat --bin cronshard-compat)
echo "built in $((SECONDS - t0)) s"
OLD=$PREV_TARGET/debug/cronshard-compat

step "the previous release writes compat/$SHORT/"
"$OLD" write "compat/$SHORT" --commit "$PREV"

step "the previous release reads compat/current/"
"$OLD" read compat/current --migrations "$ROOT/migrations"

step "this release reads compat/$SHORT/ and writes compat/current/ (the compat test)"
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run -p cronshard-compat
else
    cargo test -p cronshard-compat
fi

printf '\ncompat.sh: done in %s s; commit compat/current/ and compat/%s/\n' "$((SECONDS - START))" "$SHORT"
