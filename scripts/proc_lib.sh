# Stopping process trees without stalling: SIGTERM, a bounded grace period, then SIGKILL.
# Sourced by scripts/deploy_loopback.sh (and tests/test_deploy_cleanup.py); bash 4+, Linux /proc.
#
# A Flower SuperNode or SuperLink under load may not exit on SIGTERM (its exit handler joins
# background threads that retry a SuperLink that is already gone), and a SuperNode starts its
# SuperExec in a new session, outside its process group. So every stop here signals the
# process, its process group (when it leads one) and all its descendants found in /proc, waits
# at most a grace period, then SIGKILLs whatever is left (descendants collected again) and waits
# at most PROC_KILL_WAIT_S more. Nothing here waits without a bound. Zombies count as gone.

PROC_KILL_WAIT_S="${PROC_KILL_WAIT_S:-5}"
PROC_SELF_PGID=""  # the caller's own process group: never signalled as a group

proc_alive() {  # is pid $1 a live process? (a zombie is not)
    local stat
    read -r stat 2> /dev/null < "/proc/$1/stat" || return 1
    stat="${stat##*) }"
    [[ "${stat:0:1}" != Z ]]
}

proc_pgid() {  # process group of pid $1
    local stat fields
    read -r stat 2> /dev/null < "/proc/$1/stat" || return 1
    stat="${stat##*) }"
    read -r -a fields <<< "$stat"
    echo "${fields[2]}"
}

proc_descendants() {  # every live descendant of pids $@ (one pass over /proc, no ps per process)
    local -A kids=()
    local f stat pid fields queue=("$@") out=()
    for f in /proc/[0-9]*/stat; do
        read -r stat 2> /dev/null < "$f" || continue
        pid="${stat%% *}"
        read -r -a fields <<< "${stat##*) }"
        [[ "${fields[0]}" == Z ]] || kids[${fields[1]}]+=" $pid"
    done
    while [[ "${#queue[@]}" -gt 0 ]]; do
        pid="${queue[0]}"
        queue=("${queue[@]:1}")
        for f in ${kids[$pid]:-}; do
            out+=("$f")
            queue+=("$f")
        done
    done
    echo "${out[@]+"${out[@]}"}"
}

proc_wait_gone() {  # wait at most $1 seconds until none of pids ${@:2} is alive; 0 if all gone
    local deadline=$((SECONDS + ${1%.*} + 1)) pid alive
    shift
    while :; do
        alive=0
        for pid in "$@"; do
            if proc_alive "$pid"; then alive=1; break; fi
        done
        [[ "$alive" -eq 0 ]] && return 0
        [[ "$SECONDS" -lt "$deadline" ]] || return 1
        sleep 0.1
    done
}

proc_signal() {  # signal $1 to pids ${@:2}, and to the process group of each that leads one
    local sig="$1" pid
    shift
    [[ -n "$PROC_SELF_PGID" ]] || PROC_SELF_PGID="$(proc_pgid $$)"
    for pid in "$@"; do
        [[ "$pid" != "$$" ]] || continue
        kill "-$sig" "$pid" 2> /dev/null || true
        if [[ "$(proc_pgid "$pid")" == "$pid" && "$pid" != "$PROC_SELF_PGID" ]]; then
            kill "-$sig" -- "-$pid" 2> /dev/null || true
        fi
    done
}

# proc_stop GRACE_S FINDER PID...: stop the trees of PID... (and of what the function FINDER
# prints; ":" for none): SIGTERM, at most GRACE_S seconds, then SIGKILL to what is left,
# collected again (processes started meanwhile included), at most PROC_KILL_WAIT_S seconds.
# Prints "<processes> <killed>" (how many were signalled, how many needed SIGKILL); returns 1
# only if something survived SIGKILL (e.g. a process stuck in the kernel).
proc_stop() {
    local grace="$1" finder="$2" victims=() left=() pid
    shift 2
    local roots=("$@")
    roots+=($("$finder"))
    [[ "${#roots[@]}" -gt 0 ]] || { echo "0 0"; return 0; }
    victims=("${roots[@]}" $(proc_descendants "${roots[@]}"))
    proc_signal TERM "${victims[@]}"
    if proc_wait_gone "$grace" "${victims[@]}"; then
        echo "${#victims[@]} 0"
        return 0
    fi
    victims+=($("$finder") $(proc_descendants "${roots[@]}"))
    for pid in "${victims[@]}"; do
        proc_alive "$pid" && left+=("$pid")
    done
    # Stopped processes (SIGSTOP, a debugger) die on SIGKILL too; descendants first found now
    # are signalled along with their groups.
    proc_signal KILL "${left[@]+"${left[@]}"}"
    echo "${#victims[@]} ${#left[@]}"
    proc_wait_gone "$PROC_KILL_WAIT_S" "${left[@]+"${left[@]}"}"
}
