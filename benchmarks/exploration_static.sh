#!/usr/bin/env bash
# Static plans (tracking off) from two explorations, against full's total energy: the thorough one (the
# default without tracking: every client, no value stop, the rate from the whole exploration) and the
# exploration on the cheapest clusters without the value stop, its rate read from the whole exploration
# at r = 1 through the rounds' r_eff (the same number of rounds as the thorough one, each on the cheap
# clusters). Settings fixed before any result: digits, pi 0.9, in-process.
#   c6a05:  6 clients, Dirichlet alpha 0.5, L* 0.42
#   c9a07:  9 clients, alpha 0.7, L* 0.40
#   c13a04: 13 clients, alpha 0.4, L* 0.45
# Arms per setting (one Hydra multirun each, nice -n 10, one at a time; tracking.enabled=false in every one):
#   OUT/<s>-thorough/depl  clients=all value_stop=false rate_window=1.0 (pinned), seeds FIRST..FIRST+SEEDS-1
#   OUT/<s>-cheap/depl     clients=cheapest value_stop=false rate_window=1.0, the same seeds
#   OUT/<s>/full           plain FedAvg (its own default exploration, the thorough one), FULL_SEEDS seeds
#                          from FIRST
# ARMS (default "thorough cheap") picks the DepL arms. Every arm's folder gets a copy of OUT/<s>/full, so
# both arms are reported against the same full jobs.
#   SEEDS=10 FULL_SEEDS=3 FIRST=1500 [ARMS=cheap] bash benchmarks/exploration_static.sh OUT [SETTING ...]
# then OUT/<s>-<arm>/report.{md,json} (depl-fl report), RESULTS/summary.{md,json}
# (benchmarks/exploration_energy.py over both arms; RESULTS defaults to
# benchmarks/results/exploration_static) and RESULTS/pooled-<arm>.md (benchmarks/plan_pit.py --pooled over
# the settings, one arm each).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
mkdir -p "${1:-multirun/exploration-static}"
S=$(cd "${1:-multirun/exploration-static}" && pwd)
N=${SEEDS:-10}
NF=${FULL_SEEDS:-3}
F=${FIRST:-1500}
declare -A EXPLORE=(
  [thorough]="profile.explore.clients=all profile.explore.value_stop=false profile.plan_regime.rate_window=1.0"
  [cheap]="profile.explore.clients=cheapest profile.explore.value_stop=false profile.plan_regime.rate_window=1.0"
)
declare -A SETTING=(
  [c6a05]="num_clients=6 partition.alpha=0.5 target.loss=0.42"
  [c9a07]="num_clients=9 partition.alpha=0.7 target.loss=0.4"
  [c13a04]="num_clients=13 partition.alpha=0.4 target.loss=0.45"
)
COMMON=(simulation=inprocess output.plot=false tracking.enabled=false target.prob=0.9)
# shellcheck disable=SC2206
ARM_LIST=(${ARMS:-thorough cheap})

# shellcheck source=benchmarks/lib/multirun.sh
source benchmarks/lib/multirun.sh

NAMES=("${@:2}")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(c6a05 c9a07 c13a04)
for name in "${NAMES[@]}"; do
  [ -n "${SETTING[$name]:-}" ] || { echo "exploration_static: unknown setting $name" >&2; exit 2; }
done
for arm in "${ARM_LIST[@]}"; do
  [ -n "${EXPLORE[$arm]:-}" ] || { echo "exploration_static: unknown arm $arm" >&2; exit 2; }
done
for name in "${NAMES[@]}"; do
  # shellcheck disable=SC2206
  over=(${SETTING[$name]})
  for arm in "${ARM_LIST[@]}"; do
    # shellcheck disable=SC2206
    explore=(${EXPLORE[$arm]})
    mkdir -p "$S/$name-$arm"
    multirun "$S/$name-$arm/depl" "$S/$name-$arm/cache" "$S/$name.$arm.log" "range($F,$((F + N)))" \
        method=depl "${over[@]}" "${explore[@]}"
  done
  multirun "$S/$name/full" "$S/$name/cache-full" "$S/$name.full.log" "range($F,$((F + NF)))" method=full \
      "${over[@]}"
  for arm in "${ARM_LIST[@]}"; do
    rm -rf "$S/$name-$arm/full" && cp -r "$S/$name/full" "$S/$name-$arm/full"
    "$PY" -m depl_fl.cli report "$S/$name-$arm" --out "$S/$name-$arm" > /dev/null
  done
done
R=${RESULTS:-benchmarks/results/exploration_static}
mkdir -p "$R"
"$PY" benchmarks/exploration_energy.py "$S" --out "$R/summary"
# per arm, the share of the static runs above their own predicted 0.9-quantile, pooled over the settings
for arm in "${ARM_LIST[@]}"; do
  dirs=()
  for name in "${NAMES[@]}"; do
    [ -d "$S/$name-$arm/depl" ] && dirs+=("$S/$name-$arm/depl")
  done
  if [ ${#dirs[@]} -gt 0 ]; then
    "$PY" benchmarks/plan_pit.py --pooled "${dirs[@]}" --out "$R/pooled-$arm.md"
  fi
done
for name in "${NAMES[@]}"; do
  for arm in "${ARM_LIST[@]}"; do
    if [ -f "$S/$name-$arm/report.md" ]; then cp "$S/$name-$arm/report.md" "$R/report-$name-$arm.md"; fi
  done
done
