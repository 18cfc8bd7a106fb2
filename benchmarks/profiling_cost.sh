#!/usr/bin/env bash
# What DepL's own profiling costs, on the guarantee setting:
# non-IID digits (Dirichlet alpha=0.5), 10 clients, pi=0.9, target loss 0.35,
# in-process backend (the same ServerApp strategy and ClientApp code as under Ray),
# federated profiling (profile.source=federated, the default).
#
# Arms (each with its own profile cache, so a "single job" pays for its profile):
#   depl        DepL as it runs by default (tracking on, profile.source=federated): a fresh
#               federation per seed, so every job pays for its own exploration rounds
#   full        dependable FedAvg (full model, every client, static plan) planned on the
#               in-process pilot profile (profile.source=inprocess, the guarantee
#               setting's pilots; built once by the first job, whose total includes the pilots' cost)
#   depl-reuse  a second DepL job on each of the same federations, reusing depl's cached profile
#               (no exploration rounds; the tracker refines the cached profile online)
# Then benchmarks/profiling_summary.py writes benchmarks/results/profiling/summary.{md,json}.
#
#   bash benchmarks/profiling_cost.sh [SWEEP_DIR] [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SWEEP=${1:-multirun/profiling}
SEEDS=${2:-"range(0,30)"}
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$(dirname "$SWEEP")"
# profile=thorough: the exploration these figures were measured with (the default profile explores
# frugally where tracking is on: conf/profile/default.yaml); not on the pilot job, which explores nothing
# (an exploration option set there is refused).
common=(simulation=inprocess partition.alpha=0.5 target.prob=0.9 "seed=$SEEDS" output.plot=false)
(
  "$PY" -m depl_fl.main -m "${common[@]}" profile=thorough method=depl profile.cache_dir="$SWEEP/cache-depl" \
      hydra.sweep.dir="$SWEEP/depl"
  "$PY" -m depl_fl.main -m "${common[@]}" profile=thorough method=depl profile.cache_dir="$SWEEP/cache-depl" \
      hydra.sweep.dir="$SWEEP/depl-reuse"
) > "$SWEEP.a.log" 2>&1 &
"$PY" -m depl_fl.main -m "${common[@]}" method=full tracking.enabled=false profile.source=inprocess \
    profile.cache_dir="$SWEEP/cache-full" hydra.sweep.dir="$SWEEP/full" > "$SWEEP.b.log" 2>&1 &
wait
"$PY" benchmarks/profiling_summary.py "$SWEEP" --expected 30 --out benchmarks/results/profiling
