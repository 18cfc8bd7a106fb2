#!/usr/bin/env bash
# Evidence for issue 15 on the current code (federated profiling, the default): static DepL on
# three settings at pi in {0.8, 0.9, 0.95}, and DepL with tracking on the guarantee setting.
#   g10: 10 clients, alpha 0.5, L* 0.35 (the guarantee setting)        20 seeds static and tracking
#   g12: 12 clients, alpha 0.5, L* 0.45                                20 seeds static
#   g16: 16 clients, alpha 0.3, L* 0.3                                 20 seeds static
# One profile cache per setting and pi: every job runs its own exploration (as a user's first
# job on a federation does) and its profiling energy is in its total.
# Then: depl-fl report OUT/<setting>/<arm> (results in benchmarks/results/issue15/).
#   bash benchmarks/issue15_sweep.sh [OUT]      (30-45 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
PY=${PYTHON:-.venv/bin/python}
S=${1:-multirun/issue15}
mkdir -p "$S"
common=(simulation=inprocess "target.prob=0.8,0.9,0.95" output.plot=false method=depl)
# A sweep with failed jobs (no dependable plan: recorded in their results.json, counted by the
# report) exits non-zero; the next arm runs anyway.
(
  "$PY" -m depl_fl.main -m "${common[@]}" partition.alpha=0.5 "seed=range(0,20)" tracking.enabled=false \
      profile.cache_dir="$S/cache-g10-p\${target.prob}" hydra.sweep.dir="$S/g10/static" || true
  "$PY" -m depl_fl.main -m "${common[@]}" partition.alpha=0.5 num_clients=12 target.loss=0.45 \
      "seed=range(0,20)" tracking.enabled=false profile.cache_dir="$S/cache-g12-p\${target.prob}" \
      hydra.sweep.dir="$S/g12/static" || true
  "$PY" -m depl_fl.main -m "${common[@]}" partition.alpha=0.5 "seed=range(10,20)" tracking.enabled=true \
      profile.cache_dir="$S/cache-g10t-p\${target.prob}" hydra.sweep.dir="$S/g10/tracking/b" || true
) > "$S/a.log" 2>&1 &
(
  "$PY" -m depl_fl.main -m "${common[@]}" partition.alpha=0.3 num_clients=16 target.loss=0.3 \
      "seed=range(0,20)" tracking.enabled=false profile.cache_dir="$S/cache-g16-p\${target.prob}" \
      hydra.sweep.dir="$S/g16/static" || true
  "$PY" -m depl_fl.main -m "${common[@]}" partition.alpha=0.5 "seed=range(0,10)" tracking.enabled=true \
      profile.cache_dir="$S/cache-g10t-p\${target.prob}" hydra.sweep.dir="$S/g10/tracking/a" || true
) > "$S/b.log" 2>&1 &
wait
for arm in g10/static g12/static g16/static g10/tracking; do
  "$PY" -m depl_fl.cli report "$S/$arm" --out "$S/report-${arm//\//-}"
done
