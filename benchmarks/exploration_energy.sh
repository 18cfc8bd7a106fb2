#!/usr/bin/env bash
# DepL's total energy (exploration + training) against full's, with coverage and calibration, on
# settings no constant was tuned on (chosen before any result): pi 0.9, static plans (tracking off),
# DepL with the exploration's stops (stop rule met, the opt-in value stop with the rate window 0.5; OPTS
# replaces those two) against full (plain FedAvg), SEEDS seeds.
#   s8a03:  8 clients, Dirichlet alpha 0.3, L* 0.40
#   s6a10:  6 clients, alpha 1.0, L* 0.40
#   s12a05: 12 clients, alpha 0.5, L* 0.45
#   SEEDS=20 FULL_SEEDS=10 FIRST=700 bash benchmarks/exploration_energy.sh [OUT] [SETTING ...]
# (full's energy varies little from seed to seed: FULL_SEEDS of its jobs, the first of DepL's seeds)
# One Hydra multirun at a time (nice -n 10, in-process backend); then
# OUT/<setting>/report.{md,json} (depl-fl report) and benchmarks/results/exploration_energy/summary.{md,json}.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
S=${1:-multirun/exploration-energy}
N=${SEEDS:-20}
NF=${FULL_SEEDS:-$N}
F=${FIRST:-700}
# shellcheck disable=SC2206
OPTS=(${OPTS:-profile.explore.value_stop=true profile.plan_regime.rate_window=0.5})
declare -A SETTING=(
  [s8a03]="num_clients=8 partition.alpha=0.3 target.loss=0.4"
  [s6a10]="num_clients=6 partition.alpha=1.0 target.loss=0.4"
  [s12a05]="num_clients=12 partition.alpha=0.5 target.loss=0.45"
)
mkdir -p "$S"
NAMES=("${@:2}")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(s8a03 s6a10 s12a05)
for name in "${NAMES[@]}"; do
  # shellcheck disable=SC2206
  over=(${SETTING[$name]})
  for method in depl full; do
    [ -n "$(find "$S/$name/$method" -name results.json 2>/dev/null | head -1)" ] && continue
    count=$N; extra=("${OPTS[@]}")
    [ "$method" = full ] && count=$NF && extra=()
    # profile.explore.without_tracking=thorough: the exploration these figures were measured with (every client; the
    # default without tracking explores on the cheapest clusters)
    nice -n 10 "$PY" -m depl_fl.main -m simulation=inprocess output.plot=false tracking.enabled=false \
        profile.explore.without_tracking=thorough target.prob=0.9 "method=$method" "${over[@]}" "${extra[@]}" "seed=range($F,$((F + count)))" \
        profile.cache_dir="$S/$name/cache-$method" hydra.sweep.dir="$S/$name/$method" \
        > "$S/$name.$method.log" 2>&1 || true
  done
  "$PY" -m depl_fl.cli report "$S/$name" --out "$S/$name" > /dev/null
done
"$PY" benchmarks/exploration_energy.py "$S" --out benchmarks/results/exploration_energy/summary
