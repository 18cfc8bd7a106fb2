# Network namespaces, shaped links and CPU quotas for scripts/deploy_loopback.sh --netem.
# Sourced by deploy_loopback.sh (needs ROOT, BIN, WORK, LOGS, NUM, CLUSTER_OF, EXTRA, LATENCY_MS, die).
#
# SuperNode i runs in network namespace depl<tag>n<i>, linked to the host by a veth
# pair (host 10.<a>.<b>.1/30, namespace .2/30). Both ends are shaped to the bytes_per_s
# of the node's cluster (upload and download), with `tc qdisc ... netem rate R delay D`
# where the kernel has sch_netem, else with `tbf rate R` (rate only: the latency is
# then NOT emulated and the script says so). Where cgroup v1's cpu controller is
# mounted, SuperNode i and everything it starts run in a cgroup whose CPU quota is
# proportional to its cluster's fastest flops_per_s (the fastest cluster gets one
# full CPU).

NETEM_TAG="$(( $$ % 50000 ))"
NETEM_QDISC=""
NETEM_CGROUPS=()
NETEM_NS=()
declare -A NETEM_BPS NETEM_FLOPS NETEM_QUOTA

netem_check() {  # root, ip netns and a shaping qdisc
    [[ "$(id -u)" -eq 0 ]] && command -v ip > /dev/null && command -v tc > /dev/null || return 1
    local probe="dpr$NETEM_TAG"
    ip link add "$probe" type veth peer name "${probe}x" 2> /dev/null || return 1
    if tc qdisc add dev "$probe" root netem delay 1ms rate 1mbit 2> /dev/null; then
        NETEM_QDISC=netem
    elif tc qdisc add dev "$probe" root tbf rate 1mbit burst 32kbit latency 1s 2> /dev/null; then
        NETEM_QDISC=tbf
        echo "deploy_loopback: tc netem is not available in this kernel ('Specified qdisc kind" \
            "is unknown'); links are rate-limited with tbf, latency is NOT emulated" >&2
    fi
    ip link del "$probe" 2> /dev/null
    [[ -n "$NETEM_QDISC" ]]
}

netem_host_ip() { echo "10.$((200 + NETEM_TAG / 1000 % 50)).$(( (NETEM_TAG % 1000) / 4 )).$(( ($1 % 64) * 4 + 1 ))"; }
netem_node_ip() { echo "10.$((200 + NETEM_TAG / 1000 % 50)).$(( (NETEM_TAG % 1000) / 4 )).$(( ($1 % 64) * 4 + 2 ))"; }
netem_ns() { echo "depl${NETEM_TAG}n$1"; }
netem_wrap() { echo "ip netns exec $(netem_ns "$1")"; }

netem_profiles() {  # "cluster bytes_per_s max_flops_per_s" per cluster of the composed config
    local overrides=() o
    for o in "${EXTRA[@]+"${EXTRA[@]}"}"; do overrides+=("$o"); done
    "$BIN/python" - "${overrides[@]+"${overrides[@]}"}" <<'PYEOF'
import sys
sys.path.insert(0, ".")
from depl_fl.runs.runconfig import compose_config
cfg = compose_config([o for o in sys.argv[1:] if o.split("=")[0].lstrip("+").startswith("clusters")])
for cid, c in cfg["clusters"]["classes"].items():
    print(cid, float(c["bytes_per_s"]), max(float(l["flops_per_s"]) for l in c["levels"]))
PYEOF
}

netem_shape() {  # $1 device, $2 bytes/s, $3 netns or ""
    local rate="$(( ${2%.*} * 8 ))bit" cmd=(tc)
    [[ -z "$3" ]] || cmd=(ip netns exec "$3" tc)
    if [[ "$NETEM_QDISC" == netem ]]; then
        "${cmd[@]}" qdisc add dev "$1" root netem delay "${LATENCY_MS}ms" rate "$rate" limit 10000
    else
        "${cmd[@]}" qdisc add dev "$1" root tbf rate "$rate" burst 64kbit latency 60s
    fi
}

