#!/usr/bin/env bash
# deploy/helm-check.sh — offline checks of the Helm chart helm/cronshard (no cluster, no helm binary).
#
#   ./deploy/helm-check.sh            lint + render 5 value sets (helm/cronshard/ci/*.yaml and
#                                     --set scheduler.replicas=5), validate every rendered manifest
#                                     with kubernetes-validate --strict (Kubernetes 1.30 and 1.37),
#                                     assert the chart's contracts, and check that 14 broken value
#                                     sets are refused with a clear message
#   ./deploy/helm-check.sh render [-f FILE]... [--set A=B]... [--name N] OUTDIR
#                                     render one value set into OUTDIR, one file per object
#
# Tools: helm-python-sdk (Helm v4 compiled in) and kubernetes-validate from PyPI, in a venv
# OUTSIDE the clone, built on first use and reused: ${CRONSHARD_TOOLS_DIR:-~/.cache/cronshard}/helm-venv
# (about 250 MB; needs python3 >= 3.10 with venv and access to PyPI the first time).
# HELM_CHECK_OUT (default: a temporary directory) keeps the rendered manifests.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHART=$ROOT/helm/cronshard
TOOLS=${CRONSHARD_TOOLS_DIR:-$HOME/.cache/cronshard}
VENV=$TOOLS/helm-venv
# Versions known to work; bump deliberately.
PKGS=(helm-python-sdk==0.2.2 kubernetes-validate==1.37.0 PyYAML jsonschema)

die() { echo "helm-check: $*" >&2; exit 1; }

case ${1:-} in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

ensure_venv() {
    local stamp=$VENV/.cronshard-pkgs want
    want=$(printf '%s\n' "${PKGS[@]}")
    if [[ -x $VENV/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
        return 0
    fi
    local py
    py=$(command -v python3 || true)
    [[ -n $py ]] || die "python3 not found: install python3 (>= 3.10) and python3-venv"
    "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
        die "$("$py" --version) is too old: helm-python-sdk needs Python >= 3.10"
    echo "helm-check: building the tool venv in $VENV (first run only)..."
    mkdir -p "$TOOLS"
    if [[ ! -x $VENV/bin/python ]]; then
        "$py" -m venv "$VENV" || die "python3 -m venv failed: install python3-venv (apt-get install python3-venv)"
    fi
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PKGS[@]}" ||
        die "pip could not install ${PKGS[*]} into $VENV (is PyPI reachable?)"
    printf '%s\n' "${PKGS[@]}" >"$stamp"
}

ensure_venv
[[ -f $CHART/Chart.yaml ]] || die "no chart at $CHART"

if [[ ${1:-} == render ]]; then
    shift
    args=() out=
    while (($#)); do
        case $1 in
            -f | --values | --set | --name) args+=("$1" "$2"); shift 2 ;;
            *) out=$1; shift ;;
        esac
    done
    [[ -n $out ]] || die "render: give an output directory"
    PYTHONDONTWRITEBYTECODE=1 exec "$VENV/bin/python" "$ROOT/deploy/helm_check.py" render "$CHART" "$out" "${args[@]}"
fi

OUT=${HELM_CHECK_OUT:-}
if [[ -z $OUT ]]; then
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/cronshard-helm-check.XXXXXX")
    trap 'rm -rf "$OUT"' EXIT
fi
PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" "$ROOT/deploy/helm_check.py" check "$CHART" "$OUT" \
    --kubernetes-validate "$VENV/bin/kubernetes-validate"
