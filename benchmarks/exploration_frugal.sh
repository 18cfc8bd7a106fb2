#!/usr/bin/env bash
# DepL's total energy (exploration + training) against full's with the frugal exploration: the
# exploration on the cheapest clusters (profile.explore.clients=cheapest), the value stop (judged only
# once the trajectory has left the fresh model's plateau) and the rate window 0.5, with static plans and
# with tracking, on settings no option was chosen on (fixed before any result): pi 0.9, in-process.
#   g8a07:  8 clients, Dirichlet alpha 0.7, L* 0.40
#   g11a04: 11 clients, alpha 0.4, L* 0.45
#   g6a06:  6 clients, alpha 0.6, L* 0.40
# and three more, fixed after the guard's first version had been measured on the three above and before
# any result of its second (the plateau read from the first trained round):
#   f7a08:  7 clients, alpha 0.8, L* 0.40
#   f9a05:  9 clients, alpha 0.5, L* 0.45
#   f5a09:  5 clients, alpha 0.9, L* 0.40
# and three for the default profile's exploration with tracking (fixed before any result; ARMS=tracking,
# PIS="0.9 0.8 0.95"):
#   k6a04:  6 clients, alpha 0.4, L* 0.45
#   k10a08: 10 clients, alpha 0.8, L* 0.35
#   k20a05: 20 clients, alpha 0.5, L* 0.40
# Arms per setting and target probability pi in PIS (default 0.9; one Hydra multirun each, nice -n 10,
# one at a time; T is empty at pi 0.9, else -pi<pi>):
#   OUT/<s>T/depl           the frugal exploration, static plans (tracking off), seeds FIRST..FIRST+SEEDS-1
#   OUT/<s>T-tracking/depl  the same with tracking on (it stops training once the target is met)
#   OUT/<s>/full            plain FedAvg (its own default exploration, tracking off) at pi 0.9, FULL_SEEDS
#                           seeds from FIRST
# ARMS (default "static tracking") picks the DepL arms. Every DepL folder gets a copy of OUT/<s>/full, so
# every arm and pi is reported against the same full jobs.
#   SEEDS=10 FULL_SEEDS=5 FIRST=900 [PIS="0.9 0.8"] [ARMS=tracking] \
#       bash benchmarks/exploration_frugal.sh OUT [SETTING ...]
# then OUT/<folder>/report.{md,json} (depl-fl report), RESULTS/summary.{md,json} (benchmarks/exploration_energy.py;
# RESULTS defaults to benchmarks/results/exploration_frugal) and RESULTS/pooled-static.md
# (benchmarks/plan_pit.py --pooled, static arm).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
mkdir -p "${1:-multirun/exploration-frugal}"
S=$(cd "${1:-multirun/exploration-frugal}" && pwd)
N=${SEEDS:-10}
NF=${FULL_SEEDS:-5}
F=${FIRST:-900}
FRUGAL=(profile.explore.value_stop=true profile.plan_regime.rate_window=0.5 profile.explore.clients=cheapest)
declare -A SETTING=(
  [g8a07]="num_clients=8 partition.alpha=0.7 target.loss=0.4"
  [g11a04]="num_clients=11 partition.alpha=0.4 target.loss=0.45"
  [g6a06]="num_clients=6 partition.alpha=0.6 target.loss=0.4"
  [f7a08]="num_clients=7 partition.alpha=0.8 target.loss=0.4"
  [f9a05]="num_clients=9 partition.alpha=0.5 target.loss=0.45"
  [f5a09]="num_clients=5 partition.alpha=0.9 target.loss=0.4"
  [k6a04]="num_clients=6 partition.alpha=0.4 target.loss=0.45"
  [k10a08]="num_clients=10 partition.alpha=0.8 target.loss=0.35"
  [k20a05]="num_clients=20 partition.alpha=0.5 target.loss=0.4"
)
# profile.explore.without_tracking=thorough: the exploration static plans and full's jobs explored when these figures were
# measured (every client; the default without tracking explores on the cheapest clusters).
COMMON=(simulation=inprocess output.plot=false profile.explore.without_tracking=thorough)
# shellcheck disable=SC2206
PI_LIST=(${PIS:-0.9})
# shellcheck disable=SC2206
ARM_LIST=(${ARMS:-static tracking})

# shellcheck source=benchmarks/lib/multirun.sh
source benchmarks/lib/multirun.sh
# copy_reports SWEEP RESULTS FOLDER... (benchmarks/lib/copy_reports.sh)
# shellcheck source=benchmarks/lib/copy_reports.sh
source benchmarks/lib/copy_reports.sh

NAMES=("${@:2}")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(g8a07 g11a04 g6a06)
for name in "${NAMES[@]}"; do
  [ -n "${SETTING[$name]:-}" ] || { echo "exploration_frugal: unknown setting $name" >&2; exit 2; }
done
for arm in "${ARM_LIST[@]}"; do
  case $arm in static | tracking) ;; *) echo "exploration_frugal: unknown arm $arm" >&2; exit 2 ;; esac
done
FOLDERS=()
for name in "${NAMES[@]}"; do
  # shellcheck disable=SC2206
  over=(${SETTING[$name]})
  seeds="range($F,$((F + N)))"
  done_folders=()
  for pi in "${PI_LIST[@]}"; do
    tag=$([ "$pi" = 0.9 ] && echo "" || echo "-pi$pi")
    for arm in "${ARM_LIST[@]}"; do
      if [ "$arm" = static ]; then
        folder=$name$tag cache=cache-depl log=$name$tag.depl.log track=false
      else
        folder=$name$tag-tracking cache=cache log=$name$tag.tracking.log track=true
      fi
      mkdir -p "$S/$folder"
      multirun "$S/$folder/depl" "$S/$folder/$cache" "$S/$log" "$seeds" method=depl "${over[@]}" \
          "${FRUGAL[@]}" target.prob="$pi" tracking.enabled=$track
      done_folders+=("$folder")
    done
  done
  multirun "$S/$name/full" "$S/$name/cache-full" "$S/$name.full.log" "range($F,$((F + NF)))" method=full \
      "${over[@]}" target.prob=0.9 tracking.enabled=false
  for folder in "${done_folders[@]}"; do
    [ "$folder" = "$name" ] || { rm -rf "$S/$folder/full" && cp -r "$S/$name/full" "$S/$folder/full"; }
    "$PY" -m depl_fl.cli report "$S/$folder" --out "$S/$folder" > /dev/null
    FOLDERS+=("$folder")
  done
done
R=${RESULTS:-benchmarks/results/exploration_frugal}
mkdir -p "$R"
"$PY" benchmarks/exploration_energy.py "$S" --out "$R/summary"
# the share of the static runs above their own predicted 0.9-quantile, pooled over the settings
dirs=()
for folder in "${FOLDERS[@]}"; do
  [ "${folder%-tracking}" = "$folder" ] && [ -d "$S/$folder/depl" ] && dirs+=("$S/$folder/depl")
done
if [ ${#dirs[@]} -gt 0 ]; then
  "$PY" benchmarks/plan_pit.py --pooled "${dirs[@]}" --out "$R/pooled-static.md"
fi
copy_reports "$S" "$R" "${FOLDERS[@]}"
