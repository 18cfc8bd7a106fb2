#!/usr/bin/env bash
# The exploration's stop when met, before/after on the few-clients setting (5 clients, alpha 0.8,
# L* 0.45, pi 0.9; static plans): the same seeds with profile.explore.stop_when_met=false (the
# exploration runs its minimum rounds) and true (it ends once the stop rule is met).
#   SEEDS=4 FIRST=400 bash benchmarks/exploration_stop.sh [OUT]
# Writes OUT/{before,after}/<job>/results.json and benchmarks/results/exploration_stop/summary.{md,json}.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
S=${1:-multirun/exploration-stop}
N=${SEEDS:-4}
F=${FIRST:-400}
# profile.explore.without_tracking=thorough: the exploration static plans explored when these figures were measured (every
# client; the default without tracking explores on the cheapest clusters).
common=(simulation=inprocess output.plot=false method=depl tracking.enabled=false target.prob=0.9
        profile.explore.without_tracking=thorough num_clients=5 partition.alpha=0.8 target.loss=0.45 "seed=range($F,$((F + N)))")
run() {  # run ARM STOP_WHEN_MET
    nice -n 10 "$PY" -m depl_fl.main -m "${common[@]}" "profile.explore.stop_when_met=$2" \
        profile.cache_dir="$S/cache-$1" hydra.sweep.dir="$S/$1" || true
}
mkdir -p "$S"
( run before false ) > "$S/before.log" 2>&1 &
( run after true ) > "$S/after.log" 2>&1 &
wait
"$PY" benchmarks/exploration_stop.py "$S/before" "$S/after" --out benchmarks/results/exploration_stop/summary
