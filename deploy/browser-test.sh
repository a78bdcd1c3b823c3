#!/usr/bin/env bash
# deploy/browser-test.sh — the console's browser tests (ui-tests/): Debian's Chromium
# driven by Playwright (playwright-core from npm) against a real local stack.
#
#   ./deploy/browser-test.sh          (after `cargo build --workspace --bins`)
#
# Installs what is missing: the `chromium` package when /usr/bin/chromium is absent, and
# Node.js + npm when npm is absent (apt-get, through sudo when not root); `npm ci` in
# ui-tests/ when node_modules is missing or older than package-lock.json. Then runs
# `npm test` there, bounded by BROWSER_TEST_TIMEOUT seconds (default 600). The test starts
# its own cronshard-api (auth on), scheduler and worker from ${CARGO_TARGET_DIR:-target}/debug
# on loopback with their own database, Redis prefix and queues, removed at the end.
# Artifacts (process logs, a screenshot of each page) go to UI_TEST_RUN_DIR, default
# .run/ui-tests/<time>/. UI_TEST_SCREENSHOTS_TO_DOCS=1 also copies the key screenshots to
# docs/screenshots/. Needs PostgreSQL, Redis and RabbitMQ on 127.0.0.1 (services.sh ensure).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT/ui-tests"
TIMEOUT=${BROWSER_TEST_TIMEOUT:-600}
SUDO=()
((EUID == 0)) || SUDO=(sudo)

missing=()
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if ((${#missing[@]})); then
    echo "==> installing ${missing[*]} (apt-get)"
    timeout 300 "${SUDO[@]}" apt-get update -qq
    timeout 900 "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
major=$(node -p 'process.versions.node.split(".")[0]')
((major >= 20)) || {
    echo "browser-test.sh: Node.js $(node --version) is too old: playwright-core and node --test need 20 or newer" >&2
    exit 1
}
if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
    echo "==> npm ci (ui-tests)"
    timeout 300 npm ci --no-audit --no-fund
fi
echo "==> browser tests: $(/usr/bin/chromium --version 2>/dev/null), playwright-core $(node -p 'require("./node_modules/playwright-core/package.json").version')"
exec timeout --kill-after=30 "$TIMEOUT" npm test --silent
