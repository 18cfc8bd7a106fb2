#!/usr/bin/env bash
# Two more settings beside the main sweep (settings_sweep.sh), on seeds it does not use
# (100..100+SEEDS-1, default 30): nothing is fitted on them.
#   g8:  8 clients, alpha 1.0, L* 0.3   static (near the bank's d1/d3 in kind, not in partition)
#   g20: 20 clients, alpha 0.4, L* 0.4  static and tracking (20 seeds; outside the bank's 8-14 clients),
#        and 20 more tracking seeds at pi 0.8 (100+TN..; run when the first 20 met the target in 14)
#   bash benchmarks/settings_extra.sh [OUT]   (about 25 minutes static, 60 + 10 more for tracking, 2 cores)
# Writes OUT/report-<setting>-<arm>/ (depl-fl report), OUT/pit-<setting>.md and OUT/pit-pooled.md
# (benchmarks/plan_pit.py), OUT/report-g20-all/ (every g20 arm, tracking at pi 0.8 over both seed sets);
# the committed copies are in benchmarks/results/settings/ (g8s, g20s, g20t, g20t80, g20-all, pit-*).
set -euo pipefail
cd "$(dirname "$0")/.."
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
PY=${PYTHON:-.venv/bin/python}
S=${1:-multirun/settings-extra}
N=${SEEDS:-30}
LAST=$((100 + N))
TN=${TRACK_SEEDS:-20}  # tracking seeds 100..100+TN-1, in two halves
HALF=$((100 + TN / 2))
TLAST=$((100 + TN))
mkdir -p "$S"
# profile=thorough: the exploration these figures were measured with (the default profile explores
# frugally where tracking is on: conf/profile/default.yaml).
common=(simulation=inprocess output.plot=false method=depl profile=thorough)
g8=(partition.alpha=1.0 num_clients=8 target.loss=0.3)
g20=(partition.alpha=0.4 num_clients=20 target.loss=0.4)
run() {  # run NAME ARM SEED_FIRST SEED_LAST OVERRIDES...  (PROBS: the target probabilities)
    local name=$1 arm=$2 first=$3 last=$4; shift 4
    "$PY" -m depl_fl.main -m "${common[@]}" "target.prob=${PROBS:-0.8,0.9,0.95}" "$@" \
        "seed=range($first,$last)" \
        "tracking.enabled=$(case $arm in tracking*) echo true ;; *) echo false ;; esac)" \
        profile.cache_dir="$S/cache-$name-${arm//\//-}-p\${target.prob}" hydra.sweep.dir="$S/$name/$arm" || true
}
# A sweep with failed jobs (recorded in their results.json, counted by the report) exits non-zero.
( run g8 static 100 "$LAST" "${g8[@]}"; run g20 tracking/a 100 "$HALF" "${g20[@]}"
  PROBS=0.8 run g20 tracking80/c "$TLAST" $((TLAST + TN / 2)) "${g20[@]}" ) > "$S/a.log" 2>&1 &
( run g20 static 100 "$LAST" "${g20[@]}"; run g20 tracking/b "$HALF" "$TLAST" "${g20[@]}"
  PROBS=0.8 run g20 tracking80/d $((TLAST + TN / 2)) $((TLAST + TN)) "${g20[@]}" ) > "$S/b.log" 2>&1 &
wait
for arm in g8/static g20/static g20/tracking g20/tracking80; do
  "$PY" -m depl_fl.cli report "$S/$arm" --out "$S/report-${arm//\//-}"
done
"$PY" -m depl_fl.cli report "$S/g20" --out "$S/report-g20-all"
for setting in g8 g20; do
  "$PY" benchmarks/plan_pit.py "$S/$setting/static" --out "$S/pit-$setting.md" > /dev/null
done
"$PY" benchmarks/plan_pit.py --pooled "$S"/g{8,20}/static --out "$S/pit-pooled.md" > /dev/null
