#!/usr/bin/env bash
# Backing services for a LOCAL dev/test stack of cronshard: PostgreSQL, Redis,
# RabbitMQ and, on request, moto (a local SQS).
#
#   deploy/scripts/services.sh ensure [moto] [faketime] [verifier] [croniter] [replicated]
#                                                   make sure they run (reuse, start or install);
#                                                   faketime: libfaketime for the clock-skew tests;
#                                                   verifier: the `standardwebhooks` package (PyPI) in a venv,
#                                                   the third-party verifier the signature tests check against;
#                                                   croniter: the `croniter` package (PyPI) in a venv, the
#                                                   third-party cron evaluator the cron oracle test compares with;
#                                                   replicated: the server programs the chaos scenario's private
#                                                   (replicated) services run, even where others answer the ports
#   deploy/scripts/services.sh status [moto]        say which are reachable
#   deploy/scripts/services.sh stop-started [FILE]  stop the services THIS script started
#
# `ensure` reuses a service that already answers on its loopback port, starts an
# installed one that is stopped, and installs a missing one from Debian packages
# (`apt-get update` once, then `apt-get install -y ...`; through sudo when not
# root). It also installs `curl` and `jq`, which deploy/up.sh uses. It never stops
# anything. What it starts is appended to a record file (default
# $CRONSHARD_STATE_DIR/services-started, state dir default <repo>/.run) so that
# `stop-started` can stop exactly those and nothing else.
#
# For a local stack only: a PostgreSQL cluster that this script installs or
# creates is switched to `trust` authentication for 127.0.0.1/32 and ::1/128, so
# that the `postgres` user connects without a password (the default DATABASE_URL).
# An existing cluster is never changed unless CRONSHARD_PG_TRUST=1.
#
# The file can also be sourced; it then only defines the functions (`ensure_all`,
# `ensure_postgres`, ...). Fatal errors exit.
#
# Environment (defaults):
#   CRONSHARD_STATE_DIR       <repo>/.run       logs of started services go to its logs/
#   CRONSHARD_SERVICES_RECORD $CRONSHARD_STATE_DIR/services-started
#   PG_PORT 5432  REDIS_PORT 6379  RABBITMQ_PORT 5672  MOTO_PORT 4566  (all on 127.0.0.1)
#   SERVICE_START_TIMEOUT 60  RABBITMQ_START_TIMEOUT 120  (seconds)
#   MOTO_VENV ${XDG_CACHE_HOME:-~/.cache}/cronshard/moto-venv  (used when moto_server is missing)
#   VERIFIER_VENV ${XDG_CACHE_HOME:-~/.cache}/cronshard/verifier-venv  (the tests find it there too)
#   CRONITER_VENV ${XDG_CACHE_HOME:-~/.cache}/cronshard/croniter-venv  (the tests find it there too)
#   CRONSHARD_PG_TRUST 0      1 = also switch an existing cluster to trust on loopback

_services_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CRONSHARD_STATE_DIR=${CRONSHARD_STATE_DIR:-$_services_root/.run}
CRONSHARD_SERVICES_RECORD=${CRONSHARD_SERVICES_RECORD:-$CRONSHARD_STATE_DIR/services-started}
PG_PORT=${PG_PORT:-5432}
REDIS_PORT=${REDIS_PORT:-6379}
RABBITMQ_PORT=${RABBITMQ_PORT:-5672}
MOTO_PORT=${MOTO_PORT:-4566}
SERVICE_START_TIMEOUT=${SERVICE_START_TIMEOUT:-60}
RABBITMQ_START_TIMEOUT=${RABBITMQ_START_TIMEOUT:-120}
MOTO_VENV=${MOTO_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/cronshard/moto-venv}
VERIFIER_VENV=${VERIFIER_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/cronshard/verifier-venv}
CRONITER_VENV=${CRONITER_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/cronshard/croniter-venv}
# One version, so that the oracle's answers do not change under the tests.
CRONITER_VERSION=7.0.0
CRONSHARD_PG_TRUST=${CRONSHARD_PG_TRUST:-0}

# rabbitmq-server, rabbitmqctl and friends live in /usr/sbin.
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin:/sbin ;; esac

_svc_apt_updated=0

