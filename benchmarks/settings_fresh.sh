#!/usr/bin/env bash
# Two settings no other sweep here uses, on seeds none uses (400..400+SEEDS-1, default 40), judged
# against goal_ceiling.py's ceiling: nothing is fitted on them.
#   g24: 24 clients, alpha 0.5, L* 0.35  static, and tracking on the first TRACK_SEEDS (default 20) seeds
#   g5:   5 clients, alpha 0.8, L* 0.45  static (few clients per plan)
#   bash benchmarks/settings_fresh.sh [OUT]   (about an hour on 2 cores)
# Writes OUT/report-<setting>-<arm>/ (depl-fl report), OUT/pit-<setting>.md (plan_pit.py),
# OUT/goal_ceiling.md (the static cells beside any planner's ceiling) and OUT/explore_overshoot.md
# (jobs that met the target during the exploration); the committed copies are in
# benchmarks/results/settings/fresh/ (reports as g24s, g24t, g5s).
set -euo pipefail
cd "$(dirname "$0")/.."
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
PY=${PYTHON:-.venv/bin/python}
S=${1:-multirun/settings-fresh}
N=${SEEDS:-40}
TN=${TRACK_SEEDS:-20}
mkdir -p "$S"
# profile=thorough: the exploration these figures were measured with (the default profile explores
# frugally where tracking is on: conf/profile/default.yaml).
common=(simulation=inprocess output.plot=false method=depl target.prob=0.8,0.9,0.95 profile=thorough)
g24=(num_clients=24 partition.alpha=0.5 target.loss=0.35)
g5=(num_clients=5 partition.alpha=0.8 target.loss=0.45)
run() {  # run NAME ARM SEED_FIRST SEED_LAST OVERRIDES...
    local name=$1 arm=$2 first=$3 last=$4; shift 4
    "$PY" -m depl_fl.main -m "${common[@]}" "$@" "seed=range($first,$last)" \
        "tracking.enabled=$([ "$arm" = tracking ] && echo true || echo false)" \
        profile.cache_dir="$S/cache-$name-$arm-p\${target.prob}" hydra.sweep.dir="$S/$name/$arm" || true
}
# A sweep with failed jobs (recorded in their results.json, counted by the report) exits non-zero.
( run g24 static 400 $((400 + N)) "${g24[@]}" ) > "$S/a.log" 2>&1 &
( run g5 static 400 $((400 + N)) "${g5[@]}"; run g24 tracking 400 $((400 + TN)) "${g24[@]}" ) > "$S/b.log" 2>&1 &
wait
for arm in g24/static g24/tracking g5/static; do
  "$PY" -m depl_fl.cli report "$S/$arm" --out "$S/report-${arm//\//-}"
done
for setting in g24 g5; do
  "$PY" benchmarks/plan_pit.py "$S/$setting/static" --out "$S/pit-$setting.md"
done
"$PY" benchmarks/goal_ceiling.py --targets 0.35 0.45 --runs 40 --reports "$S/report-g24-static/report.json" \
    "$S/report-g5-static/report.json" --out "$S/goal_ceiling.md"
"$PY" benchmarks/explore_overshoot.py "$S/g5/static" "$S/g24/static" --out "$S/explore_overshoot.md"
