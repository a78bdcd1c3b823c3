#!/usr/bin/env bash
# deploy/test.sh — the checks a change must pass, the same locally and in CI.
#
#   ./deploy/test.sh                         all steps
#   ./deploy/test.sh scheduler_              extra arguments go to the test runner (step 4),
#                                            e.g. a test name filter
#   TEST_RUNNER=cargo ./deploy/test.sh -- --test-threads=1   `cargo test` instead of nextest
#
# Makes sure PostgreSQL, Redis, RabbitMQ and moto (local SQS) run, and the Python packages
# some tests compare against are installed
# (deploy/scripts/services.sh ensure moto faketime verifier croniter replicated; services it starts are left running for
# the next run — `deploy/scripts/services.sh stop-started` stops them), then runs,
# stopping at the first failure:
#   0. deploy/helm-check.sh              (the Helm chart, offline: lint, render 5 value sets,
#                                         kubernetes-validate --strict, 14 broken value sets
#                                         refused; SKIP_HELM=1 skips it)
#   1. cargo fmt --all -- --check        (checks only, rewrites nothing)
#   2. cargo clippy --workspace --all-targets -- -D warnings
#      cargo doc --workspace --no-deps   (RUSTDOCFLAGS="-D warnings": broken doc links fail)
#   3. cargo build --locked --workspace --bins   (the end-to-end tests spawn the real binaries)
#      deploy/image_context_check.py     (the image's build stage, laid out as .dockerignore and
#                                         deploy/Dockerfile's COPY lines make it, resolves every
#                                         crate of the workspace; no Docker needed)
#   4. cargo nextest run --workspace [ARGS...]   (settings in .config/nextest.toml; `cargo test
#                                         --workspace [ARGS...]` when cargo-nextest is missing or
#                                         TEST_RUNNER=cargo), then cargo test --workspace --doc
#   5. deploy/fuzz-api.sh                (schemathesis fuzzes the API against its generated
#                                         /openapi.json; SKIP_FUZZ=1 skips it)
#   6. deploy/chaos.sh (quick subset)  (faults under load on private Redis, RabbitMQ and
#                                         PostgreSQL, with the debug binaries of step 3: fails on
#                                         a duplicated, lost or unfinished slot; SKIP_CHAOS=1 skips it)
#   7. deploy/browser-test.sh            (the console in Chromium against a real stack;
#                                         installs chromium and the npm packages when
#                                         missing; SKIP_BROWSER=1 skips it)
# and prints the time of each step. CARGO_TARGET_DIR is honoured, never set.
# SKIP_SERVICES=1 skips the service check (when the services come from elsewhere).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

case ${1:-} in
    -h | --help)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
        exit 0
        ;;
esac

command -v cargo >/dev/null 2>&1 || {
    echo "test.sh: cargo not found: install a Rust toolchain (https://rustup.rs); rust-toolchain.toml picks the version" >&2
    exit 1
}

STEP_NAMES=()
STEP_TIMES=()
START=$SECONDS

summary() {
    local i
    for i in "${!STEP_NAMES[@]}"; do
        printf '    %5ss  %s\n' "${STEP_TIMES[i]}" "${STEP_NAMES[i]}"
    done
}

# step NAME CMD...: runs CMD, records its duration, stops everything on failure.
step() {
    local name=$1 t0=$SECONDS rc=0
    shift
    printf '\n==> %s\n' "$name"
    "$@" || rc=$?
    STEP_NAMES+=("$name")
    STEP_TIMES+=($((SECONDS - t0)))
    if ((rc != 0)); then
        printf '\n==> FAILED (exit %s) after %ss: %s\n' "$rc" "$((SECONDS - t0))" "$name" >&2
        summary >&2
        exit "$rc"
    fi
    printf '<== ok in %ss: %s\n' "$((SECONDS - t0))" "$name"
}

if [[ ${SKIP_SERVICES:-0} == 1 ]]; then
    echo "==> skipping the service check (SKIP_SERVICES=1)"
else
    step "services (PostgreSQL, Redis, RabbitMQ, moto, faketime, the Standard Webhooks verifier, croniter)" "$ROOT/deploy/scripts/services.sh" ensure moto faketime verifier croniter replicated
fi
if [[ ${SKIP_HELM:-0} == 1 ]]; then
    echo "==> skipping the Helm chart check (SKIP_HELM=1)"
else
    step "Helm chart: lint, render, validate (deploy/helm-check.sh)" "$ROOT/deploy/helm-check.sh"
fi
step "cargo fmt --all -- --check" cargo fmt --all -- --check
step "cargo clippy --workspace --all-targets -- -D warnings" cargo clippy --workspace --all-targets -- -D warnings
step "cargo doc --workspace --no-deps (warnings denied)" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
step "cargo build --locked --workspace --bins" cargo build --locked --workspace --bins
step "the image's build context holds every crate (deploy/image_context_check.py)" python3 "$ROOT/deploy/image_context_check.py" "$ROOT"
if [[ ${SKIP_HELM:-0} != 1 ]]; then
    step "the chart's scheduler environment forms a cluster (deploy/helm-run-local.sh)" "$ROOT/deploy/helm-run-local.sh"
fi
# Nextest runs all binaries' tests from one pool; `cargo test` runs the
# binaries one after another (twice the time here). Same tests either way.
if [[ ${TEST_RUNNER:-nextest} == nextest ]] && cargo nextest --version >/dev/null 2>&1; then
    step "cargo nextest run --workspace${*:+ $*}" cargo nextest run --workspace "$@"
    step "cargo test --workspace --doc" cargo test --workspace --doc
else
    if [[ ${TEST_RUNNER:-nextest} == nextest ]]; then
        echo "==> cargo-nextest not found: the tests run with cargo test"
    fi
    step "cargo test --workspace${*:+ $*}" cargo test --workspace "$@"
fi
if [[ ${SKIP_FUZZ:-0} == 1 ]]; then
    echo "==> skipping the API fuzz run (SKIP_FUZZ=1)"
else
    step "schemathesis against /openapi.json (deploy/fuzz-api.sh)" "$ROOT/deploy/fuzz-api.sh"
fi
if [[ ${SKIP_CHAOS:-0} == 1 ]]; then
    echo "==> skipping the chaos subset (SKIP_CHAOS=1)"
else
    step "chaos, quick subset on the debug binaries (deploy/chaos.sh)" \
        env SKIP_SERVICES=1 SKIP_BUILD=1 PROFILE=debug "$ROOT/deploy/chaos.sh"
fi
if [[ ${SKIP_BROWSER:-0} == 1 ]]; then
    echo "==> skipping the browser tests (SKIP_BROWSER=1)"
else
    step "browser tests of the console (deploy/browser-test.sh)" "$ROOT/deploy/browser-test.sh"
fi

printf '\n==> all steps passed in %ss\n' "$((SECONDS - START))"
summary
