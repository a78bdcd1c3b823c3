#!/usr/bin/env bash
# deploy/helm-run-local.sh — run the chart's scheduler StatefulSet by hand against the local
# services, to show that the chart's environment and the binaries agree.
#
#   ./deploy/helm-run-local.sh
#
# Renders helm/cronshard with local-service URLs, resolves the environment Kubernetes would
# give each pod (env, envFrom, secretKeyRef and fieldRef metadata.name, from the rendered
# ConfigMap and Secret), runs the rendered migration Job's command the same way, then starts
# the rendered scheduler command 3 times as pods <release>-cronshard-scheduler-0..2. The only
# change to the rendered environment is METRICS_ADDR (a distinct 127.0.0.1 port per node,
# since the pods would each have their own IP). It waits until every node reports
# cronshard_cluster_live_nodes 3 and Redis holds the 3 heartbeats, sends SIGTERM (as the
# kubelet does), and checks that every node exits 0 within the grace period and deletes its
# heartbeat. Meanwhile it also runs the rendered worker Deployment (its metrics must come up)
# and API Deployment (/readyz answers 200, /v1/cluster refuses a request without the rendered
# token and lists the 3 nodes with it), and stops them with SIGTERM too.
#
# Needs: the binaries (cargo build --workspace --bins; CARGO_TARGET_DIR is honoured),
# PostgreSQL, Redis and RabbitMQ on 127.0.0.1 (deploy/scripts/services.sh ensure), redis-cli,
# curl. Loopback only.
#   HELM_LOCAL_RELEASE   release name (default: local)
#   HELM_LOCAL_DB        database the migration creates/uses (default: cronshard_helm_local)
#   HELM_LOCAL_METRICS   first port (default: 19190): schedulers' metrics on it and the next 2,
#                        the worker's metrics on +3, the API on +4
#   HELM_LOCAL_TIMEOUT   seconds to wait for the 3-node cluster (default: 60)
#   HELM_LOCAL_KEEP=1    keep the logs and rendered manifests after a successful run (a failed
#                        run always keeps them and prints where)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHART=$ROOT/helm/cronshard
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug
RELEASE=${HELM_LOCAL_RELEASE:-local}
DB=${HELM_LOCAL_DB:-cronshard_helm_local}
PORT0=${HELM_LOCAL_METRICS:-19190}
TIMEOUT=${HELM_LOCAL_TIMEOUT:-60}
NODES=3
CLUSTER=helmlocal-$(date +%s)-$$
VENV=${CRONSHARD_TOOLS_DIR:-$HOME/.cache/cronshard}/helm-venv

case ${1:-} in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

die() { echo "helm-run-local: FAIL: $*" >&2; exit 1; }
for b in cronshard-scheduler cronshard-api; do
    [[ -x $BIN/$b ]] || die "$BIN/$b missing: run cargo build --workspace --bins"