netem_setup() {  # $1 number of SuperNodes
    local i ns host node bps flops max_flops=0 cid line
    (cd "$ROOT" && netem_profiles) > "$WORK/netem-profiles.txt" 2>> "$LOGS/netem.log" \
        || die "--netem: cannot read the clusters' bytes_per_s (see $LOGS/netem.log)"
    while read -r cid bps flops; do
        NETEM_BPS[$cid]="$bps"
        NETEM_FLOPS[$cid]="$flops"
        max_flops="$("$BIN/python" -c "print(max($max_flops, $flops))")"
    done < "$WORK/netem-profiles.txt"
    for ((i = 0; i < $1; i++)); do
        cid="${CLUSTER_OF[$i]}"
        [[ -n "${NETEM_BPS[$cid]:-}" ]] || die "--netem: cluster '$cid' is not in clusters.classes"
        ns="$(netem_ns "$i")" host="dh${NETEM_TAG}n$i" node="dn${NETEM_TAG}n$i"
        {
            ip netns add "$ns" && NETEM_NS+=("$ns")
            ip link add "$host" type veth peer name "$node"
            ip link set "$node" netns "$ns"
            ip addr add "$(netem_host_ip "$i")/30" dev "$host"
            ip link set "$host" up
            ip netns exec "$ns" ip addr add "$(netem_node_ip "$i")/30" dev "$node"
            ip netns exec "$ns" ip link set "$node" up
            ip netns exec "$ns" ip link set lo up
            netem_shape "$host" "${NETEM_BPS[$cid]}" ""        # download (SuperLink -> node)
            netem_shape "$node" "${NETEM_BPS[$cid]}" "$ns"     # upload (node -> SuperLink)
        } >> "$LOGS/netem.log" 2>&1 || die "--netem: namespace setup failed (see $LOGS/netem.log)"
        line="SuperNode $i: netns $ns, $(netem_node_ip "$i") <-> $(netem_host_ip "$i"), cluster $cid,"
        line+=" ${NETEM_BPS[$cid]} B/s each way"
        [[ "$NETEM_QDISC" != netem ]] || line+=", ${LATENCY_MS} ms one way"
        netem_cgroup "$i" "${NETEM_FLOPS[$cid]}" "$max_flops" && line+=", CPU quota ${NETEM_QUOTA[$i]}%"
        echo "deploy_loopback: $line" | tee -a "$LOGS/netem.log" >&2
    done
}

netem_cgroup() {  # $1 index, $2 flops/s, $3 fastest flops/s: a cgroup v1 cpu quota, if available
    local dir="/sys/fs/cgroup/cpu/depl${NETEM_TAG}n$1" period=100000 quota
    [[ -w /sys/fs/cgroup/cpu/cgroup.procs ]] || return 1
    mkdir -p "$dir" 2> /dev/null || return 1
    NETEM_CGROUPS+=("$dir")
    quota="$("$BIN/python" -c "print(max(1000, int($period * $2 / $3)))")"
    local cid="${CLUSTER_OF[$1]}"
    [[ -z "${CPU_QUOTA[$cid]:-}" ]] || quota="$((period * CPU_QUOTA[$cid] / 100))"
    echo "$period" > "$dir/cpu.cfs_period_us" && echo "$quota" > "$dir/cpu.cfs_quota_us" || return 1
    NETEM_QUOTA[$1]="$((quota * 100 / period))"
}

netem_limit_cpu() {  # $1 index, $2 pid: move the SuperNode into its cgroup (children follow)
    local dir="/sys/fs/cgroup/cpu/depl${NETEM_TAG}n$1"
    [[ -d "$dir" ]] && echo "$2" > "$dir/cgroup.procs" 2> /dev/null || true
}

netem_teardown() {  # remove namespaces (their veth ends go with them) and cgroups
    local ns dir i
    for ns in "${NETEM_NS[@]+"${NETEM_NS[@]}"}"; do ip netns del "$ns" 2> /dev/null || true; done
    for ((i = 0; i < NUM; i++)); do ip link del "dh${NETEM_TAG}n$i" 2> /dev/null || true; done
    for dir in "${NETEM_CGROUPS[@]+"${NETEM_CGROUPS[@]}"}"; do
        # processes left in it go back to the root cgroup before it can be removed
        while read -r pid; do echo "$pid" > /sys/fs/cgroup/cpu/cgroup.procs 2> /dev/null; done \
            < "$dir/cgroup.procs" 2> /dev/null
        rmdir "$dir" 2> /dev/null || true
    done
}
