#!/usr/bin/env bash
# Static plans (tracking off) from two explorations, against full's total energy: the thorough one (every
# client, no value stop, the rate from the whole exploration; profile.explore.without_tracking=thorough)
# and the exploration on the cheapest clusters without the value stop, its rate read from the whole
# exploration at r = 1 through the rounds' r_eff (the same number of rounds as the thorough one, each on
# the cheap clusters; the default without tracking since these figures). Both arms are pinned by their
# explicit values. Settings fixed before any result: digits, pi 0.9, in-process.
#   c6a05:  6 clients, Dirichlet alpha 0.5, L* 0.42
#   c9a07:  9 clients, alpha 0.7, L* 0.40
#   c13a04: 13 clients, alpha 0.4, L* 0.45
# Arms per setting and target probability pi in PIS (default 0.9; one Hydra multirun each, nice -n 10, one
# at a time; tracking.enabled=false in every one; T is empty at pi 0.9, else -pi<pi>):
#   OUT/<s>T-thorough/depl  clients=all value_stop=false rate_window=1.0 (pinned), seeds FIRST..FIRST+SEEDS-1
#   OUT/<s>T-cheap/depl     clients=cheapest value_stop=false rate_window=1.0, the same seeds
#   OUT/<s>/full            plain FedAvg at pi 0.9 with the thorough exploration (pinned), FULL_SEEDS seeds
#                           from FIRST
# ARMS (default "thorough cheap") picks the DepL arms. Every arm's folder gets a copy of OUT/<s>/full, so
# every arm and pi is reported against the same full jobs.
#   SEEDS=10 FULL_SEEDS=3 FIRST=1500 [ARMS=cheap] [PIS="0.8 0.95"] \
#       bash benchmarks/exploration_static.sh OUT [SETTING ...]
# then OUT/<s>-<arm>/report.{md,json} (depl-fl report), RESULTS/summary.{md,json}
# (benchmarks/exploration_energy.py over both arms; RESULTS defaults to
# benchmarks/results/exploration_static) and RESULTS/pooled-<arm>.md (benchmarks/plan_pit.py --pooled over
# the settings and target probabilities, one arm each, per pi).
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
COMMON=(simulation=inprocess output.plot=false tracking.enabled=false)
# shellcheck disable=SC2206
PI_LIST=(${PIS:-0.9})
# shellcheck disable=SC2206
ARM_LIST=(${ARMS:-thorough cheap})

# shellcheck source=benchmarks/lib/multirun.sh
source benchmarks/lib/multirun.sh
# copy_reports SWEEP RESULTS FOLDER... (benchmarks/lib/copy_reports.sh)
# shellcheck source=benchmarks/lib/copy_reports.sh
source benchmarks/lib/copy_reports.sh

NAMES=("${@:2}")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(c6a05 c9a07 c13a04)
for name in "${NAMES[@]}"; do
  [ -n "${SETTING[$name]:-}" ] || { echo "exploration_static: unknown setting $name" >&2; exit 2; }
done
for arm in "${ARM_LIST[@]}"; do
  [ -n "${EXPLORE[$arm]:-}" ] || { echo "exploration_static: unknown arm $arm" >&2; exit 2; }
done
FOLDERS=()
for name in "${NAMES[@]}"; do
  # shellcheck disable=SC2206
  over=(${SETTING[$name]})
  done_folders=()
  for pi in "${PI_LIST[@]}"; do
    tag=$([ "$pi" = 0.9 ] && echo "" || echo "-pi$pi")
    for arm in "${ARM_LIST[@]}"; do
      # shellcheck disable=SC2206
      explore=(${EXPLORE[$arm]})
      folder=$name$tag-$arm
      mkdir -p "$S/$folder"
      multirun "$S/$folder/depl" "$S/$folder/cache" "$S/$name$tag.$arm.log" "range($F,$((F + N)))" \
          method=depl "${over[@]}" "${explore[@]}" target.prob="$pi"
      done_folders+=("$folder")
    done
  done
  # shellcheck disable=SC2206
  multirun "$S/$name/full" "$S/$name/cache-full" "$S/$name.full.log" "range($F,$((F + NF)))" method=full \
      "${over[@]}" ${EXPLORE[thorough]} target.prob=0.9
  for folder in "${done_folders[@]}"; do
    rm -rf "$S/$folder/full" && cp -r "$S/$name/full" "$S/$folder/full"
    "$PY" -m depl_fl.cli report "$S/$folder" --out "$S/$folder" > /dev/null
    FOLDERS+=("$folder")
  done
done
R=${RESULTS:-benchmarks/results/exploration_static}
mkdir -p "$R"
"$PY" benchmarks/exploration_energy.py "$S" --out "$R/summary"
# per arm, the share of the static runs above their own predicted pi-quantile, pooled over the settings
# (plan_pit.py reports each pi apart)
for arm in "${ARM_LIST[@]}"; do
  dirs=()
  for folder in "${FOLDERS[@]}"; do
    [ "${folder%-"$arm"}" != "$folder" ] && [ -d "$S/$folder/depl" ] && dirs+=("$S/$folder/depl")
  done
  if [ ${#dirs[@]} -gt 0 ]; then
    "$PY" benchmarks/plan_pit.py --pooled "${dirs[@]}" --out "$R/pooled-$arm.md"
  fi
done
copy_reports "$S" "$R" "${FOLDERS[@]}"
