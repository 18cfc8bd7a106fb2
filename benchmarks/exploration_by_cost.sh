#!/usr/bin/env bash
# The default job (tracking on, its frugal exploration) with the exploration's group sizes by cost
# (arm "by_cost": profile.explore.group_sizes=by_cost) and at random (arm "random":
# profile.explore.group_sizes=random), paired seeds, against full's total, on three settings fixed
# before any result of this script (digits, in-process; none used by another benchmark):
#   b5a04:   5 clients, Dirichlet alpha 0.4,  L* 0.43
#   b7a07:   7 clients, alpha 0.7,  L* 0.39
#   b12a055: 12 clients, alpha 0.55, L* 0.42
# The rule the default is decided by (fixed with the settings): group sizes by cost become the default
# with tracking only if the by_cost arm's mean total is below the random arm's on every setting, and no
# by_cost cell's coverage is significantly below pi (its 95% Wilson interval contains pi or lies above).
# Arms per setting (one Hydra multirun each, nice -n 10, one at a time, each its own profile cache):
#   OUT/<s>T-<arm>/depl  method=depl, tracking on, the default profile (value_floor as its default),
#                        seeds FIRST..FIRST+SEEDS-1, for each arm in ARMS (default "by_cost random") and
#                        each pi in PIS (default 0.9; T is empty at pi 0.9, else -pi<pi>)
#   OUT/<s>/full         plain FedAvg (tracking off, its own thorough exploration, group sizes random),
#                        FULL_SEEDS seeds from FIRST at pi 0.9; copied into every DepL folder
#   SEEDS=10 FULL_SEEDS=3 FIRST=1600 [PIS="0.9 0.95"] [ARMS=by_cost] \
#       bash benchmarks/exploration_by_cost.sh OUT [SETTING ...]
# then OUT/<folder>/report.{md,json} (depl-fl report) and RESULTS/summary.{md,json}
# (benchmarks/exploration_energy.py); RESULTS defaults to benchmarks/results/exploration_few/by_cost_new.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
# shellcheck source=benchmarks/sweep_common.sh
source benchmarks/sweep_common.sh
mkdir -p "${1:-multirun/exploration-by-cost}"
S=$(cd "${1:-multirun/exploration-by-cost}" && pwd)
N=${SEEDS:-10}
NF=${FULL_SEEDS:-3}
F=${FIRST:-1600}
declare -A CLIENTS=([b5a04]=5 [b7a07]=7 [b12a055]=12)
declare -A ALPHA=([b5a04]=0.4 [b7a07]=0.7 [b12a055]=0.55)
declare -A LOSS=([b5a04]=0.43 [b7a07]=0.39 [b12a055]=0.42)
# shellcheck disable=SC2206
PI_LIST=(${PIS:-0.9})
# shellcheck disable=SC2206
ARM_LIST=(${ARMS:-by_cost random})

NAMES=("${@:2}")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(b5a04 b7a07 b12a055)
for name in "${NAMES[@]}"; do
  [ -n "${CLIENTS[$name]:-}" ] || { echo "exploration_by_cost: unknown setting $name" >&2; exit 2; }
done
for arm in "${ARM_LIST[@]}"; do
  case "$arm" in by_cost|random) ;; *) echo "exploration_by_cost: unknown arm $arm" >&2; exit 2 ;; esac
done
for name in "${NAMES[@]}"; do
  over=(num_clients="${CLIENTS[$name]}" partition.alpha="${ALPHA[$name]}" target.loss="${LOSS[$name]}")
  for pi in "${PI_LIST[@]}"; do
    T=""; [ "$pi" = 0.9 ] || T="-pi$pi"
    for arm in "${ARM_LIST[@]}"; do
      mkdir -p "$S/$name$T-$arm"
      multirun "$S/$name$T-$arm/depl" "$S/$name$T-$arm/cache" "$S/$name$T.$arm.log" "range($F,$((F + N)))" \
          method=depl "${over[@]}" target.prob="$pi" tracking.enabled=true profile.explore.group_sizes="$arm"
    done
  done
  multirun "$S/$name/full" "$S/$name/cache-full" "$S/$name.full.log" "range($F,$((F + NF)))" \
      "${over[@]}" target.prob=0.9 method=full tracking.enabled=false profile.explore.group_sizes=random
  for pi in "${PI_LIST[@]}"; do
    T=""; [ "$pi" = 0.9 ] || T="-pi$pi"
    for arm in "${ARM_LIST[@]}"; do report_arm "$S" "$name$T-$arm" "$name"; done
  done
done
R=${RESULTS:-benchmarks/results/exploration_few/by_cost_new}
mkdir -p "$R"
"$PY" benchmarks/exploration_energy.py "$S" --out "$R/summary"
