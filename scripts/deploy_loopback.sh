#!/usr/bin/env bash
# Run DepL as a real Flower deployment on loopback (127.0.0.1):
#   one flower-superlink + N flower-supernode processes (distinct ports),
#   then `flwr run <project> loopback --stream` against that SuperLink.
#
# Usage: scripts/deploy_loopback.sh [options] [HYDRA_OVERRIDE ...]
#   -n N          number of SuperNodes / clients (default 3)
#   -r ROUNDS     target.max_rounds (default: the config's, null = no cap; the deadline bounds the plan)
#   -c A,B,B      cluster of each SuperNode, in partition-id order
#                 (default: the split of conf/clusters/two_class.yaml, 40% A / 60% B)
#   -o DIR        output folder for results.json and the logs (default: outputs/deploy-<time>)
#   -t SECONDS    give up on the run after this long (default 900)
#   -k            keep the temporary FLWR_HOME folders (default: removed)
#   -d SPLIT_DIR  node-local data: SuperNode i reads SPLIT_DIR/node-<i> (node config
#                 data-dir), the server gets only dataset=folder dataset.test_dir=SPLIT_DIR/test
#                 (folders written by `depl-fl split --out SPLIT_DIR`)
#   --isolate-data (with -d; needs root and unshare) every SuperNode and the SuperLink (with the
#                 ServerApp it starts) in its own mount namespace in which SPLIT_DIR shows only
#                 node-<i>, respectively only test: no process can read another's data. What each
#                 one sees is written to logs/<name>.view
#   --tls         TLS everywhere: a CA and a server certificate (subjectAltName IP:127.0.0.1)
#                 are generated with openssl into the temporary folder
#   --auth        SuperNode authentication (implies --tls): one ECDSA key pair per SuperNode,
#                 registered with `flwr supernode register` before the SuperNodes start
#   --intruder    (with --auth) also start one SuperNode whose key is NOT registered; its
#                 log is logs/supernode-intruder.log (the SuperLink must refuse it)
#   --database F  SuperLink state database file (default: in memory)
#   --crash-after K  chaos test: once round K is checkpointed (exploration rounds count),
#                 kill -9 the SuperLink and the ServerApp, restart the SuperLink on the same
#                 port and database, and `flwr run` again with the same overrides plus resume=true
#   --netem       every SuperNode in its own network namespace, its link shaped (tc netem, else tbf)
#                 to its cluster's bytes_per_s (+ --latency-ms, default 20 ms); needs root
#   --latency-ms MS  one-way latency of the netem links (default 20)
#   --cpu-quota A=100,B=50  (with --netem) each cluster's CPU quota in % of one CPU, instead of
#                 the quota proportional to the table's flops_per_s: devices whose real speed
#                 differs from the declared table
#   --node-extra 'K=V ...'  appended to every SuperNode's node config, e.g.
#                 'level-threads="1,2" level-watts="2,5"'
#   HYDRA_OVERRIDE  extra overrides for conf/config.yaml, e.g. method=full seed=3
#
# Every process this script starts is stopped when it exits, whatever the reason
# (trap on EXIT/INT/TERM): SIGTERM, then SIGKILL to whatever has not exited after
# $DEPL_STOP_GRACE_S seconds (default 10; first the run client and SuperNodes, then the
# SuperLink), so that the cleanup never stalls on a process that does not exit.
# The exit status is 0 only if results.json was written with summary.status "completed".
# The flwr executables are taken from $FLWR_BIN, else <project>/.venv/bin, else PATH.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NUM=3
ROUNDS=""
CLUSTERS=""
OUT=""
TIMEOUT=900
KEEP=0
SPLIT=""
TLS=0
AUTH=0
INTRUDER=0
DATABASE=""
CRASH_AFTER=""
NETEM=0
LATENCY_MS=20
ISOLATE=0
NODE_EXTRA=""
declare -A CPU_QUOTA=()
# Long options first (getopts knows only short ones); the rest goes to getopts.
SHORT=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --tls) TLS=1 ;;
        --auth) AUTH=1; TLS=1 ;;
        --intruder) INTRUDER=1 ;;
        --database) DATABASE="${2:-}"; shift ;;
        --database=*) DATABASE="${1#*=}" ;;
        --crash-after) CRASH_AFTER="${2:-}"; shift ;;
        --crash-after=*) CRASH_AFTER="${1#*=}" ;;
        --netem) NETEM=1 ;;
        --isolate-data) ISOLATE=1 ;;
        --latency-ms) LATENCY_MS="${2:-}"; shift ;;
        --latency-ms=*) LATENCY_MS="${1#*=}" ;;
        --node-extra) NODE_EXTRA="${2:-}"; shift ;;
        --cpu-quota)
            IFS=, read -r -a _quotas <<< "${2:-}"
            for _q in "${_quotas[@]}"; do
                [[ "$_q" =~ ^[A-Za-z0-9_]+=[0-9]+$ ]] \
                    || { echo "deploy_loopback: --cpu-quota wants CLUSTER=PERCENT,..., got '$_q'" >&2; exit 2; }
                CPU_QUOTA[${_q%%=*}]="${_q#*=}"
            done
            shift ;;
        --help) SHORT+=("-h") ;;
        --*) echo "deploy_loopback: unknown option $1 (see -h)" >&2; exit 2 ;;
        *) SHORT+=("$1") ;;
    esac
    shift