svc_log() { printf '[services] %s\n' "$*" >&2; }
svc_die() {
    svc_log "ERROR: $*"
    exit 1
}

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
    if [[ $EUID -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        svc_die "need root or sudo to run: $*"
    fi
}

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() {
    # shellcheck disable=SC2016 # $1 is expanded by the inner bash
    timeout 2 bash -c ': >"/dev/tcp/127.0.0.1/$1"' port_open "$1" 2>/dev/null
}

# wait_for SECONDS DESCRIPTION CMD...: polls CMD until it succeeds; false on timeout.
wait_for() {
    local limit=$1 what=$2
    shift 2
    local deadline=$((SECONDS + limit))
    until "$@"; do
        if ((SECONDS >= deadline)); then
            svc_log "timed out after ${limit}s waiting for $what"
            return 1
        fi
        sleep 0.5
    done
}

apt_install() {
    command -v apt-get >/dev/null 2>&1 ||
        svc_die "missing packages ($*) and no apt-get: this script knows Debian/Ubuntu only; install them yourself"
    if ((_svc_apt_updated == 0)); then
        svc_log "apt-get update"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q || svc_die "apt-get update failed"
        _svc_apt_updated=1
    fi
    svc_log "apt-get install -y $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" || svc_die "apt-get install $* failed"
}

record_started() {
    mkdir -p "$(dirname "$CRONSHARD_SERVICES_RECORD")"
    printf '%s\n' "$*" >>"$CRONSHARD_SERVICES_RECORD"
    svc_log "started by this script (recorded in $CRONSHARD_SERVICES_RECORD): $*"
}

# ---------------------------------------------------------------- PostgreSQL

pg_installed() { command -v pg_ctlcluster >/dev/null 2>&1 && compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; }
pg_ready() { pg_isready -q -h 127.0.0.1 -p "$PG_PORT" -t 2; }
pg_trust_login() { psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -w -d postgres -Atqc 'SELECT 1' >/dev/null 2>&1; }

# The newest configured cluster version, else the newest installed server.
pg_version() {
    local v
    v=$(find /etc/postgresql -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null | sort -V | tail -n 1)
    [[ -n $v ]] || v=$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null | sort -V | tail -n 1)
    [[ -n $v ]] || svc_die "no PostgreSQL server version found under /etc/postgresql or /usr/lib/postgresql"
    printf '%s\n' "$v"
}

# Puts trust rules for the postgres connections over loopback in front of the
# others (first match wins), then reloads. Local dev/test stacks only.
pg_allow_trust_on_loopback() {
    local ver=$1 hba="/etc/postgresql/$1/main/pg_hba.conf" marker='# cronshard local dev/test stack'
    [[ -f $hba ]] || svc_die "$hba not found"
    if ! as_root grep -qF "$marker" "$hba"; then
        svc_log "LOCAL DEV/TEST STACK: allowing passwordless (trust) connections over 127.0.0.1 and ::1 in $hba (backup: $hba.cronshard.bak)"
        as_root cp -p "$hba" "$hba.cronshard.bak"
        {
            printf '%s: trust loopback connections (added by deploy/scripts/services.sh)\n' "$marker"
            printf 'host    all             all             127.0.0.1/32            trust\n'
            printf 'host    all             all             ::1/128                 trust\n\n'
            as_root cat "$hba.cronshard.bak"
        } | as_root tee "$hba" >/dev/null
    fi
    as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main reload 9>&- || svc_die "reloading PostgreSQL $ver/main failed"
    wait_for 15 "PostgreSQL to accept user postgres without a password" pg_trust_login ||
        svc_die "PostgreSQL still refuses user postgres over 127.0.0.1 without a password; check $hba"
}

