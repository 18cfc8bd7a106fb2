#!/usr/bin/env bash
# The guarantee on a second family of networks: the small residual CNN with BatchNorm
# (model=digits_resnet, depl_fl/task/residual_nets.py) on the bundled digits, 10 clients,
# Dirichlet alpha 0.5, local lr 0.2, L* = LOSS, pi in {0.8, 0.9, 0.95}.
#   main:      DepL static (tracking.enabled=false) and DepL with tracking, SEEDS seeds per cell,
#              and full (FedAvg, for the energy) on FULL_SEEDS, with the plan regime's constants as
#              they are (fitted on the digits CNN only)
#   perturbed: DepL static on the seeds PERTURBED_SEEDS at pi PERTURBED_PROBS, with the constants
#              the exploration cannot see (the learning curve's floor and the oscillation) moved
#              towards shorter, narrower plans
# Every job runs (and pays for) its own exploration (OWN_CACHE=1). Two multiruns at a time
# (static, then perturbed | tracking, then full), then the reports.
#   nice -n 10 bash benchmarks/guarantee_resnet.sh [SWEEP_DIR]
# Writes benchmarks/results/guarantee_digits_resnet/{report.md,report.json,cells.md,pit.md} and
# perturbed/{report.md,report.json,pit.md}.
set -euo pipefail
cd "$(dirname "$0")/.."
S=${1:-multirun/guarantee_resnet}
SEEDS=${SEEDS:-"range(0,20)"}
LOSS=${LOSS:-0.35}
PY=${PYTHON:-.venv/bin/python}
OUT=benchmarks/results/guarantee_digits_resnet
FLOOR=${FLOOR:-0.0725}            # half the digits CNN's 0.145
OSCILLATION=${OSCILLATION:-0.12}  # three quarters of the digits CNN's 0.16
setting=(model=digits_resnet num_clients=10 train.lr=0.2 "target.loss=$LOSS" output.plot=false)
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 PYTHON="$PY" OWN_CACHE=1 SERIAL=1 REPORT=0
mkdir -p "$S/main" "$S/perturbed"
(
    ARMS="depl-static" bash benchmarks/guarantee_sweep.sh "$S/main/a" "$SEEDS" "${setting[@]}"
    ARMS="depl-static" PROBS=${PERTURBED_PROBS:-0.8,0.9,0.95} bash benchmarks/guarantee_sweep.sh \
        "$S/perturbed/a" "${PERTURBED_SEEDS:-$SEEDS}" "${setting[@]}" \
        "profile.plan_regime.floor=$FLOOR" "profile.plan_regime.oscillation=$OSCILLATION"
) &
ARMS="depl-tracking full" FULL_SEEDS=${FULL_SEEDS:-"range(0,20)"} \
    bash benchmarks/guarantee_sweep.sh "$S/main/b" "$SEEDS" "${setting[@]}" &
wait
"$PY" -m depl_fl.cli report "$S/main" --out "$OUT"
"$PY" -m depl_fl.cli report "$S/perturbed" --out "$OUT/perturbed"
"$PY" benchmarks/guarantee_cells.py "resnet=$OUT/report.json" "resnet, floor $FLOOR, oscillation \
$OSCILLATION=$OUT/perturbed/report.json" --out "$OUT/cells.md"
"$PY" benchmarks/plan_pit.py --pooled "$S/main" --out "$OUT/pit.md"
"$PY" benchmarks/plan_pit.py --pooled "$S/perturbed" --out "$OUT/perturbed/pit.md"
