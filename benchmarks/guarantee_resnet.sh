#!/usr/bin/env bash
# The guarantee on a second family of networks: the small residual CNN with BatchNorm
# (model=digits_resnet, depl_fl/task/residual_nets.py) on the bundled digits, 10 clients,
# Dirichlet alpha 0.5, L* = LOSS, pi in {0.8, 0.9, 0.95}, SEEDS seeds per cell.
#   main:      DepL static (tracking.enabled=false), DepL with tracking, and full (FedAvg, energy),
#              with the plan regime's constants as they are (fitted on the digits CNN only)
#   perturbed: DepL static on the same seeds with the constants the exploration cannot see (the
#              learning curve's floor and the oscillation) moved towards shorter, narrower plans
# Every job runs (and pays for) its own exploration (OWN_CACHE=1). One multirun at a time.
#   nice -n 10 bash benchmarks/guarantee_resnet.sh [SWEEP_DIR] [SEEDS]
# Writes benchmarks/results/guarantee_digits_resnet/{report.md,report.json,cells.md,pit.md} and
# perturbed/{report.md,report.json,pit.md}.
set -euo pipefail
cd "$(dirname "$0")/.."
S=${1:-multirun/guarantee_resnet}
SEEDS=${2:-"range(0,20)"}
LOSS=${LOSS:-0.35}
PY=${PYTHON:-.venv/bin/python}
OUT=benchmarks/results/guarantee_digits_resnet
FLOOR=${FLOOR:-0.0725}          # half the digits CNN's 0.145
OSCILLATION=${OSCILLATION:-0.12}  # three quarters of the digits CNN's 0.16
setting=(model=digits_resnet num_clients=10 "target.loss=$LOSS" output.plot=false)
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 PYTHON="$PY" OWN_CACHE=1 SERIAL=1
ARMS="depl full" REPORT_OUT=$OUT bash benchmarks/guarantee_sweep.sh "$S/main" "$SEEDS" "${setting[@]}"
ARMS="depl-static" REPORT_OUT=$OUT/perturbed bash benchmarks/guarantee_sweep.sh "$S/perturbed" "$SEEDS" \
    "${setting[@]}" "profile.plan_regime.floor=$FLOOR" "profile.plan_regime.oscillation=$OSCILLATION"
"$PY" benchmarks/guarantee_cells.py "resnet=$OUT/report.json" "resnet, floor $FLOOR, oscillation \
$OSCILLATION=$OUT/perturbed/report.json" --out "$OUT/cells.md"
"$PY" benchmarks/plan_pit.py --pooled "$S/main/depl" --out "$OUT/pit.md"
"$PY" benchmarks/plan_pit.py --pooled "$S/perturbed/depl" --out "$OUT/perturbed/pit.md"