ensure_postgres() {
    local fresh=0 ver
    if pg_ready; then
        svc_log "PostgreSQL: already running on 127.0.0.1:$PG_PORT"
    else
        pg_installed || {
            apt_install postgresql
            fresh=1
        }
        ver=$(pg_version)
        if [[ ! -d /etc/postgresql/$ver/main ]]; then
            svc_log "PostgreSQL: creating cluster $ver/main on port $PG_PORT"
            as_root pg_createcluster -p "$PG_PORT" "$ver" main 9>&- || svc_die "pg_createcluster $ver main failed"
            fresh=1
        fi
        if as_root pg_ctlcluster "$ver" main status >/dev/null 2>&1; then
            svc_log "PostgreSQL: cluster $ver/main is running but not ready yet; waiting"
        else
            svc_log "PostgreSQL: starting cluster $ver/main"
            as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start 9>&- ||
                svc_die "starting PostgreSQL $ver/main failed; see /var/log/postgresql/postgresql-$ver-main.log"
            record_started "postgres version=$ver cluster=main port=$PG_PORT"
        fi
        wait_for "$SERVICE_START_TIMEOUT" "PostgreSQL on 127.0.0.1:$PG_PORT" pg_ready ||
            svc_die "PostgreSQL does not accept connections on 127.0.0.1:$PG_PORT; see /var/log/postgresql/postgresql-$ver-main.log (is the cluster on another port?)"
        svc_log "PostgreSQL: ready on 127.0.0.1:$PG_PORT"
    fi
    if ! pg_trust_login; then
        if ((fresh == 1 || CRONSHARD_PG_TRUST == 1)); then
            pg_allow_trust_on_loopback "${ver:-$(pg_version)}"
        else
            svc_die "PostgreSQL on 127.0.0.1:$PG_PORT refuses user postgres without a password. For a local dev/test stack, rerun with CRONSHARD_PG_TRUST=1 to add trust rules for 127.0.0.1/::1 to pg_hba.conf, or set DATABASE_URL/TEST_DATABASE_URL with credentials."
        fi
    fi
}

# --------------------------------------------------------------------- Redis

