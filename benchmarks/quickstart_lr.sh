#!/usr/bin/env bash
# Flower quickstart's Net (tests.user_nets:quickstart_net_8, conv2 kept whole) through the default job,
# in process, at the default train.lr 0.05 and at 0.2, seeds 0-4, one job at a time:
#   bash benchmarks/quickstart_lr.sh OUT
#   python benchmarks/quickstart_lr_table.py OUT           # the table of benchmarks/results/byom_zoo/quickstart_lr.md
#   python benchmarks/stop_misses.py OUT/lr0.2 --resplits 200   # why a stopped job missed
set -uo pipefail
cd "$(dirname "$0")/.."
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
PY=${PYTHON:-.venv/bin/python}
OUT=${1:?usage: quickstart_lr.sh OUT}
for lr in 0.05 0.2; do
  mkdir -p "$OUT/lr$lr"
  for seed in 0 1 2 3 4; do
    d="$OUT/lr$lr/seed$seed"
    nice -n 10 "$PY" -m depl_fl.main model=custom model.factory=tests.user_nets:quickstart_net_8 seed="$seed" \
      simulation=inprocess train.lr="$lr" hydra.run.dir="$d" profile.cache_dir="$d/cache" > "$d.log" 2>&1
    echo "lr=$lr seed=$seed rc=$?" >> "$OUT/rc.txt"
  done
done
