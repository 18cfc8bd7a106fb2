#!/usr/bin/env bash
# The learning curve's rate measured on the exploration's last rounds (profile.plan_regime.rate_window)
# on the tuning setting (5 clients, Dirichlet alpha 0.8, L* 0.45, pi 0.9, static DepL plans, the
# exploration's stops on, the value stop included): the same seeds with the whole trajectory (1.0) and its last half (0.5).
#   SEEDS=8 FIRST=400 bash benchmarks/rate_window_tuning.sh [OUT]
# Writes OUT/w<window>/ (jobs and depl-fl report) and benchmarks/results/exploration_energy/tuning.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
S=${1:-multirun/rate-window}
N=${SEEDS:-8}
F=${FIRST:-400}
mkdir -p "$S"
for w in 1.0 0.5; do
  out="$S/w${w/./}"
  # profile.explore.without_tracking=thorough: the exploration these figures were measured with (every client; the
  # default without tracking explores on the cheapest clusters)
  [ -n "$(find "$out" -name results.json 2>/dev/null | head -1)" ] || \
    nice -n 10 "$PY" -m depl_fl.main -m simulation=inprocess output.plot=false tracking.enabled=false \
        profile.explore.without_tracking=thorough method=depl target.prob=0.9 num_clients=5 partition.alpha=0.8 target.loss=0.45 profile.explore.value_stop=true \
        "profile.plan_regime.rate_window=$w" "seed=range($F,$((F + N)))" \
        profile.cache_dir="$out-cache" hydra.sweep.dir="$out" > "$out.log" 2>&1 || true
  "$PY" -m depl_fl.cli report "$out" --out "$out" > /dev/null
done
"$PY" benchmarks/guarantee_cells.py "rate_window 1.0=$S/w10/report.json" "rate_window 0.5=$S/w05/report.json" \
    --out benchmarks/results/exploration_energy/tuning.md
