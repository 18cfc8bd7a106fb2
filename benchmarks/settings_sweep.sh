#!/usr/bin/env bash
# Static plans against their promise with the defaults (federated profiling and the plan regime):
# static DepL (tracking.enabled=false, the planner's own promise) on four settings at
# pi in {0.8, 0.9, 0.95}, and DepL with tracking on the guarantee setting. None of these settings
# is used to fit the plan regime's constants (benchmarks/plan_regime/: 8-14 clients, seeds 100-119).
#   g10: 10 clients, alpha 0.5, L* 0.35 (the guarantee setting)   static and tracking
#   g12: 12 clients, alpha 0.5, L* 0.45
#   g16: 16 clients, alpha 0.3, L* 0.3
#   g6:   6 clients, alpha 0.5, L* 0.4  (few clients per plan)
# SEEDS seeds per cell (default 40, seeds 0..SEEDS-1). One profile cache per setting and pi: every
# job runs its own exploration (as a user's first job on a federation does) and its profiling
# energy is in its total.
#   bash benchmarks/settings_sweep.sh [OUT]      (about 45 minutes on 2 cores with 40 seeds)
# Writes OUT/report-<setting>-<arm>/ (depl-fl report) and OUT/pit-<setting>.md, OUT/pit-pooled.md (benchmarks/plan_pit.py);
# the committed copies are in benchmarks/results/settings/.
set -euo pipefail
cd "$(dirname "$0")/.."
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
PY=${PYTHON:-.venv/bin/python}
S=${1:-multirun/settings}
N=${SEEDS:-40}
H=$((N / 2))
mkdir -p "$S"
# profile=thorough: the exploration these figures were measured with (the default profile explores
# frugally where tracking is on: conf/profile/default.yaml).
common=(simulation=inprocess "target.prob=0.8,0.9,0.95" output.plot=false method=depl profile=thorough)
static() {  # static NAME OVERRIDES...
    local name=$1; shift
    "$PY" -m depl_fl.main -m "${common[@]}" "$@" "seed=range(0,$N)" tracking.enabled=false \
        profile.cache_dir="$S/cache-$name-p\${target.prob}" hydra.sweep.dir="$S/$name/static" || true
}
tracking() {  # tracking PART FIRST LAST
    "$PY" -m depl_fl.main -m "${common[@]}" partition.alpha=0.5 "seed=range($2,$3)" tracking.enabled=true \
        profile.cache_dir="$S/cache-g10t-$1-p\${target.prob}" hydra.sweep.dir="$S/g10/tracking/$1" || true
}
# A sweep with failed jobs (no dependable plan: recorded in their results.json, counted by the
# report) exits non-zero; the next arm runs anyway.
(
  static g10 partition.alpha=0.5
  static g12 partition.alpha=0.5 num_clients=12 target.loss=0.45
  tracking a 0 "$H"
) > "$S/a.log" 2>&1 &
(
  static g16 partition.alpha=0.3 num_clients=16 target.loss=0.3
  static g6 partition.alpha=0.5 num_clients=6 target.loss=0.4
  tracking b "$H" "$N"
) > "$S/b.log" 2>&1 &
wait
for arm in g10/static g12/static g16/static g6/static g10/tracking; do
  "$PY" -m depl_fl.cli report "$S/$arm" --out "$S/report-${arm//\//-}"
done
for setting in g10 g12 g16 g6; do
  "$PY" benchmarks/plan_pit.py "$S/$setting/static" --out "$S/pit-$setting.md" > /dev/null
done
"$PY" benchmarks/plan_pit.py --pooled "$S"/g{10,12,16,6}/static --out "$S/pit-pooled.md" > /dev/null
