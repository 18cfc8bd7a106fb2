#!/usr/bin/env bash
# Tracking with the bootstrap-t stop margin (depl_fl/tracking/split_margin.py) on seeds no other
# sweep here uses (FIRST..FIRST+SEEDS-1, default 200..239), pi in {0.8, 0.9, 0.95}:
#   g10: 10 clients, alpha 0.5, L* 0.35 (the guarantee setting)
#   g20: 20 clients, alpha 0.4, L* 0.4  (where a Gaussian margin falls short most)
#   g16: 16 clients, alpha 0.3, L* 0.3  (G16_SEEDS, default 20)
# The stop margin changes no static decision (only tracking stops early): the static arms of g10 and
# g20 are those of settings_sweep.sh / settings_extra.sh (seeds 0..39, 100..129); g16 static is run
# here on the same seeds as its tracking arm, to compare energy seed for seed.
#   bash benchmarks/stop_margin_sweep.sh [OUT]   (about 45 minutes on 2 cores)
# Writes OUT/report-<setting>-<arm>/ and OUT/report-g16-all/ (depl-fl report); committed copies:
# benchmarks/results/settings/stop-g10t, stop-g20t, stop-g16t, stop-g16s, stop-g16-all (.md, .json).
set -euo pipefail
cd "$(dirname "$0")/.."
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
PY=${PYTHON:-.venv/bin/python}
S=${1:-multirun/settings-stop}
FIRST=${FIRST:-200}
N=${SEEDS:-40}
N16=${G16_SEEDS:-20}
mkdir -p "$S"
# profile=thorough: the exploration these figures were measured with (the default profile explores
# frugally where tracking is on: conf/profile/default.yaml).
sweep() {  # sweep NAME ARM SEEDS OVERRIDES...   (ARM: tracking or static)
    local name=$1 arm=$2 n=$3; shift 3
    "$PY" -m depl_fl.main -m simulation=inprocess "target.prob=0.8,0.9,0.95" output.plot=false method=depl \
        profile=thorough \
        "$@" "seed=range($FIRST,$((FIRST + n)))" "tracking.enabled=$([ "$arm" = tracking ] && echo true || echo false)" \
        profile.cache_dir="$S/cache-$name-$arm-p\${target.prob}" hydra.sweep.dir="$S/$name/$arm" || true
}
g16=(partition.alpha=0.3 num_clients=16 target.loss=0.3)
# A sweep with failed jobs (recorded in their results.json, counted by the report) exits non-zero.
( sweep g20 tracking "$N" partition.alpha=0.4 num_clients=20 target.loss=0.4
  sweep g16 static "$N16" "${g16[@]}" ) > "$S/a.log" 2>&1 &
( sweep g10 tracking "$N" partition.alpha=0.5
  sweep g16 tracking "$N16" "${g16[@]}" ) > "$S/b.log" 2>&1 &
wait
for arm in g20/tracking g10/tracking g16/tracking g16/static; do
  "$PY" -m depl_fl.cli report "$S/$arm" --out "$S/report-${arm//\//-}"
done
"$PY" -m depl_fl.cli report "$S/g16" --out "$S/report-g16-all"
