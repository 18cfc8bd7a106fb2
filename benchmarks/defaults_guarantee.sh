#!/usr/bin/env bash
# Today's defaults against their promise and against full's total energy: DepL with static plans
# (tracking.enabled=false: the exploration the default resolves to without tracking) and DepL with
# tracking (the default job: the exploration the default resolves to with tracking), every other key at
# its default (nothing pinned: this measures the defaults, whatever they are when it runs). Digits,
# in-process, the job's default deadline. Settings:
#   i12a05: 12 clients, Dirichlet alpha 0.5, L* 0.45 (the old settings sweep's g12, which ran with the
#           job's default deadline too: benchmarks/settings_sweep.sh)
#   i6a06:   6 clients, alpha 0.6, L* 0.42 (fixed before any result of this script)
#   byom_resnet: a user's residual network with BatchNorm and no bank of its own
#           (model=custom model.factory=tests.user_nets:resnet_tiny), every other key at the default job's value
# Arms per setting and target probability pi in PIS (default "0.9 0.8 0.95", in that order; one Hydra
# multirun each, nice -n 10, one at a time; T is empty at pi 0.9, else -pi<pi>):
#   OUT/<s>T-static/depl    tracking.enabled=false, seeds FIRST..FIRST+SEEDS-1
#   OUT/<s>T-tracking/depl  the default (tracking on), the same seeds
#   OUT/<s>/full            plain FedAvg (method=full, tracking off, its default exploration) at pi 0.9,
#                           FULL_SEEDS seeds from FIRST; run once the setting's first pi is done
# ARMS (default "static tracking") picks the DepL arms; OPTS (space-separated Hydra overrides, default none) is
# passed to every DepL arm's jobs (e.g. OPTS="tracking.plan_end=stop_rule"). FULL_SEEDS=0 runs no full jobs. Every arm's folder gets a copy of OUT/<s>/full, so
# every arm and pi is reported against the same full jobs.
#   SEEDS=20 FULL_SEEDS=5 FIRST=1700 [PIS="0.9"] [ARMS=static] \
#       bash benchmarks/defaults_guarantee.sh OUT [SETTING ...]
# then OUT/<folder>/report.{md,json} (depl-fl report), RESULTS/summary.{md,json}
# (benchmarks/exploration_energy.py), RESULTS/cells.md (benchmarks/guarantee_cells.py over every folder),
# RESULTS/pooled-static.md (benchmarks/plan_pit.py --pooled over the static folders, per pi) and
# RESULTS/report-<folder>.md; RESULTS defaults to benchmarks/results/defaults_guarantee.
set -euo pipefail
cd "$(dirname "$0")/.."
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
PY=${PYTHON:-.venv/bin/python}
mkdir -p "${1:-multirun/defaults-guarantee}"
S=$(cd "${1:-multirun/defaults-guarantee}" && pwd)
N=${SEEDS:-20}
NF=${FULL_SEEDS:-5}
F=${FIRST:-1700}
declare -A SETTING=(
  [i12a05]="num_clients=12 partition.alpha=0.5 target.loss=0.45"
  [i6a06]="num_clients=6 partition.alpha=0.6 target.loss=0.42"
  [byom_resnet]="model=custom model.factory=tests.user_nets:resnet_tiny"
)
COMMON=(simulation=inprocess output.plot=false)
# shellcheck disable=SC2206
PI_LIST=(${PIS:-0.9 0.8 0.95})
# shellcheck disable=SC2206
ARM_LIST=(${ARMS:-static tracking})

# shellcheck source=benchmarks/lib/multirun.sh
source benchmarks/lib/multirun.sh

NAMES=("${@:2}")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(i12a05)
for name in "${NAMES[@]}"; do
  [ -n "${SETTING[$name]:-}" ] || { echo "defaults_guarantee: unknown setting $name" >&2; exit 2; }
done
for arm in "${ARM_LIST[@]}"; do
  case $arm in static | tracking) ;; *) echo "defaults_guarantee: unknown arm $arm" >&2; exit 2 ;; esac
done
for name in "${NAMES[@]}"; do
  # shellcheck disable=SC2206
  over=(${SETTING[$name]})
  for pi in "${PI_LIST[@]}"; do
    tag=$([ "$pi" = 0.9 ] && echo "" || echo "-pi$pi")
    for arm in "${ARM_LIST[@]}"; do
      folder=$name$tag-$arm
      mkdir -p "$S/$folder"
      # tracking on is the default: the tracking arm passes no tracking key at all
      extra=()
      [ "$arm" = static ] && extra=(tracking.enabled=false)
      # shellcheck disable=SC2206
      opts=(${OPTS:-})
      multirun "$S/$folder/depl" "$S/$folder/cache" "$S/$folder.log" "range($F,$((F + N)))" \
          method=depl "${over[@]}" target.prob="$pi" "${extra[@]}" "${opts[@]}"
    done
    # full after the setting's first pi (skipped once it holds results), so that pi is reportable early
    [ "$NF" -gt 0 ] && multirun "$S/$name/full" "$S/$name/cache-full" "$S/$name.full.log" "range($F,$((F + NF)))" \
        method=full "${over[@]}" target.prob=0.9 tracking.enabled=false
  done
done
# report every folder that holds DepL jobs, against its setting's full jobs
FOLDERS=()
for name in "${NAMES[@]}"; do
  for dir in "$S/$name"-*/depl; do
    [ -n "$(find "$dir" -name results.json 2>/dev/null | head -1)" ] || continue
    folder=$(basename "$(dirname "$dir")")
    rm -rf "${S:?}/$folder/full"
    [ -d "$S/$name/full" ] && cp -r "$S/$name/full" "$S/$folder/full"
    "$PY" -m depl_fl.cli report "$S/$folder" --out "$S/$folder" > /dev/null
    FOLDERS+=("$folder")
  done
done
R=${RESULTS:-benchmarks/results/defaults_guarantee}
mkdir -p "$R"
"$PY" benchmarks/exploration_energy.py "$S" --out "$R/summary"
labelled=()
for folder in "${FOLDERS[@]}"; do labelled+=("$folder=$S/$folder/report.json"); done
"$PY" benchmarks/guarantee_cells.py "${labelled[@]}" --out "$R/cells.md"
# the share of the static runs above their own predicted pi-quantile, pooled over the settings and pis
# (plan_pit.py reports each pi apart)
dirs=()
for folder in "${FOLDERS[@]}"; do
  [ "${folder%-static}" != "$folder" ] && dirs+=("$S/$folder/depl")
done
if [ ${#dirs[@]} -gt 0 ]; then
  "$PY" benchmarks/plan_pit.py --pooled "${dirs[@]}" --out "$R/pooled-static.md"
fi
for folder in "${FOLDERS[@]}"; do
  cp "$S/$folder/report.md" "$R/report-$folder.md"
done
