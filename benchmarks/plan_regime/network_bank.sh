#!/usr/bin/env bash
# A network's own plan-regime constants: its trajectory bank on two development settings, then the
# fit (benchmarks/plan_regime/bank.py, fit.py). The constants go into the network's model.regime
# (conf/model/<name>.yaml); none of these settings is one a guarantee sweep reports.
#   nice -n 10 bash benchmarks/plan_regime/network_bank.sh [MODEL] [OUT]
# MODEL: a model config (default digits_resnet) with EXTRA Hydra overrides for every job (default
# train.lr=0.2); SEEDS (default 100-107) per setting; OUT (default /tmp/bank-MODEL) holds the bank,
# benchmarks/results/plan_regime/MODEL/ the fit (fit.md, fit.json). The two settings run in parallel.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-digits_resnet}
OUT=${2:-/tmp/bank-$MODEL}
SEEDS=${SEEDS:-100-107}
EXTRA=${EXTRA:-train.lr=0.2}
PY=${PYTHON:-.venv/bin/python}
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 PYTHONPATH=$PWD
"$PY" benchmarks/plan_regime/bank.py --name r1 --seeds "$SEEDS" --out "$OUT" \
    --overrides "model=$MODEL $EXTRA num_clients=8 partition.alpha=0.5 target.loss=0.4" &
"$PY" benchmarks/plan_regime/bank.py --name r2 --seeds "$SEEDS" --out "$OUT" \
    --overrides "model=$MODEL $EXTRA num_clients=12 partition.alpha=1.0 target.loss=0.3" &
wait
"$PY" benchmarks/plan_regime/fit.py "$OUT" --settings r1,r2 --fit --overrides "model=$MODEL" \
    --out "benchmarks/results/plan_regime/$MODEL"
