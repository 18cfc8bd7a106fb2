#!/usr/bin/env bash
# Run DepL as a real Flower deployment on loopback (127.0.0.1):
#   one flower-superlink + N flower-supernode processes (insecure, distinct ports),
#   then `flwr run <project> loopback --stream` against that SuperLink.
#
# Usage: scripts/deploy_loopback.sh [options] [HYDRA_OVERRIDE ...]
#   -n N          number of SuperNodes / clients (default 3)
#   -r ROUNDS     target.max_rounds (default 2)
#   -c A,B,B      cluster of each SuperNode, in partition-id order
#                 (default: the split of conf/clusters/two_class.yaml, 40% A / 60% B)
#   -o DIR        output folder for results.json and the logs (default: outputs/deploy-<time>)
#   -t SECONDS    give up on the run after this long (default 900)
#   -k            keep the temporary FLWR_HOME folders (default: removed)
#   -d SPLIT_DIR  node-local data: SuperNode i reads SPLIT_DIR/node-<i> (node config
#                 data-dir), the server gets only dataset=folder dataset.test_dir=SPLIT_DIR/test
#                 (folders written by `depl-fl split --out SPLIT_DIR`)
#   HYDRA_OVERRIDE  extra overrides for conf/config.yaml, e.g. method=full seed=3
#
# Every process this script starts is stopped when it exits, whatever the reason
# (trap on EXIT/INT/TERM). The exit status is 0 only if results.json was written.
# The flwr executables are taken from $FLWR_BIN, else <project>/.venv/bin, else PATH.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NUM=3
ROUNDS=2
CLUSTERS=""
OUT=""
TIMEOUT=900
KEEP=0
SPLIT=""
while getopts "n:r:c:o:t:d:kh" opt; do
    case "$opt" in
        n) NUM="$OPTARG" ;;
        r) ROUNDS="$OPTARG" ;;
        c) CLUSTERS="$OPTARG" ;;
        o) OUT="$OPTARG" ;;
        t) TIMEOUT="$OPTARG" ;;
        k) KEEP=1 ;;
        d) SPLIT="$OPTARG" ;;
        h) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "deploy_loopback: unknown option (see -h)" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
EXTRA=("$@")

die() { echo "deploy_loopback: $*" >&2; exit 2; }
[[ "$NUM" =~ ^[1-9][0-9]*$ ]] || die "-n must be a positive integer, got '$NUM'"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "-r must be a positive integer, got '$ROUNDS'"
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "-t must be a positive integer, got '$TIMEOUT'"
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

