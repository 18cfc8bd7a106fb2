#!/usr/bin/env bash
# The guarantee experiment (README "Does the guarantee hold?"):
# non-IID digits (Dirichlet alpha=0.5), 10 clients, 30 seeds per point,
# pi in {0.8, 0.9, 0.95}, methods depl / expectation / full, in-process backend
# (the same ServerApp strategy and ClientApp code as under Ray, without Ray's
# start-up cost per job). Two Hydra multiruns in parallel (one per core), then
# the report.
#
#   bash benchmarks/guarantee_sweep.sh [SWEEP_DIR] [SEEDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SWEEP=${1:-multirun/guarantee}
SEEDS=${2:-"range(0,30)"}
PY=${PYTHON:-.venv/bin/python}
common=(simulation=inprocess partition.alpha=0.5 "target.prob=0.8,0.9,0.95" "seed=$SEEDS")
"$PY" -m depl_fl.main -m "${common[@]}" method=depl \
    hydra.sweep.dir="$SWEEP/depl" > "$SWEEP.depl.log" 2>&1 &
"$PY" -m depl_fl.main -m "${common[@]}" method=expectation,full \
    hydra.sweep.dir="$SWEEP/baselines" > "$SWEEP.baselines.log" 2>&1 &
wait
"$PY" -m depl_fl.cli report "$SWEEP" --out benchmarks/results/guarantee
