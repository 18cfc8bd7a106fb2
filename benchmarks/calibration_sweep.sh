#!/usr/bin/env bash
# Static plans on three settings nobody tuned on (benchmarks/results/calibration/settings.md):
# 20 seeds each, pi 0.8 / 0.9 / 0.95, every job its own exploration, one multirun at a time under
# nice -n 10 (benchmarks/guarantee_sweep.sh with ARMS=depl-static OWN_CACHE=1 SERIAL=1); then one
# `depl-fl report` per setting, the judged cells (guarantee_cells.py) and the margin's decomposition
# (calibration_decomposition.py).
#   c6a07:  6 clients, Dirichlet alpha 0.7, L* 0.40
#   c9a03:  9 clients, alpha 0.3, L* 0.40
#   c14a06: 14 clients, alpha 0.6, L* 0.35
# and the steps range's evaluation settings (benchmarks/results/calibration/steps_range/settings.md),
# named explicitly, with SEEDS="range(1400,1420)":
#   s5a08:  5 clients, alpha 0.8, L* 0.45
#   s6a04:  6 clients, alpha 0.4, L* 0.42
#   s10a06: 10 clients, alpha 0.6, L* 0.40
#
#   bash benchmarks/calibration_sweep.sh [OUT] [SETTING ...]
# Options (environment): SEEDS (default "range(500,520)"), PROBS (default 0.9,0.95,0.8: run in that order),
# OPTS (extra overrides of every job, e.g. an opt-in model change), RESULTS (where the reports, cells
# and decomposition go; default benchmarks/results/calibration/status_quo).
# A setting and pi whose folder already holds results is not run again (delete it to rerun).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHON=${PYTHON:-.venv/bin/python}
S=${1:-multirun/calibration}
RESULTS=${RESULTS:-benchmarks/results/calibration/status_quo}
# shellcheck disable=SC2206
OPTS=(${OPTS:-})
declare -A SETTING=(
  [c6a07]="num_clients=6 partition.alpha=0.7 target.loss=0.4"
  [c9a03]="num_clients=9 partition.alpha=0.3 target.loss=0.4"
  [c14a06]="num_clients=14 partition.alpha=0.6 target.loss=0.35"
  [s5a08]="num_clients=5 partition.alpha=0.8 target.loss=0.45"
  [s6a04]="num_clients=6 partition.alpha=0.4 target.loss=0.42"
  [s10a06]="num_clients=10 partition.alpha=0.6 target.loss=0.40"
)
NAMES=("${@:2}")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(c6a07 c9a03 c14a06)
for name in "${NAMES[@]}"; do
  [ -n "${SETTING[$name]:-}" ] || { echo "error: unknown setting $name" >&2; exit 2; }
done
mkdir -p "$S" "$RESULTS"
# pi by pi over every setting (0.9 first): an interrupted sweep leaves whole cells of every setting
IFS=, read -r -a probs <<< "${PROBS:-0.9,0.95,0.8}"
for pi in "${probs[@]}"; do
  for name in "${NAMES[@]}"; do
    # shellcheck disable=SC2206
    over=(${SETTING[$name]})
    [ -n "$(find "$S/$name/p$pi/depl" -name results.json 2>/dev/null | head -1)" ] && continue
    PROBS=$pi ARMS=depl-static OWN_CACHE=1 SERIAL=1 REPORT=0 nice -n 10 bash benchmarks/guarantee_sweep.sh \
      "$S/$name/p$pi" "${SEEDS:-range(500,520)}" output.plot=false "${over[@]}" "${OPTS[@]}"
  done
done
cells=()
for name in "${NAMES[@]}"; do
  "$PYTHON" -m depl_fl.cli report "$S/$name" --out "$RESULTS/$name" > /dev/null
  cells+=("$name=$RESULTS/$name/report.json")
done
"$PYTHON" benchmarks/guarantee_cells.py "${cells[@]}" --out "$RESULTS/cells.md"
"$PYTHON" benchmarks/calibration_decomposition.py "${NAMES[@]/#/$S/}" --out "$RESULTS/decomposition"
