#!/usr/bin/env bash
# Networks users bring, through the default job: `./run.sh model=custom model.factory=PKG:NAME`.
#
# For each network below, seeds 0-4 of the default job (tracking on, the default target, the default
# model.compressions, Flower simulation on Ray, 10 clients in 2 clusters) in one Hydra multirun, with
# only the environment run.sh adds. The network list was fixed before any result:
#
#   quickstart_net_8   Flower quickstart's Net at 8x8 (its conv2 kept whole)   tests.user_nets
#   resnet_tiny        ResNet: BatchNorm, residual adds                        tests.user_nets
#   mobilenet_v2_tiny  MobileNetV2: depthwise convs, inverted residuals        tests.user_nets
#   vgg_net            VGG-style plain conv stack with BatchNorm               tests.user_nets_more
#   convnext_net       ConvNeXt: depthwise 7x7, LayerNorm, layer scale         tests.user_nets
#
# Usage: bash benchmarks/byom_default_jobs.sh [NAME ...]   (default: all five, in this order)
#   METHOD=full bash benchmarks/byom_default_jobs.sh NAME ...   the same seeds with method=full
# Job folders: multirun/byom_default/<method>/<NAME>/<job>/ (results.json per job), logs beside them;
# the profile cache of each network in its own folder there. A network whose folder already holds a
# results.json is skipped (the script resumes). Summarise with
#   python benchmarks/byom_default_jobs_table.py  -> benchmarks/results/byom_zoo/default_jobs.md
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-/work/main/.venv/bin/python}
[ -x "$PY" ] || PY=.venv/bin/python
export PYTHONPATH=$PWD
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1   # what run.sh exports
export RAY_DEDUP_LOGS=0
METHOD=${METHOD:-depl}
NETWORKS=(quickstart_net_8 resnet_tiny mobilenet_v2_tiny vgg_net convnext_net)
declare -A MODULE=([vgg_net]=tests.user_nets_more)
[ $# -gt 0 ] && NETWORKS=("$@")
OUT=multirun/byom_default/$METHOD
mkdir -p "$OUT"
for name in "${NETWORKS[@]}"; do
  dir=$OUT/$name
  [ -n "$(find "$dir" -name results.json 2>/dev/null | head -1)" ] && continue
  extra=()
  [ "$METHOD" != depl ] && extra=("method=$METHOD")
  start=$(date +%s)
  nice -n 10 "$PY" -m depl_fl.main -m model=custom "model.factory=${MODULE[$name]:-tests.user_nets}:$name" \
      "${extra[@]}" "seed=0,1,2,3,4" "profile.cache_dir=$dir/cache" "hydra.sweep.dir=$dir" \
      > "$OUT/$name.log" 2>&1
  echo "$name rc=$? wall_s=$(( $(date +%s) - start ))" | tee -a "$OUT/multirun_status.txt"
done
