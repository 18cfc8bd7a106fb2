#!/usr/bin/env bash
# Explorations stopped on the plateau: static DepL with the exploration capped at 20 rounds
# (profile.explore.max_rounds=20, no deadline share) against the default (on to
# stop_loss_factor x L*, at most 40 rounds and half the deadline), on three settings where the cap bound:
#   g30: 30 clients, alpha 0.2, L* 0.3, seeds 300-319, pi 0.8 / 0.95 (capped explorations end at ~5 x L*)
#   g20: 20 clients, alpha 0.4, L* 0.4, seeds 100-109, pi 0.8 / 0.95 (they end at ~2 x L*)
#   g16: 16 clients, alpha 0.3, L* 0.3, seeds 200-209, pi 0.8 / 0.9 / 0.95
#   bash benchmarks/exploration_cap_sweep.sh [OUT]   (about 70 minutes on 2 cores)
# Writes OUT/report-<setting>-<arm>/ (depl-fl report), OUT/pit-<setting>-<arm>.md (plan_pit.py) and
# OUT/plateau.md (exploration_plateau.py); the committed copies are in benchmarks/results/settings/plateau/.
set -euo pipefail
cd "$(dirname "$0")/.."
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
PY=${PYTHON:-.venv/bin/python}
S=${1:-multirun/settings-plateau}
mkdir -p "$S"
# profile.explore.without_tracking=thorough: the exploration static plans and full's jobs explored when these figures were
# measured (every client; the default without tracking explores on the cheapest clusters).
common=(simulation=inprocess output.plot=false method=depl tracking.enabled=false
        profile.explore.without_tracking=thorough)
cap20=(profile.explore.max_rounds=20 profile.explore.max_deadline_share=null)
run() {  # run NAME ARM SEED_FIRST SEED_LAST PROBS OVERRIDES...
    local name=$1 arm=$2 first=$3 last=$4 probs=$5; shift 5
    "$PY" -m depl_fl.main -m "${common[@]}" "target.prob=$probs" "$@" "seed=range($first,$last)" \
        profile.cache_dir="$S/cache-$name-$arm-p\${target.prob}" hydra.sweep.dir="$S/$name/$arm" || true
}
g30=(num_clients=30 partition.alpha=0.2 target.loss=0.3)
g20=(num_clients=20 partition.alpha=0.4 target.loss=0.4)
g16=(num_clients=16 partition.alpha=0.3 target.loss=0.3)
( run g30 cap20 300 320 0.8,0.95 "${g30[@]}" "${cap20[@]}"; run g20 cap20 100 110 0.8,0.95 "${g20[@]}" "${cap20[@]}"
  run g16 cap20 200 210 0.8,0.9,0.95 "${g16[@]}" "${cap20[@]}" ) > "$S/a.log" 2>&1 &
( run g30 default 300 320 0.8,0.95 "${g30[@]}"; run g20 default 100 110 0.8,0.95 "${g20[@]}"
  run g16 default 200 210 0.8,0.9,0.95 "${g16[@]}" ) > "$S/b.log" 2>&1 &
wait
for setting in g30 g20 g16; do
  for arm in cap20 default; do
    "$PY" -m depl_fl.cli report "$S/$setting/$arm" --out "$S/report-$setting-$arm"
    "$PY" benchmarks/plan_pit.py "$S/$setting/$arm" --out "$S/pit-$setting-$arm.md"
  done
done
"$PY" benchmarks/exploration_plateau.py "$S"/g30/cap20 "$S"/g30/default "$S"/g20/cap20 "$S"/g20/default \
    "$S"/g16/cap20 "$S"/g16/default --out "$S/plateau.md"