done
command -v redis-cli >/dev/null || die "redis-cli not found"
command -v curl >/dev/null || die "curl not found"
redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || die "no Redis on 127.0.0.1:6379 (deploy/scripts/services.sh ensure)"
for ((i = 0; i < NODES + 2; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$((PORT0 + i))") 2>/dev/null; then
        die "port 127.0.0.1:$((PORT0 + i)) is taken: set HELM_LOCAL_METRICS"
    fi
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cronshard-helm-local.XXXXXX")
PIDS=()
EXTRA=()
cleanup() {
    local rc=$? pid
    for pid in "${PIDS[@]}" "${EXTRA[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}" "${EXTRA[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    # This run's Redis keys (its own prefix only) and RabbitMQ queues.
    redis-cli -h 127.0.0.1 --scan --pattern "$CLUSTER:*" 2>/dev/null |
        xargs -r -n 100 redis-cli -h 127.0.0.1 del >/dev/null 2>&1 || true
    if command -v rabbitmqctl >/dev/null; then
        for q in cron_scheduler cron_scheduler_waiting cron_dlx cron_scheduler_failed; do
            rabbitmqctl -q delete_queue "$CLUSTER.$q" >/dev/null 2>&1 || true
        done
    fi
    if ((rc == 0)) && [[ ${HELM_LOCAL_KEEP:-0} != 1 ]]; then
        rm -rf "$WORK"
    else
        echo "logs and rendered manifests: $WORK"
    fi
}
trap cleanup EXIT

T0=$SECONDS
echo "==> render helm/cronshard (release $RELEASE, CLUSTER_NAME $CLUSTER) with local-service URLs"
"$ROOT/deploy/helm-check.sh" render --name "$RELEASE" \
    --set "secrets.databaseUrl=postgres://postgres@127.0.0.1:5432/$DB" \
    --set "secrets.redisUrls={redis://127.0.0.1:6379}" \
    --set "secrets.amqpUrl=amqp://guest:guest@127.0.0.1:5672/%2f" \
    --set "secrets.apiTokens={local-token-0123456789}" \
    --set "config.clusterName=$CLUSTER" \
    --set "scheduler.replicas=$NODES" \
    "$WORK/manifests" >/dev/null

# pod_env WORKLOAD POD: fills CMD (array) and ENVV (array of KEY=VALUE) as Kubernetes would.
pod_env() {
    local fields=()
    mapfile -d '' fields < <("$VENV/bin/python" "$ROOT/deploy/helm_check.py" podenv "$CHART" \
        "$WORK/manifests" --workload "$1" --pod "$2") || die "could not resolve the env of $1"
    read -r -a CMD <<<"${fields[0]}"
    ENVV=("${fields[@]:1}")
    # The image's /usr/local/bin/cronshard-* are the locally built binaries here.
    CMD[0]=$BIN/$(basename "${CMD[0]}")
}

echo "==> every variable the chart and the compose file set is one a binary reads"
for b in api scheduler worker; do "$BIN/cronshard-$b" --help; done |
    # `[env: NAME=value]`, or `[env: NAME]` for a flag whose value --help hides.
    grep -oE '\[env: [A-Z0-9_]+[]=]' | sed -E 's/\[env: //; s/[]=]$//' | sort -u >"$WORK/known-env"
"$VENV/bin/python" - "$WORK/manifests" "$ROOT/deploy/docker-compose.yml" "$WORK/known-env" <<'PY' ||
import sys, pathlib, yaml
manifests, compose, known_file = sys.argv[1:]
# AWS_* are read by the AWS SDK (SQS), not by clap.
known = set(pathlib.Path(known_file).read_text().split()) | {"AWS_REGION", "AWS_ENDPOINT_URL_SQS"}
seen = {}
for f in sorted(pathlib.Path(manifests).glob("*.yaml")):
    o = yaml.safe_load(f.read_text())
    if o["kind"] == "ConfigMap":
        for k in o["data"]:
            seen.setdefault(k, []).append(f"ConfigMap {o['metadata']['name']}")
    if o["kind"] in ("StatefulSet", "Deployment", "Job"):
        for c in o["spec"]["template"]["spec"]["containers"]:
            for e in c.get("env") or []:
                seen.setdefault(e["name"], []).append(f"{o['kind']} {o['metadata']['name']}")
for name, svc in yaml.safe_load(open(compose))["services"].items():
    if str(svc.get("image", "")).startswith("cronshard"):
        for k in svc.get("environment") or {}:
            seen.setdefault(k, []).append(f"compose service {name}")
unknown = {k: v for k, v in seen.items() if k not in known}
for k, v in sorted(unknown.items()):
    print(f"    UNKNOWN {k}: set by {', '.join(sorted(set(v)))}")
print(f"    {len(seen)} variables set, {len(known)} known to the binaries, {len(unknown)} unknown")
sys.exit(1 if unknown else 0)
PY
    die "the chart or the compose file sets a variable no binary reads"

echo "==> the migration hook Job, as rendered"
pod_env Job/-migrate "$RELEASE-cronshard-migrate-xxxxx"
printf '    %s\n' "${CMD[*]}" "${ENVV[@]}" | sed -E 's#(://[^:]*:)[^@]*@#\1***@#'
env -i PATH="$PATH" HOME="$HOME" "${ENVV[@]}" "${CMD[@]}" >"$WORK/migrate.log" 2>&1 ||
    { tail -20 "$WORK/migrate.log" >&2; die "the migration Job's command failed"; }
echo "    exit 0"

echo "==> $NODES scheduler pods, with the rendered StatefulSet's command and environment"
for ((i = 0; i < NODES; i++)); do
    pod=$RELEASE-cronshard-scheduler-$i
    pod_env StatefulSet/-scheduler "$pod"
    ENVV=("${ENVV[@]/#METRICS_ADDR=*/METRICS_ADDR=127.0.0.1:$((PORT0 + i))}")
    if ((i == 0)); then
        printf '    %s\n' "${CMD[*]}" "${ENVV[@]}" | sed -E 's#(://[^:]*:)[^@]*@#\1***@#'
    fi
    env -i PATH="$PATH" HOME="$HOME" "${ENVV[@]}" "${CMD[@]}" >"$WORK/$pod.log" 2>&1 &
    PIDS+=($!)
    echo "    started $pod (pid $!, NODE_ID=$pod, metrics 127.0.0.1:$((PORT0 + i)))"
done

live_nodes() { # metrics port -> the value of cronshard_cluster_live_nodes, or empty
    local text
    text=$(curl -fsS --max-time 2 "http://127.0.0.1:$1/metrics" 2>/dev/null) || return 0
    awk '/^cronshard_cluster_live_nodes[ {]/ {print $NF; exit}' <<<"$text"
}

echo "==> waiting (up to ${TIMEOUT}s) for every node to see a $NODES-node live set"
t0=$SECONDS
while :; do
    ok=0 seen=()
    for ((i = 0; i < NODES; i++)); do
        kill -0 "${PIDS[i]}" 2>/dev/null || { tail -20 "$WORK/$RELEASE-cronshard-scheduler-$i.log" >&2; die "node $i exited"; }
        n=$(live_nodes $((PORT0 + i)))
        seen+=("${n:-?}")
        [[ ${n%.*} == "$NODES" ]] && ok=$((ok + 1))
    done
    members=$(redis-cli -h 127.0.0.1 smembers "$CLUSTER:nodes" | sort | xargs) || true
    alive=0
    for ((i = 0; i < NODES; i++)); do
        [[ $(redis-cli -h 127.0.0.1 exists "$CLUSTER:node:$RELEASE-cronshard-scheduler-$i") == 1 ]] && alive=$((alive + 1))
    done
    if ((ok == NODES && alive == NODES)); then
        echo "    after $((SECONDS - t0))s: cronshard_cluster_live_nodes = ${seen[*]} (per node)"
        echo "    redis SMEMBERS $CLUSTER:nodes = $members"
        for ((i = 0; i < NODES; i++)); do
            k=$CLUSTER:node:$RELEASE-cronshard-scheduler-$i
            echo "    $k  ttl $(redis-cli -h 127.0.0.1 ttl "$k")s"
        done
        break
    fi
    ((SECONDS - t0 < TIMEOUT)) || die "no $NODES-node cluster after ${TIMEOUT}s (live_nodes per node: ${seen[*]}; heartbeats: $alive; logs in $WORK)"
    sleep 1
done

echo "==> the rendered worker Deployment and API Deployment, as pods"
pod_env Deployment/-worker "$RELEASE-cronshard-worker-7d9c5-abcde"
ENVV=("${ENVV[@]/#METRICS_ADDR=*/METRICS_ADDR=127.0.0.1:$((PORT0 + NODES))}")
env -i PATH="$PATH" HOME="$HOME" "${ENVV[@]}" "${CMD[@]}" >"$WORK/worker.log" 2>&1 &
EXTRA+=($!)
pod_env Deployment/-api "$RELEASE-cronshard-api-7d9c5-abcde"
ENVV=("${ENVV[@]/#LISTEN_ADDR=*/LISTEN_ADDR=127.0.0.1:$((PORT0 + NODES + 1))}")
TOKEN=$(printf '%s\n' "${ENVV[@]}" | sed -n 's/^API_TOKENS=//p' | cut -d, -f1)
[[ -n $TOKEN ]] || die "the rendered API environment has no API_TOKENS (auth is on by default)"
env -i PATH="$PATH" HOME="$HOME" "${ENVV[@]}" "${CMD[@]}" >"$WORK/api.log" 2>&1 &
EXTRA+=($!)
API=http://127.0.0.1:$((PORT0 + NODES + 1))
t0=$SECONDS
until [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$((PORT0 + NODES))/metrics") == 200 ]] &&
    [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$API/readyz") == 200 ]]; do
    for pid in "${EXTRA[@]}"; do
        kill -0 "$pid" 2>/dev/null || { tail -5 "$WORK/worker.log" "$WORK/api.log" >&2; die "the worker or the API exited"; }
    done
    ((SECONDS - t0 < TIMEOUT)) || die "worker metrics or API /readyz not up after ${TIMEOUT}s (logs in $WORK)"
    sleep 0.5
done
echo "    worker metrics up on 127.0.0.1:$((PORT0 + NODES)); API $API/readyz -> 200"
code=$(curl -s -o /dev/null -w '%{http_code}' "$API/v1/cluster")
echo "    GET /v1/cluster without a token -> $code"
[[ $code == 401 ]] || die "the API answered $code without a token: auth should be on"
body=$(curl -fsS -H "Authorization: Bearer $TOKEN" "$API/v1/cluster") || die "GET /v1/cluster with the rendered token failed"
n=$(grep -o '"node_id"' <<<"$body" | wc -l)
echo "    GET /v1/cluster with the rendered token -> $n nodes: $(grep -o '"node_id":"[^"]*"' <<<"$body" | cut -d'"' -f4 | sort | xargs)"
((n == NODES)) || die "the API sees $n nodes, not $NODES"

echo "==> SIGTERM to every node (as the kubelet does); grace period from the StatefulSet"
GRACE=$(awk '/terminationGracePeriodSeconds:/ {print $2; exit}' "$WORK"/manifests/*StatefulSet*scheduler*.yaml)
t0=$SECONDS
for pid in "${PIDS[@]}"; do kill -TERM "$pid"; done
fail=0
for ((i = 0; i < NODES; i++)); do
    rc=0
    # A node still running after the grace period would be SIGKILLed by the kubelet: that
    # counts as a failure here.
    while kill -0 "${PIDS[i]}" 2>/dev/null && ((SECONDS - t0 <= GRACE)); do sleep 0.2; done
    if kill -0 "${PIDS[i]}" 2>/dev/null; then
        kill -KILL "${PIDS[i]}" 2>/dev/null || true
        echo "    node $i still running after the ${GRACE}s grace period: SIGKILL"
        fail=1
    fi
    wait "${PIDS[i]}" || rc=$?
    pod=$RELEASE-cronshard-scheduler-$i
    gone=$(redis-cli -h 127.0.0.1 exists "$CLUSTER:node:$pod")
    echo "    $pod exited $rc after $((SECONDS - t0))s; heartbeat key $([[ $gone == 0 ]] && echo deleted || echo STILL THERE)"
    [[ $rc == 0 && $gone == 0 ]] || fail=1
done
PIDS=()
for name in worker api; do
    pid=${EXTRA[0]}
    EXTRA=("${EXTRA[@]:1}")
    kill -TERM "$pid" 2>/dev/null || true
    rc=0
    wait "$pid" || rc=$?
    echo "    $name exited $rc after SIGTERM"
    ((rc == 0)) || fail=1
done
left=$(redis-cli -h 127.0.0.1 smembers "$CLUSTER:nodes" | xargs)
echo "    redis SMEMBERS $CLUSTER:nodes after shutdown = ${left:-(empty)}"
grep -h '"level":"\(ERROR\|WARN\)"' "$WORK"/*.log | head -5 | sed 's/^/    log: /' || true
((fail == 0)) || die "a node did not exit cleanly or left its heartbeat (logs in $WORK)"
echo "==> ok in $((SECONDS - T0))s: the chart's environment works with the binaries: $NODES-node cluster formed and left cleanly, worker and API up, auth on"