PIDS=()
all_descendants() {  # all live descendants of pid $1 (children first found, recursively)
    local kid
    for kid in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        echo "$kid"
        all_descendants "$kid"
    done
}
marked_pids() {  # live processes started from here: they inherit FLWR_HOME=$WORK/...
    local f
    for f in /proc/[0-9]*/environ; do
        grep -qz "^FLWR_HOME=$WORK/" "$f" 2>/dev/null && { f="${f#/proc/}"; echo "${f%/environ}"; }
    done
    return 0
}
wait_dead() {  # wait up to $1 tenths of a second until none of pids ${@:2} is alive
    local i pid alive
    for ((i = 0; i < $1; i++)); do
        alive=0
        for pid in "${@:2}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [[ "$alive" -eq 0 ]] && return 0
        sleep 0.1
    done
    return 1
}
cleanup() {
    local status=$? pid victims=()
    trap - EXIT INT TERM
    exec 3>&2 2>/dev/null  # no "Killed" job notices; messages go to fd 3
    # Collect the whole tree first: SuperLink/SuperNodes start flower-superexec in a
    # new session, so it is not in this script's process group.
    for pid in "${PIDS[@]+"${PIDS[@]}"}"; do
        victims+=("$pid" $(all_descendants "$pid"))
    done
    # Orphans (e.g. a ClientApp whose SuperExec is gone) are no longer descendants.
    victims+=($(marked_pids))
    if [[ "${#victims[@]}" -gt 0 ]]; then
        # SIGTERM to the SuperLink/SuperNodes first: they stop (and reap) their own
        # SuperExec; whatever is left after 10 s gets SIGTERM, then SIGKILL.
        for pid in "${PIDS[@]}"; do kill -TERM "$pid" || true; done
        # The `flwr run` client has nothing to shut down: stop its whole tree now.
        if [[ -n "${RUN_PID:-}" ]]; then
            for pid in $(all_descendants "$RUN_PID"); do kill -TERM "$pid" || true; done
        fi
        if ! wait_dead 100 "${victims[@]}"; then
            for pid in "${victims[@]}"; do kill -TERM "$pid" || true; done
            wait_dead 20 "${victims[@]}" || for pid in "${victims[@]}"; do kill -KILL "$pid" || true; done
        fi
        wait || true
    fi
    for pid in $(marked_pids); do kill -KILL "$pid" || true; done
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

read -r -a PORTS <<< "$(free_ports $((NUM + 1)))"
LINK_PORT="${PORTS[0]}"

mkdir -p "$WORK/superlink"
(cd "$WORK/superlink" && FLWR_HOME="$WORK/superlink" exec "$BIN/flower-superlink" --insecure \
    --host 127.0.0.1 --port "$LINK_PORT" --disable-runtime-dependency-installation) \
    > "$LOGS/superlink.log" 2>&1 &
PIDS+=("$!")
wait_port "$LINK_PORT" "${PIDS[0]}"
echo "deploy_loopback: SuperLink on 127.0.0.1:$LINK_PORT" >&2

for ((i = 0; i < NUM; i++)); do
    node_port="${PORTS[$((i + 1))]}"
    mkdir -p "$WORK/supernode-$i"
    NODE_CONFIG="partition-id=$i num-partitions=$NUM cluster=\"${CLUSTER_OF[$i]}\""
    if [[ -n "$SPLIT" ]]; then
        [[ -d "$SPLIT/node-$i" ]] || die "-d: $SPLIT/node-$i is not a folder"
        NODE_CONFIG+=" data-dir=\"$SPLIT/node-$i\""
    fi
    (cd "$WORK/supernode-$i" && FLWR_HOME="$WORK/supernode-$i" exec "$BIN/flower-supernode" --insecure \
        --superlink "127.0.0.1:$LINK_PORT" --host 127.0.0.1 --port "$node_port" \
        --node-config "$NODE_CONFIG") \
        > "$LOGS/supernode-$i.log" 2>&1 &
    PIDS+=("$!")
    echo "deploy_loopback: SuperNode $i (cluster ${CLUSTER_OF[$i]}) on 127.0.0.1:$node_port" >&2
done

# The CLI's connection list lives in $FLWR_HOME/config.toml (flwr rewrites it, so it
# is a temporary file and not part of pyproject.toml).
mkdir -p "$WORK/cli"
cat > "$WORK/cli/config.toml" <<EOF
[superlink]
default = "loopback"

[superlink.loopback]
address = "127.0.0.1:$LINK_PORT"
insecure = true
EOF

OVERRIDES="num_clients=$NUM target.max_rounds=$ROUNDS ++output.dir=$OUT"
OVERRIDES+=" profile.cache_dir=${DEPL_CACHE_DIR:-$ROOT/.depl_cache}"
[[ -z "$SPLIT" ]] || OVERRIDES+=" dataset=folder dataset.test_dir=$SPLIT/test"
for o in "${EXTRA[@]+"${EXTRA[@]}"}"; do
    [[ "$o" != *[[:space:]\"]* ]] || die "override '$o' must not contain spaces or double quotes"
    OVERRIDES+=" $o"
done
echo "deploy_loopback: flwr run $ROOT loopback --run-config 'overrides=\"$OVERRIDES\"'" >&2
rm -f "$OUT/results.json"
# In the background + `wait`, so that a signal to this script runs the trap at once
# (bash defers traps until a foreground command ends).
(cd "$ROOT" && FLWR_HOME="$WORK/cli" timeout "$TIMEOUT" "$BIN/flwr" run "$ROOT" loopback --stream \
    --run-config "overrides=\"$OVERRIDES\"" 2>&1 | tee "$LOGS/flwr-run.log"; exit "${PIPESTATUS[0]}") &
RUN_PID="$!"
PIDS+=("$RUN_PID")
RUN_STATUS=0
wait "$RUN_PID" || RUN_STATUS=$?
[[ "$RUN_STATUS" -ne 124 ]] || { echo "deploy_loopback: run timed out after $TIMEOUT s" >&2; exit 1; }
if [[ -s "$OUT/results.json" ]]; then
    echo "$OUT/results.json"
    exit 0
fi
echo "deploy_loopback: the run wrote no results.json (flwr exit $RUN_STATUS; logs in $LOGS)" >&2
exit 1
