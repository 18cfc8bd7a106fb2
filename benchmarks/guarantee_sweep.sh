#!/usr/bin/env bash
# The guarantee experiment (docs/RESULTS.md):
# non-IID digits (Dirichlet alpha=0.5), 10 clients, 30 seeds per point,
# pi in {0.8, 0.9, 0.95}, in-process backend (the same ServerApp strategy and
# ClientApp code as under Ray, without Ray's start-up cost per job).
#
# Arms (the report labels runs with online tracking "<method>+tracking"):
#   depl+tracking         DepL as it runs by default (online tracking, re-planning)
#   depl                  DepL's static plan alone (tracking off): the planner's own promise
#   expectation           the state-of-the-art baseline: a static mean-based plan
#   expectation+tracking  the same planner re-planning online on its mean (ablation)
#   full                  plain FedAvg: full model, every client, static plan
# Two Hydra multiruns in parallel (one per core), then the report.
#
#   bash benchmarks/guarantee_sweep.sh [SWEEP_DIR] [SEEDS] [OVERRIDES...]
# e.g. settings the plan regime's constants were not fitted on:
#   bash benchmarks/guarantee_sweep.sh multirun/g12 "range(0,20)" num_clients=12 target.loss=0.45
#   bash benchmarks/guarantee_sweep.sh multirun/g16 "range(0,20)" num_clients=16 partition.alpha=0.3 target.loss=0.3
# Every figure of the report judges the test loss (results.json final_test_loss).
set -euo pipefail
cd "$(dirname "$0")/.."
SWEEP=${1:-multirun/guarantee}
SEEDS=${2:-"range(0,30)"}
PY=${PYTHON:-.venv/bin/python}
common=(simulation=inprocess partition.alpha=0.5 "target.prob=0.8,0.9,0.95" "seed=$SEEDS" "${@:3}")
"$PY" -m depl_fl.main -m "${common[@]}" method=depl tracking.enabled=true,false \
    hydra.sweep.dir="$SWEEP/depl" > "$SWEEP.a.log" 2>&1 &
(
  "$PY" -m depl_fl.main -m "${common[@]}" method=expectation tracking.enabled=false,true \
      hydra.sweep.dir="$SWEEP/expectation"
  "$PY" -m depl_fl.main -m "${common[@]}" method=full tracking.enabled=false \
      hydra.sweep.dir="$SWEEP/full"
) > "$SWEEP.b.log" 2>&1 &
wait
"$PY" -m depl_fl.cli report "$SWEEP" --out "${REPORT_OUT:-benchmarks/results/guarantee}"
