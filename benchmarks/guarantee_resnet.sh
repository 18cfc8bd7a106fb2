#!/usr/bin/env bash
# The guarantee on a second family of networks: the small residual CNN with BatchNorm
# (model=digits_resnet, depl_fl/task/residual_nets.py) on the bundled digits, 10 clients,
# Dirichlet alpha 0.5, local lr 0.2, L* = LOSS, deadline DEADLINE s, pi in {0.8, 0.9, 0.95}. The
# network's model.regime (conf/model/digits_resnet.yaml): plans start at the trend fitted through the
# job's own exploration and widen the oscillation by what it measures (docs/MODELS.md).
#   main:      DepL static (tracking.enabled=false) and DepL with tracking, SEEDS seeds per cell, with
#              the plan regime's structural constants of the digits CNN; and full
#              (FedAvg) on FULL_SEEDS when given (its training energy also comes from re-planning
#              every static job's profile with method=full: benchmarks/regime_replan.py)
#   perturbed: DepL static on PERTURBED_SEEDS (none when empty) at pi PERTURBED_PROBS, with the
#              constants the exploration cannot see (the learning curve's floor, the oscillation)
#              moved towards shorter, narrower plans
# Every job runs (and pays for) its own exploration (OWN_CACHE=1). Two multiruns at a time
# (static, then perturbed | tracking, then full), then the reports.
#   nice -n 10 bash benchmarks/guarantee_resnet.sh [SWEEP_DIR]
# OVERRIDES="KEY=VALUE ..." adds Hydra overrides to every job (e.g. profile.plan_regime.anchor=last
# profile.plan_regime.explored_oscillation=null DEADLINE=300: the digits CNN's constants as they are,
# the earlier results under constant_oscillation/).
# PROBS=0.95 restricts pi (benchmarks/guarantee_sweep.sh); OUT=DIR writes the results there instead.
# Writes benchmarks/results/guarantee_digits_resnet/ (or OUT): report.{md,json} (depl-fl report), cells.md
# (benchmarks/guarantee_cells.py), pit.md (benchmarks/plan_pit.py --pooled), replan.{md,json}
# (benchmarks/regime_replan.py) and perturbed/report.{md,json}.
set -euo pipefail
cd "$(dirname "$0")/.."
S=${1:-multirun/guarantee_resnet}
SEEDS=${SEEDS:-"range(0,20)"}
LOSS=${LOSS:-0.35}
DEADLINE=${DEADLINE:-600}
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-benchmarks/results/guarantee_digits_resnet}
FLOOR=${FLOOR:-0.0725}            # half the digits CNN's 0.145
OSCILLATION=${OSCILLATION:-0.12}  # three quarters of the digits CNN's 0.16
setting=(model=digits_resnet num_clients=10 train.lr=0.2 "target.loss=$LOSS" "target.deadline_s=$DEADLINE"
         output.plot=false)
read -r -a extra <<< "${OVERRIDES:-}"
setting+=("${extra[@]}")
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 PYTHON="$PY" OWN_CACHE=1 SERIAL=1 REPORT=0
mkdir -p "$S/main" "$S/perturbed"
(
    ARMS="depl-static" bash benchmarks/guarantee_sweep.sh "$S/main/a" "$SEEDS" "${setting[@]}"
    if [ -n "${PERTURBED_SEEDS:-}" ]; then
        ARMS="depl-static" PROBS=${PERTURBED_PROBS:-0.9} bash benchmarks/guarantee_sweep.sh \
            "$S/perturbed/a" "$PERTURBED_SEEDS" "${setting[@]}" \
            "profile.plan_regime.floor=$FLOOR" "profile.plan_regime.oscillation=$OSCILLATION"
    fi
) &
arms="depl-tracking"
if [ -n "${FULL_SEEDS:-}" ]; then arms="depl-tracking full"; fi
ARMS="$arms" FULL_SEEDS=${FULL_SEEDS:-} bash benchmarks/guarantee_sweep.sh "$S/main/b" "$SEEDS" "${setting[@]}" &
wait
"$PY" -m depl_fl.cli report "$S/main" --out "$OUT"
"$PY" benchmarks/guarantee_cells.py "resnet=$OUT/report.json" --out "$OUT/cells.md"
"$PY" benchmarks/plan_pit.py --pooled "$S/main/a" --out "$OUT/pit.md"
"$PY" benchmarks/regime_replan.py "$S/main/a" --set "floor=$FLOOR" --set "oscillation=$OSCILLATION" \
    --out "$OUT/replan.md" --json "$OUT/replan.json"
if [ -n "${PERTURBED_SEEDS:-}" ]; then
    "$PY" -m depl_fl.cli report "$S/perturbed" --out "$OUT/perturbed"
fi
