#!/usr/bin/env bash
# DepL's total energy (exploration + training) against full's with the exploration on the cheapest
# clusters (profile.explore.clients=cheapest, with the value stop and the rate window 0.5), and with
# another federation's profile as its prior, on settings no option was chosen on (chosen before any
# result): pi 0.9, static plans (tracking off), in-process.
#   h7a05:  7 clients, Dirichlet alpha 0.5, L* 0.40
#   h10a10: 10 clients, alpha 1.0, L* 0.45
#   h6a03:  6 clients, alpha 0.3, L* 0.45
# Arms per setting (one Hydra multirun each, nice -n 15):
#   OUT/<s>/depl        clients=cheapest + value stop + rate window 0.5, seeds FIRST..FIRST+SEEDS-1
#   OUT/<s>/full        plain FedAvg (its own default exploration), FULL_SEEDS seeds
#   OUT/<s>-prior/depl  as depl, with profile.prior = the profile of seed FIRST-1 of the same setting
#                       (another federation: other partitions), made once by the default exploration
#                       (OUT/prior-sources/<s>; its energy is reported, not added to the jobs)
#   OUT/<s>-all/depl    (ALL=1 only) value stop + rate window 0.5 on every client, the option's baseline
# The -prior and -all folders get a copy of OUT/<s>/full, so every folder is reported against full.
#   SEEDS=10 FULL_SEEDS=5 FIRST=800 [ALL=1] bash benchmarks/exploration_cheap.sh OUT [SETTING ...]
# then OUT/<folder>/report.{md,json} (depl-fl report), benchmarks/results/exploration_cheap/summary.{md,json}
# (benchmarks/exploration_energy.py) and pooled-{cheap,prior,all}.md (benchmarks/plan_pit.py --pooled).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
mkdir -p "${1:-multirun/exploration-cheap}"
S=$(cd "${1:-multirun/exploration-cheap}" && pwd)
N=${SEEDS:-10}
NF=${FULL_SEEDS:-5}
F=${FIRST:-800}
BASE=(profile.explore.value_stop=true profile.plan_regime.rate_window=0.5)
CHEAP=("${BASE[@]}" profile.explore.clients=cheapest)
declare -A SETTING=(
  [h7a05]="num_clients=7 partition.alpha=0.5 target.loss=0.4"
  [h10a10]="num_clients=10 partition.alpha=1.0 target.loss=0.45"
  [h6a03]="num_clients=6 partition.alpha=0.3 target.loss=0.45"
)
# profile.explore.without_tracking=thorough: the exploration static plans and full's jobs explored when these figures were
# measured (every client; the default without tracking explores on the cheapest clusters).
COMMON=(simulation=inprocess output.plot=false tracking.enabled=false target.prob=0.9 profile.explore.without_tracking=thorough)

MULTIRUN_NICE=15
# shellcheck source=benchmarks/lib/multirun.sh
source benchmarks/lib/multirun.sh

NAMES=("${@:2}")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(h7a05 h10a10 h6a03)
for name in "${NAMES[@]}"; do
  [ -n "${SETTING[$name]:-}" ] || { echo "exploration_cheap: unknown setting $name" >&2; exit 2; }
  # shellcheck disable=SC2206
  over=(${SETTING[$name]})
  seeds="range($F,$((F + N)))"
  multirun "$S/$name/depl" "$S/$name/cache-depl" "$S/$name.depl.log" "$seeds" method=depl "${over[@]}" \
      "${CHEAP[@]}"
  multirun "$S/$name/full" "$S/$name/cache-full" "$S/$name.full.log" "range($F,$((F + NF)))" method=full \
      "${over[@]}"
  source_dir="$S/prior-sources/$name"
  if [ ! -f "$source_dir/results.json" ]; then
    nice -n 15 "$PY" -m depl_fl.main "${COMMON[@]}" method=depl "${over[@]}" "seed=$((F - 1))" \
        profile.cache_dir="$S/prior-sources/cache-$name" hydra.run.dir="$source_dir" \
        > "$S/$name.prior-source.log" 2>&1 || true
  fi
  mkdir -p "$S/$name-prior"
  multirun "$S/$name-prior/depl" "$S/$name-prior/cache" "$S/$name.prior.log" "$seeds" method=depl \
      "${over[@]}" "${CHEAP[@]}" profile.prior="$source_dir/results.json"
  folders=("$name" "$name-prior")
  if [ "${ALL:-0}" = 1 ]; then
    mkdir -p "$S/$name-all"
    multirun "$S/$name-all/depl" "$S/$name-all/cache" "$S/$name.all.log" "$seeds" method=depl "${over[@]}" \
        "${BASE[@]}"
    folders+=("$name-all")
  fi
  for folder in "${folders[@]}"; do
    [ "$folder" != "$name" ] && rm -rf "$S/$folder/full" && cp -r "$S/$name/full" "$S/$folder/full"
    "$PY" -m depl_fl.cli report "$S/$folder" --out "$S/$folder" > /dev/null
  done
done
R=benchmarks/results/exploration_cheap
"$PY" benchmarks/exploration_energy.py "$S" --out "$R/summary"
# the share of each arm's static runs above their own predicted 0.9-quantile, pooled over the settings
for arm in "" -prior -all; do
  dirs=()
  for name in "${NAMES[@]}"; do [ -d "$S/$name$arm/depl" ] && dirs+=("$S/$name$arm/depl"); done
  [ ${#dirs[@]} -gt 0 ] && "$PY" benchmarks/plan_pit.py --pooled "${dirs[@]}" --out "$R/pooled${arm:--cheap}.md"
done
for name in "${NAMES[@]}"; do
  for arm in "" -prior -all; do
    [ -f "$S/$name$arm/report.md" ] && cp "$S/$name$arm/report.md" "$R/report-$name$arm.md"
  done
done