done
set -- "${SHORT[@]+"${SHORT[@]}"}"
while getopts "n:r:c:o:t:d:kh" opt; do
    case "$opt" in
        n) NUM="$OPTARG" ;;
        r) ROUNDS="$OPTARG" ;;
        c) CLUSTERS="$OPTARG" ;;
        o) OUT="$OPTARG" ;;
        t) TIMEOUT="$OPTARG" ;;
        k) KEEP=1 ;;
        d) SPLIT="$OPTARG" ;;
        h) sed -n '2,46p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "deploy_loopback: unknown option (see -h)" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
EXTRA=("$@")

die() { echo "deploy_loopback: $*" >&2; exit 2; }
node_data() {  # with -d: the node config entry of SuperNode $1's own folder
    [[ -z "$SPLIT" ]] || printf ' data-dir="%s/node-%s"' "$SPLIT" "$1"
}
[[ "$NUM" =~ ^[1-9][0-9]*$ ]] || die "-n must be a positive integer, got '$NUM'"
[[ -z "$ROUNDS" || "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "-r must be a positive integer, got '$ROUNDS'"
[[ -z "$CRASH_AFTER" || "$CRASH_AFTER" =~ ^[1-9][0-9]*$ ]] || \
    die "--crash-after must be a positive integer, got '$CRASH_AFTER'"
[[ "$LATENCY_MS" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--latency-ms must be a number >= 0, got '$LATENCY_MS'"
[[ "$INTRUDER" -eq 0 || "$AUTH" -eq 1 ]] || die "--intruder needs --auth"
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "-t must be a positive integer, got '$TIMEOUT'"
[[ "$ISOLATE" -eq 0 || -n "$SPLIT" ]] || die "--isolate-data needs -d SPLIT_DIR"
if [[ "$ISOLATE" -eq 1 ]]; then
    [[ "$(id -u)" -eq 0 ]] && command -v unshare > /dev/null || die "--isolate-data needs root and unshare"
fi
if [[ -n "$SPLIT" ]]; then
    [[ -d "$SPLIT/test" ]] || die "-d: $SPLIT/test is not a folder (write it with depl-fl split --out $SPLIT)"
    SPLIT="$(cd "$SPLIT" && pwd)"
    [[ "$SPLIT" != *[[:space:]\"]* ]] || die "-d: the path must not contain spaces or double quotes"
fi

if [[ -n "${FLWR_BIN:-}" ]]; then BIN="$FLWR_BIN"
elif [[ -x "$ROOT/.venv/bin/flower-superlink" ]]; then BIN="$ROOT/.venv/bin"
else BIN="$(dirname "$(command -v flower-superlink || echo /nonexistent/x)")"
fi
for exe in flower-superlink flower-supernode flower-superexec flwr python; do
    [[ -x "$BIN/$exe" ]] || die "$exe not found in $BIN (install the fl extra: pip install -e '.[fl]')"
done
# The SuperLink and SuperNodes start flower-superexec / flwr-* by name.
export PATH="$BIN:$PATH"
# Use the installed environment; do not `uv sync` the app's dependencies at run time.
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1

if [[ -z "$CLUSTERS" ]]; then
    CLUSTERS="$("$BIN/python" -c "import sys; sys.path.insert(0, '$ROOT')
from depl_fl.runs.runconfig import cluster_assignment
print(','.join(cluster_assignment($NUM, {'A': {'fraction': 0.4}, 'B': {'fraction': 0.6}})))")"
fi
IFS=',' read -r -a CLUSTER_OF <<< "$CLUSTERS"
[[ "${#CLUSTER_OF[@]}" -eq "$NUM" ]] || die "-c needs $NUM comma-separated cluster ids, got '$CLUSTERS'"

[[ -n "$OUT" ]] || OUT="$ROOT/outputs/deploy-$(date +%Y-%m-%d_%H-%M-%S)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOGS="$OUT/logs"
mkdir -p "$LOGS"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/depl-deploy.XXXXXX")"
# Every started process inherits FLWR_HOME=$WORK/..., which identifies them.
echo "deploy_loopback: work dir $WORK" >&2

# shellcheck source=scripts/proc_lib.sh
source "$ROOT/scripts/proc_lib.sh"
# Seconds a process may take to exit after SIGTERM before it gets SIGKILL (per stage of the cleanup).
STOP_GRACE_S="${DEPL_STOP_GRACE_S:-10}"
[[ "$STOP_GRACE_S" =~ ^[0-9]+$ ]] || die "DEPL_STOP_GRACE_S must be a whole number of seconds, got '$STOP_GRACE_S'"

PIDS=()
LINK_PIDS=()
pids_with_env() {  # live processes whose environment has an entry starting with $1 (one grep)
    local f
    for f in $(grep -lsz -- "^$1" /proc/[0-9]*/environ); do
        f="${f#/proc/}"
        proc_alive "${f%/environ}" && echo "${f%/environ}"
    done
    return 0
}
marked_pids() {  # live processes started from here: they inherit FLWR_HOME=$WORK/...
    pids_with_env "FLWR_HOME=$WORK/"
}
cleanup() {
    local status=$? t0=$SECONDS pid nodes=() n1 k1 n2 k2 left
    trap - EXIT INT TERM
    exec 3>&2 2>/dev/null  # no "Killed" job notices; messages go to fd 3
    # First the `flwr run` client and the SuperNodes (with their SuperExec and ClientApps, which
    # a SuperNode starts in a new session), while the SuperLink they say goodbye to is still up;
    # then the SuperLink and whatever else carries this run's FLWR_HOME (orphans included).
    # Each stage: SIGTERM, at most STOP_GRACE_S seconds, then SIGKILL (scripts/proc_lib.sh).
    for pid in "${PIDS[@]+"${PIDS[@]}"}"; do
        [[ " ${LINK_PIDS[*]+"${LINK_PIDS[*]}"} " == *" $pid "* ]] || nodes+=("$pid")
    done
    read -r n1 k1 <<< "$(proc_stop "$STOP_GRACE_S" : "${nodes[@]+"${nodes[@]}"}")"
    read -r n2 k2 <<< "$(proc_stop "$STOP_GRACE_S" marked_pids "${LINK_PIDS[@]+"${LINK_PIDS[@]}"}")"
    # Reap our own children (dead by now: a zombie is reaped at once, nothing is waited for).
    for pid in "${PIDS[@]+"${PIDS[@]}"}"; do
        proc_alive "$pid" || wait "$pid" || true
    done
    [[ "$NETEM" -eq 0 ]] || ! declare -F netem_teardown > /dev/null || netem_teardown
    echo "deploy_loopback: stopped $((n1 + n2)) processes in $((SECONDS - t0)) s" \
        "($((k1 + k2)) needed SIGKILL after ${STOP_GRACE_S} s)" >&3
    left="$(marked_pids)"
    [[ -z "$left" ]] || echo "deploy_loopback: still running after SIGKILL: $left" >&3
    if [[ "$KEEP" -eq 1 ]]; then echo "deploy_loopback: kept $WORK" >&3; else rm -rf "$WORK"; fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_ports() {  # $1 distinct free TCP ports on 127.0.0.1
    "$BIN/python" - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}
wait_port() {  # wait until 127.0.0.1:$1 accepts connections (pid $2 must stay alive)
    local i
    for i in $(seq 1 300); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || die "process $2 exited early (see $LOGS)"
        sleep 0.1
    done
    die "nothing listens on 127.0.0.1:$1 after 30 s (see $LOGS)"
}

read -r -a PORTS <<< "$(free_ports $((NUM + 2)))"
LINK_PORT="${PORTS[0]}"
# Where the SuperNodes reach the SuperLink (with --netem: through their veth link).
LINK_BIND=127.0.0.1
[[ "$NETEM" -eq 0 ]] || LINK_BIND=0.0.0.0
[[ -n "$DATABASE" || -z "$CRASH_AFTER" ]] || DATABASE="$WORK/superlink-state.db"

# ---------------------------------------------------------------- security material
LINK_SEC=(--insecure)
NODE_SEC=(--insecure)
CLI_SEC="insecure = true"
if [[ "$NETEM" -eq 1 ]]; then
    # shellcheck source=scripts/netem_lib.sh
    source "$ROOT/scripts/netem_lib.sh"
    netem_check || die "--netem needs root, ip netns and tc (see docs/DEPLOYMENT.md)"
fi
if [[ "$TLS" -eq 1 ]]; then
    command -v openssl > /dev/null || die "--tls needs openssl"
    CERTS="$WORK/certs"
    mkdir -p "$CERTS"
    SAN="IP:127.0.0.1,DNS:localhost"
    if [[ "$NETEM" -eq 1 ]]; then
        for ((i = 0; i < NUM; i++)); do SAN+=",IP:$(netem_host_ip "$i")"; done
    fi
    {
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=depl-loopback-ca" \
            -keyout "$CERTS/ca.key" -out "$CERTS/ca.crt"
        openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
            -keyout "$CERTS/server.key" -out "$CERTS/server.csr"
        printf 'subjectAltName=%s\n' "$SAN" > "$CERTS/server.ext"
        openssl x509 -req -days 2 -in "$CERTS/server.csr" -CA "$CERTS/ca.crt" -CAkey "$CERTS/ca.key" \
            -CAcreateserial -extfile "$CERTS/server.ext" -out "$CERTS/server.pem"
    } > "$LOGS/openssl.log" 2>&1 || die "openssl failed (see $LOGS/openssl.log)"
    LINK_SEC=(--ssl-ca-certfile "$CERTS/ca.crt" --ssl-certfile "$CERTS/server.pem"
              --ssl-keyfile "$CERTS/server.key")
    NODE_SEC=(--root-certificates "$CERTS/ca.crt")
    CLI_SEC="root-certificates = \"$CERTS/ca.crt\""
    echo "deploy_loopback: TLS certificates in $CERTS (server: $SAN)" >&2
fi
[[ "$AUTH" -eq 0 ]] || LINK_SEC+=(--enable-supernode-auth)

# ---------------------------------------------------------------- data isolation
# One line: isolate_wrap's words travel one per line.
ISOLATE_SCRIPT='mount --bind "$1/$2" "$3" && mount -t tmpfs -o mode=0755 tmpfs "$1" && mkdir "$1/$2"'\
' && mount --bind "$3" "$1/$2" && umount "$3" && ls -A "$1" > "$4" && shift 4 && exec "$@"'
isolate_wrap() {  # $1 folder of SPLIT_DIR to keep, $2 name: a command prefix (one word per line)
    # In a private mount namespace: stash the kept folder, cover SPLIT_DIR with an empty tmpfs,
    # put the kept folder back at its old path, record what the process sees, run the command.
    local stash="$WORK/stash-$2"
    mkdir -p "$stash"
    printf '%s\n' unshare --mount --propagation private sh -c \
        "$ISOLATE_SCRIPT" \
        sh "$SPLIT" "$1" "$stash" "$LOGS/$2.view"
}

# ---------------------------------------------------------------- SuperLink
LINK_PID=""
start_superlink() {
    local db=()
    [[ -z "$DATABASE" ]] || db=(--database "$DATABASE")
    local iso=()
    [[ "$ISOLATE" -eq 0 ]] || mapfile -t iso < <(isolate_wrap test superlink)
    mkdir -p "$WORK/superlink"
    (cd "$WORK/superlink" && FLWR_HOME="$WORK/superlink" exec "${iso[@]+"${iso[@]}"}" "$BIN/flower-superlink" "${LINK_SEC[@]}" \
        --host "$LINK_BIND" --port "$LINK_PORT" --disable-runtime-dependency-installation \
        "${db[@]+"${db[@]}"}") >> "$LOGS/superlink.log" 2>&1 &
    LINK_PID="$!"
    PIDS+=("$LINK_PID")
    LINK_PIDS+=("$LINK_PID")
    wait_port "$LINK_PORT" "$LINK_PID"
    echo "deploy_loopback: SuperLink on $LINK_BIND:$LINK_PORT (pid $LINK_PID)" >&2
}
start_superlink

# The CLI's connection list lives in $FLWR_HOME/config.toml (flwr rewrites it, so it
# is a temporary file and not part of pyproject.toml).
mkdir -p "$WORK/cli"
cat > "$WORK/cli/config.toml" <<EOF
[superlink]
default = "loopback"

[superlink.loopback]
address = "127.0.0.1:$LINK_PORT"
$CLI_SEC
EOF

# ---------------------------------------------------------------- SuperNodes
KEYS="$WORK/keys"
make_key() {  # ECDSA key pair $KEYS/$1{,.pub}
    mkdir -p "$KEYS"
    ssh-keygen -q -t ecdsa -b 384 -N "" -C "$1" -f "$KEYS/$1" > /dev/null || die "ssh-keygen failed"
}
if [[ "$AUTH" -eq 1 ]]; then
    command -v ssh-keygen > /dev/null || die "--auth needs ssh-keygen"
    for ((i = 0; i < NUM; i++)); do
        make_key "supernode-$i"
        FLWR_HOME="$WORK/cli" "$BIN/flwr" supernode register "$KEYS/supernode-$i.pub" loopback \
            >> "$LOGS/register.log" 2>&1 || die "flwr supernode register failed (see $LOGS/register.log)"
    done
    echo "deploy_loopback: registered $NUM SuperNode keys" >&2
fi

start_supernode() {  # $1 name, $2 node port, $3 node config, $4 netem index or "", $5 key or "",
    #                  $6 (with --isolate-data) its folder of SPLIT_DIR
    local auth=() wrap=() iso=() link="127.0.0.1:$LINK_PORT"
    [[ -z "$5" ]] || auth=(--auth-supernode-private-key "$KEYS/$5")
    [[ "$ISOLATE" -eq 0 || -z "$6" ]] || mapfile -t iso < <(isolate_wrap "$6" "$1")
    if [[ -n "$4" ]]; then
        read -r -a wrap <<< "$(netem_wrap "$4")"
        link="$(netem_host_ip "$4"):$LINK_PORT"
    fi
    mkdir -p "$WORK/$1"
    (cd "$WORK/$1" && FLWR_HOME="$WORK/$1" exec "${wrap[@]+"${wrap[@]}"}" "${iso[@]+"${iso[@]}"}" "$BIN/flower-supernode" \
        "${NODE_SEC[@]}" "${auth[@]+"${auth[@]}"}" --superlink "$link" --host 127.0.0.1 --port "$2" \
        --node-config "$3") > "$LOGS/$1.log" 2>&1 &
    PIDS+=("$!")
    [[ -z "$4" ]] || netem_limit_cpu "$4" "$!"
}
[[ "$NETEM" -eq 0 ]] || netem_setup "$NUM"
for ((i = 0; i < NUM; i++)); do
    key=""
    [[ "$AUTH" -eq 0 ]] || key="supernode-$i"
    ns=""
    [[ "$NETEM" -eq 0 ]] || ns="$i"
    start_supernode "supernode-$i" "${PORTS[$((i + 1))]}" \
        "partition-id=$i num-partitions=$NUM cluster=\"${CLUSTER_OF[$i]}\"$(node_data "$i")${NODE_EXTRA:+ $NODE_EXTRA}" \
        "$ns" "$key" \
        "node-$i"
    echo "deploy_loopback: SuperNode $i (cluster ${CLUSTER_OF[$i]}) on 127.0.0.1:${PORTS[$((i + 1))]}" >&2
done
if [[ "$INTRUDER" -eq 1 ]]; then
    make_key intruder  # never registered
    start_supernode supernode-intruder "${PORTS[$((NUM + 1))]}" \
        "partition-id=0 num-partitions=$NUM cluster=\"${CLUSTER_OF[0]}\"" "" intruder
    echo "deploy_loopback: SuperNode with an unregistered key started (logs/supernode-intruder.log)" >&2
fi

# ---------------------------------------------------------------- the run
OVERRIDES="num_clients=$NUM ++output.dir=$OUT"
[[ -z "$ROUNDS" ]] || OVERRIDES+=" target.max_rounds=$ROUNDS"
OVERRIDES+=" profile.cache_dir=${DEPL_CACHE_DIR:-$ROOT/.depl_cache}"
[[ -z "$SPLIT" ]] || OVERRIDES+=" dataset=folder dataset.test_dir=$SPLIT/test"
for o in "${EXTRA[@]+"${EXTRA[@]}"}"; do
    [[ "$o" != *[[:space:]\"]* ]] || die "override '$o' must not contain spaces or double quotes"
    OVERRIDES+=" $o"
done
results_state() {  # "<status> <rounds>" of $OUT/results.json, or "none 0"
    "$BIN/python" -c 'import json, sys
doc = json.load(open(sys.argv[1]))
print(doc["summary"].get("status", "completed"), len(doc["rounds"]))' "$OUT/results.json" 2>/dev/null \
        || echo "none 0"
}
start_run() {  # $1: overrides; in the background, so that a signal runs the trap at once
    echo "deploy_loopback: flwr run $ROOT loopback --run-config 'overrides=\"$1\"'" >&2
    (cd "$ROOT" && FLWR_HOME="$WORK/cli" timeout -k 15 "$TIMEOUT" "$BIN/flwr" run "$ROOT" loopback --stream \
        --run-config "overrides=\"$1\"" 2>&1 | tee -a "$LOGS/flwr-run.log"; exit "${PIPESTATUS[0]}") &
    RUN_PID="$!"
    PIDS+=("$RUN_PID")
}
crash_superlink() {  # kill -9 the SuperLink and everything it started (SuperExec, ServerApp)
    local pid victims=("$LINK_PID")
    victims+=($(pids_with_env "FLWR_HOME=$WORK/superlink\$"))
    echo "deploy_loopback: crash test: kill -9 of the SuperLink and ServerApp (pids ${victims[*]})" >&2
    for pid in "${victims[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    proc_stop "$STOP_GRACE_S" : "$RUN_PID" > /dev/null || true  # the `flwr run` client
    proc_alive "$RUN_PID" || wait "$RUN_PID" 2>/dev/null || true
}
rm -f "$OUT/results.json"
start_run "$OVERRIDES"
if [[ -n "$CRASH_AFTER" ]]; then
    seen=""
    while kill -0 "$RUN_PID" 2>/dev/null; do
        read -r state done_rounds <<< "$(results_state)"
        [[ "$state $done_rounds" == "$seen" ]] || echo "deploy_loopback: results.json: $state, $done_rounds rounds" >&2
        seen="$state $done_rounds"
        if [[ "$state" == running && "$done_rounds" -ge "$CRASH_AFTER" ]]; then
            crash_superlink
            start_superlink
            start_run "$OVERRIDES resume=true"
            break
        fi
        sleep 0.5
    done
fi
RUN_STATUS=0
wait "$RUN_PID" || RUN_STATUS=$?
[[ "$RUN_STATUS" -ne 124 ]] || { echo "deploy_loopback: run timed out after $TIMEOUT s" >&2; exit 1; }
read -r state done_rounds <<< "$(results_state)"
if [[ "$state" == completed ]]; then
    echo "$OUT/results.json"
    exit 0
fi
# The ServerApp's own error (e.g. no dependable plan) is in the streamed log, not always in a
# results.json (a job refused before its first round writes none): name it here.
reason=$(grep -h -o 'depl_fl\.errors\.[A-Za-z]*Error: .*' "$LOGS/flwr-run.log" 2>/dev/null | tail -n 1 || true)
echo "deploy_loopback: the run did not complete (results.json: $state, $done_rounds rounds;" \
    "flwr exit $RUN_STATUS; logs in $LOGS)${reason:+: ${reason#depl_fl.errors.}}" >&2
exit 1
