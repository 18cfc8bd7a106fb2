#!/usr/bin/env bash
# A network's own plan-regime constants: its trajectory bank on two development settings, then the
# fit (benchmarks/plan_regime/bank.py, fit.py). The constants go into the network's model.regime
# (conf/model/<name>.yaml); none of these settings is one a guarantee sweep reports.
#   nice -n 10 bash benchmarks/plan_regime/network_bank.sh [MODEL] [OUT]
# MODEL: a model config (default digits_resnet) with EXTRA Hydra overrides for every job (default
# train.lr=0.2); SEEDS (default 100-107) per setting; OUT (default /tmp/bank-MODEL) holds the bank,
# benchmarks/results/plan_regime/MODEL/ the fit (fit.md, fit.json). The two settings run in parallel:
# NAMES (default r1,r2) with the overrides SETTING1 and SETTING2 (default the digits settings below),
# POLICIES (bank.py --policies, default standard); FIT_EXTRA: overrides the fit adds to model=MODEL.
# The synthetic MLP's bank (benchmarks/results/plan_regime/synthetic_mlp/README.md; its first fit read
# the max_clients exploration's rate as measured, rate_at_full=cheapest):
#   common="dataset=synthetic dataset.iid=true train.lr=0.2 aggregation.norm_factor=30
#           profile.explore.max_clients=100 profile.plan_regime.anchor=last
#           profile.plan_regime.explored_oscillation=null"
#   EXTRA="$common" NAMES=b300,b1000 POLICIES=small \
#   SETTING1="num_clients=300 dataset.log_sigma=1.0 target.loss=0.5" \
#   SETTING2="num_clients=1000 dataset.log_sigma=0.5 target.loss=0.45" \
#   FIT_EXTRA="profile.plan_regime.anchor=last profile.plan_regime.explored_oscillation=null
#              profile.plan_regime.rate_at_full=cheapest" \
#   nice -n 10 bash benchmarks/plan_regime/network_bank.sh synthetic_mlp /tmp/bank-synthetic_mlp
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-digits_resnet}
OUT=${2:-/tmp/bank-$MODEL}
SEEDS=${SEEDS:-100-107}
EXTRA=${EXTRA:-train.lr=0.2}
NAMES=${NAMES:-r1,r2}
IFS=, read -r NAME1 NAME2 <<< "$NAMES"
SETTING1=${SETTING1:-num_clients=8 partition.alpha=0.5 target.loss=0.4}
SETTING2=${SETTING2:-num_clients=12 partition.alpha=1.0 target.loss=0.3}
POLICIES=${POLICIES:-standard}
PY=${PYTHON:-.venv/bin/python}
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 PYTHONPATH=$PWD
"$PY" benchmarks/plan_regime/bank.py --name "$NAME1" --seeds "$SEEDS" --out "$OUT" --policies "$POLICIES" \
    --overrides "model=$MODEL $EXTRA $SETTING1" &
"$PY" benchmarks/plan_regime/bank.py --name "$NAME2" --seeds "$SEEDS" --out "$OUT" --policies "$POLICIES" \
    --overrides "model=$MODEL $EXTRA $SETTING2" &
wait
"$PY" benchmarks/plan_regime/fit.py "$OUT" --settings "$NAMES" --fit --overrides "model=$MODEL ${FIT_EXTRA:-}" \
    --out "benchmarks/results/plan_regime/$MODEL"
