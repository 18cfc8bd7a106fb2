#!/usr/bin/env bash
# The default job (tracking on, its frugal exploration: cheapest clusters, value stop, rate window 0.5)
# on few clients, without a prior: DepL's total energy (exploration + training) against full's, with the
# exploration rule RULE below (arm "rule"; opt-in, conf/profile/default.yaml) and without it (arm "old":
# the defaults, pinned by OLD below), on three settings fixed before any result of the rule (digits,
# in-process):
#   q5a06: 5 clients, Dirichlet alpha 0.6, L* 0.45
#   q6a05: 6 clients, alpha 0.5, L* 0.42
#   q8a08: 8 clients, alpha 0.8, L* 0.40
# and the development settings the rule was chosen on (FIRST < 1000 only):
#   d5a09: 5 clients, alpha 0.9, L* 0.45
#   d6a03: 6 clients, alpha 0.3, L* 0.42
# Arms per setting, pi 0.9, one Hydra multirun each (nice -n 10, one at a time, each its own profile
# cache folder):
#   OUT/<s>-rule/depl  method=depl, tracking on, the default profile, seeds FIRST..FIRST+SEEDS-1
#   OUT/<s>-old/depl   the same with OLD, the same seeds
#   OUT/<s>/full       plain FedAvg (tracking off, its own thorough exploration), FULL_SEEDS seeds from
#                      FIRST, with RULE (as measured); copied into both arms' folders (every ratio against the same full jobs)
#   SEEDS=10 FULL_SEEDS=5 FIRST=1300 bash benchmarks/exploration_few.sh OUT [SETTING ...]
# then OUT/<s>-<arm>/report.{md,json} (depl-fl report), RESULTS/summary.{md,json}
# (benchmarks/exploration_energy.py), RESULTS/rounds.{md,json} (benchmarks/exploration_few.py: the
# exploration round by round) and RESULTS/report-<s>-<arm>.md; RESULTS defaults to
# benchmarks/results/exploration_few.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
# shellcheck source=benchmarks/sweep_common.sh
source benchmarks/sweep_common.sh
mkdir -p "${1:-multirun/exploration-few}"
S=$(cd "${1:-multirun/exploration-few}" && pwd)
N=${SEEDS:-10}
NF=${FULL_SEEDS:-5}
F=${FIRST:-1300}
declare -A CLIENTS=([q5a06]=5 [q6a05]=6 [q8a08]=8 [d5a09]=5 [d6a03]=6)
declare -A ALPHA=([q5a06]=0.6 [q6a05]=0.5 [q8a08]=0.8 [d5a09]=0.9 [d6a03]=0.3)
declare -A LOSS=([q5a06]=0.45 [q6a05]=0.42 [q8a08]=0.4 [d5a09]=0.45 [d6a03]=0.42)
# The rule (opt-in) and the defaults (conf/profile/default.yaml), each pinned.
RULE=(profile.explore.group_sizes=by_cost profile.explore.value_floor=true)
OLD=(profile.explore.group_sizes=random profile.explore.value_floor=false)

NAMES=("${@:2}")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(q5a06 q6a05 q8a08)
for name in "${NAMES[@]}"; do
  [ -n "${CLIENTS[$name]:-}" ] || { echo "exploration_few: unknown setting $name" >&2; exit 2; }
  if [ "${name:0:1}" = d ] && [ "$F" -ge 1000 ]; then
    echo "exploration_few: $name is a development setting (FIRST < 1000 only)" >&2; exit 2
  fi
done
FOLDERS=()
LABELS=()
for name in "${NAMES[@]}"; do
  over=(num_clients="${CLIENTS[$name]}" partition.alpha="${ALPHA[$name]}"
        target.loss="${LOSS[$name]}" target.prob=0.9)
  mkdir -p "$S/$name-rule" "$S/$name-old"
  multirun "$S/$name-rule/depl" "$S/$name-rule/cache" "$S/$name.rule.log" "range($F,$((F + N)))" \
      method=depl "${over[@]}" tracking.enabled=true "${RULE[@]}"
  multirun "$S/$name-old/depl" "$S/$name-old/cache" "$S/$name.old.log" "range($F,$((F + N)))" \
      method=depl "${over[@]}" tracking.enabled=true "${OLD[@]}"
  multirun "$S/$name/full" "$S/$name/cache-full" "$S/$name.full.log" "range($F,$((F + NF)))" \
      "${over[@]}" method=full tracking.enabled=false "${RULE[@]}"
  for arm in rule old; do
    report_arm "$S" "$name-$arm" "$name"
    FOLDERS+=("$name-$arm")
    LABELS+=("$name-$arm=$S/$name-$arm/depl")
  done
done
R=${RESULTS:-benchmarks/results/exploration_few}
mkdir -p "$R"
"$PY" benchmarks/exploration_energy.py "$S" --out "$R/summary"
"$PY" benchmarks/exploration_few.py "${LABELS[@]}" --out "$R/rounds"
copy_reports "$S" "$R" "${FOLDERS[@]}"