redis_ready() { [[ $(timeout 3 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; }

ensure_redis() {
    if command -v redis-cli >/dev/null 2>&1 && redis_ready; then
        svc_log "Redis: already running on 127.0.0.1:$REDIS_PORT"
        return 0
    fi
    if port_open "$REDIS_PORT"; then
        svc_die "port 127.0.0.1:$REDIS_PORT is taken by something that does not answer Redis PING (or redis-cli is missing)"
    fi
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        apt_install redis-server
    fi
    local dir="$CRONSHARD_STATE_DIR" pidfile="$CRONSHARD_STATE_DIR/redis-$REDIS_PORT.pid"
    mkdir -p "$dir/logs"
    rm -f "$pidfile"
    svc_log "Redis: starting on 127.0.0.1:$REDIS_PORT (no persistence; log $dir/logs/redis-$REDIS_PORT.log)"
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" --appendonly no \
        --dir "$dir" --pidfile "$pidfile" --logfile "$dir/logs/redis-$REDIS_PORT.log" </dev/null 9>&- ||
        svc_die "redis-server failed to start; see $dir/logs/redis-$REDIS_PORT.log"
    wait_for "$SERVICE_START_TIMEOUT" "Redis on 127.0.0.1:$REDIS_PORT" redis_ready ||
        svc_die "Redis does not answer on 127.0.0.1:$REDIS_PORT; see $dir/logs/redis-$REDIS_PORT.log"
    wait_for 5 "the Redis pid file" test -s "$pidfile" || true
    record_started "redis port=$REDIS_PORT pid=$(cat "$pidfile" 2>/dev/null || echo unknown)"
}

# ------------------------------------------------------------------ RabbitMQ

rabbitmq_ping() { as_root timeout 20 rabbitmq-diagnostics -q ping >/dev/null 2>&1; }

ensure_rabbitmq() {
    if port_open "$RABBITMQ_PORT"; then
        svc_log "RabbitMQ: already running on 127.0.0.1:$RABBITMQ_PORT"
        return 0
    fi
    if ! command -v rabbitmq-server >/dev/null 2>&1 || ! command -v rabbitmqctl >/dev/null 2>&1; then
        apt_install rabbitmq-server
    fi
    if rabbitmq_ping; then
        svc_log "RabbitMQ: node is up but port $RABBITMQ_PORT is not open yet; waiting"
    else
        svc_log "RabbitMQ: starting (rabbitmq-server -detached)"
        as_root rabbitmq-server -detached </dev/null 9>&- ||
            svc_die "rabbitmq-server -detached failed; see /var/log/rabbitmq/"
        record_started "rabbitmq port=$RABBITMQ_PORT"
    fi
    local deadline=$((SECONDS + RABBITMQ_START_TIMEOUT)) booted=0
    until port_open "$RABBITMQ_PORT"; do
        ((SECONDS < deadline)) ||
            svc_die "RabbitMQ did not open 127.0.0.1:$RABBITMQ_PORT within ${RABBITMQ_START_TIMEOUT}s; see /var/log/rabbitmq/ (a node listening elsewhere? check listeners in /etc/rabbitmq/rabbitmq.conf)"
        # await_startup fails at once while the Erlang node itself is still
        # coming up, so it is retried until it has succeeded once.
        if ((booted == 0)) && as_root timeout 30 rabbitmqctl -q await_startup --timeout 25 >/dev/null 2>&1; then
            booted=1
        fi
        sleep 1
    done
    svc_log "RabbitMQ: ready on 127.0.0.1:$RABBITMQ_PORT"
}

# ---------------------------------------------------------------------- moto

moto_binary() {
    if command -v moto_server >/dev/null 2>&1; then
        command -v moto_server
    elif [[ -x $MOTO_VENV/bin/moto_server ]]; then
        printf '%s\n' "$MOTO_VENV/bin/moto_server"
    else
        return 1
    fi
}

ensure_moto() {
    if port_open "$MOTO_PORT"; then
        svc_log "moto (SQS): already running on 127.0.0.1:$MOTO_PORT"
        return 0
    fi
    local bin
    if ! bin=$(moto_binary); then
        # Debian's Python refuses system-wide pip installs (PEP 668): use a venv of our own.
        svc_log "moto_server not found: installing 'moto[server]' into $MOTO_VENV"
        if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
            apt_install python3 python3-venv
        fi
        python3 -m venv "$MOTO_VENV" || svc_die "python3 -m venv $MOTO_VENV failed"
        "$MOTO_VENV/bin/pip" install -q 'moto[server]' || svc_die "pip install 'moto[server]' failed"
        bin=$MOTO_VENV/bin/moto_server
    fi
    mkdir -p "$CRONSHARD_STATE_DIR/logs"
    local log="$CRONSHARD_STATE_DIR/logs/moto-$MOTO_PORT.log" pid
    svc_log "moto (SQS): starting $bin on 127.0.0.1:$MOTO_PORT (log $log)"
    # Own session: it outlives this script and never sees the terminal's Ctrl-C.
    setsid "$bin" -H 127.0.0.1 -p "$MOTO_PORT" >"$log" 2>&1 </dev/null 9>&- &
    pid=$!
    wait_for "$SERVICE_START_TIMEOUT" "moto on 127.0.0.1:$MOTO_PORT" port_open "$MOTO_PORT" ||
        svc_die "moto_server did not open 127.0.0.1:$MOTO_PORT; see $log"
    record_started "moto port=$MOTO_PORT pid=$pid"
}

# ------------------------------------------------------------------ verifier

# The Standard Webhooks reference verifier for Python, which the signature
# tests run as a receiver: a library the project did not write.
ensure_verifier() {
    if [[ -x $VERIFIER_VENV/bin/python ]] && "$VERIFIER_VENV/bin/python" -c 'import standardwebhooks' 2>/dev/null; then
        svc_log "standardwebhooks verifier: ready in $VERIFIER_VENV"
        return 0
    fi
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
        apt_install python3 python3-venv
    fi
    svc_log "standardwebhooks verifier: installing into $VERIFIER_VENV"
    python3 -m venv "$VERIFIER_VENV" || svc_die "python3 -m venv $VERIFIER_VENV failed"
    "$VERIFIER_VENV/bin/pip" install -q 'standardwebhooks>=1.0,<2' || svc_die "pip install standardwebhooks failed"
}

# ------------------------------------------------------------------ croniter

# Python's croniter, which the cron oracle test (common/domain/tests/cron_oracle.rs)
# compares cronshard's recurrence code with: a cron evaluator the project did
# not write.
ensure_croniter() {
    if [[ -x $CRONITER_VENV/bin/python ]] &&
        "$CRONITER_VENV/bin/python" -c "import sys, croniter, importlib.metadata as m; sys.exit(m.version('croniter') != '$CRONITER_VERSION')" 2>/dev/null; then
        svc_log "croniter $CRONITER_VERSION: ready in $CRONITER_VENV"
        return 0
    fi
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
        apt_install python3 python3-venv
    fi
    svc_log "croniter $CRONITER_VERSION: installing into $CRONITER_VENV"
    python3 -m venv "$CRONITER_VENV" || svc_die "python3 -m venv $CRONITER_VENV failed"
    "$CRONITER_VENV/bin/pip" install -q "croniter==$CRONITER_VERSION" || svc_die "pip install croniter==$CRONITER_VERSION failed"
}

# ---------------------------------------------------------------- replicated

# Packages missing for the chaos scenario's private services
# (loadtest/src/chaos/services.rs), which run their own servers from the
# installed programs whatever answers on the default ports: PostgreSQL's
# initdb, pg_ctl and pg_basebackup (a streaming standby), redis-server (also
# as Sentinel: `redis-server <conf> --sentinel`, so not the redis-sentinel
# package, which would start a machine-wide Sentinel on port 26379 too),
# RabbitMQ's scripts (a three-node cluster), and pgrep and runuser.
replicated_missing_packages() {
    local v ok=0
    for v in /usr/lib/postgresql/*/bin; do
        [[ -x $v/initdb && -x $v/pg_ctl && -x $v/pg_basebackup ]] && ok=1
    done
    ((ok)) || printf '%s\n' postgresql
    command -v redis-server >/dev/null 2>&1 || printf '%s\n' redis-server
    [[ -x /usr/lib/rabbitmq/bin/rabbitmq-server && -x /usr/lib/rabbitmq/bin/rabbitmqctl ]] ||
        command -v rabbitmqctl >/dev/null 2>&1 || printf '%s\n' rabbitmq-server
    command -v pgrep >/dev/null 2>&1 || printf '%s\n' procps
    command -v runuser >/dev/null 2>&1 || printf '%s\n' util-linux
}

# --------------------------------------------------------------------- tools

ensure_tools() {
    local missing=() t
    for t in curl jq; do
        command -v "$t" >/dev/null 2>&1 || missing+=("$t")
    done
    if ((${#missing[@]})); then apt_install "${missing[@]}"; fi
}

# Serialises concurrent `ensure` runs (say up.sh and test.sh started together).
# Every start command above closes fd 9, so no daemon keeps the lock.
_svc_lock() {
    mkdir -p "$CRONSHARD_STATE_DIR"
    command -v flock >/dev/null 2>&1 || return 0
    exec 9>"$CRONSHARD_STATE_DIR/services.lock"
    flock -w 600 9 || svc_die "another services.sh ensure held $CRONSHARD_STATE_DIR/services.lock for 10 minutes"
}
_svc_unlock() { exec 9>&-; }

# ensure_all [moto] [faketime] [verifier] [croniter] [replicated]
ensure_all() {
    local want_moto=0 want_faketime=0 want_verifier=0 want_croniter=0 want_replicated=0 arg
    for arg in "$@"; do
        case $arg in
            moto | sqs) want_moto=1 ;;
            faketime) want_faketime=1 ;;
            verifier) want_verifier=1 ;;
            croniter) want_croniter=1 ;;
            replicated) want_replicated=1 ;;
            *) svc_die "unknown service '$arg' (known: moto, faketime, verifier, croniter, replicated)" ;;
        esac
    done
    _svc_lock
    # Install everything that is missing in one apt-get run.
    local pkgs=()
    pg_ready || pg_installed || pkgs+=(postgresql)
    { command -v redis-cli >/dev/null 2>&1 && redis_ready; } || command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
    port_open "$RABBITMQ_PORT" || command -v rabbitmq-server >/dev/null 2>&1 || pkgs+=(rabbitmq-server)
    command -v curl >/dev/null 2>&1 || pkgs+=(curl)
    command -v jq >/dev/null 2>&1 || pkgs+=(jq)
    # The clock-skew tests run processes under libfaketime.
    if ((want_faketime)) && ! compgen -G '/usr/lib/*/faketime/libfaketime.so.1' >/dev/null; then pkgs+=(faketime); fi
    if ((want_replicated)); then
        local p
        for p in $(replicated_missing_packages); do
            [[ " ${pkgs[*]} " == *" $p "* ]] || pkgs+=("$p")
        done
    fi
    if ((${#pkgs[@]})); then apt_install "${pkgs[@]}"; fi
    ensure_tools
    ensure_postgres
    ensure_redis
    ensure_rabbitmq
    if ((want_moto)); then ensure_moto; fi
    if ((want_verifier)); then ensure_verifier; fi
    if ((want_croniter)); then ensure_croniter; fi
    _svc_unlock
}

status_all() {
    local rc=0
    if pg_ready; then svc_log "PostgreSQL 127.0.0.1:$PG_PORT: up"; else
        svc_log "PostgreSQL 127.0.0.1:$PG_PORT: DOWN"
        rc=1
    fi
    if command -v redis-cli >/dev/null 2>&1 && redis_ready; then svc_log "Redis 127.0.0.1:$REDIS_PORT: up"; else
        svc_log "Redis 127.0.0.1:$REDIS_PORT: DOWN"
        rc=1
    fi
    if port_open "$RABBITMQ_PORT"; then svc_log "RabbitMQ 127.0.0.1:$RABBITMQ_PORT: up"; else
        svc_log "RabbitMQ 127.0.0.1:$RABBITMQ_PORT: DOWN"
        rc=1
    fi
    if [[ ${1:-} == moto || ${1:-} == sqs ]]; then
        if port_open "$MOTO_PORT"; then svc_log "moto 127.0.0.1:$MOTO_PORT: up"; else
            svc_log "moto 127.0.0.1:$MOTO_PORT: DOWN"
            rc=1
        fi
    fi
    return "$rc"
}

# True when pid $1 runs and its command line contains $2.
_pid_runs() {
    [[ $1 =~ ^[0-9]+$ && -r /proc/$1/cmdline ]] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF -- "$2"
}

_stop_pid() {
    local pid=$1 what=$2 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 100; i++)); do
        [[ -e /proc/$pid ]] || return 0
        sleep 0.1
    done
    svc_log "$what (pid $pid) ignored SIGTERM for 10s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

# stop_started [RECORD_FILE]: stops what the record file says this script
# started, newest first, then removes the file. Anything else is left alone.
stop_started() {
    local file=${1:-$CRONSHARD_SERVICES_RECORD} line svc kv port pid version cluster i
    [[ -s $file ]] || {
        svc_log "nothing recorded in $file: nothing to stop"
        return 0
    }
    local lines=()
    mapfile -t lines <"$file"
    for ((i = ${#lines[@]} - 1; i >= 0; i--)); do
        line=${lines[i]}
        read -r svc _ <<<"$line"
        port='' pid='' version='' cluster=''
        for kv in $line; do
            case $kv in
                port=*) port=${kv#port=} ;;
                pid=*) pid=${kv#pid=} ;;
                version=*) version=${kv#version=} ;;
                cluster=*) cluster=${kv#cluster=} ;;
            esac
        done
        case $svc in
            postgres)
                svc_log "stopping PostgreSQL $version/$cluster"
                as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$cluster" stop || svc_log "could not stop PostgreSQL $version/$cluster"
                ;;
            redis)
                if _pid_runs "$pid" redis-server; then
                    svc_log "stopping Redis on port $port (pid $pid)"
                    _stop_pid "$pid" redis-server
                else
                    svc_log "Redis on port $port (pid $pid) is no longer running"
                fi
                ;;
            rabbitmq)
                svc_log "stopping RabbitMQ"
                as_root timeout 120 rabbitmqctl -q stop || svc_log "could not stop RabbitMQ"
                ;;
            moto)
                if _pid_runs "$pid" moto_server; then
                    svc_log "stopping moto on port $port (pid $pid)"
                    _stop_pid "$pid" moto_server
                else
                    svc_log "moto on port $port (pid $pid) is no longer running"
                fi
                ;;
            *) svc_log "unknown record line, ignored: $line" ;;
        esac
    done
    rm -f "$file"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    cmd=${1:-}
    shift || true
    case $cmd in
        ensure) ensure_all "$@" ;;
        status) status_all "$@" ;;
        stop-started) stop_started "$@" ;;
        *)
            sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
            exit 2
            ;;
    esac
fi
