#!/usr/bin/env bash
# The default job (tracking on, its frugal exploration: cheapest clusters, value stop, rate window 0.5)
# with and without another federation's profile as its prior (profile.prior), DepL's total energy
# (exploration + training) against full's, on settings fixed before any result (digits, in-process):
#   p5a05:  5 clients, Dirichlet alpha 0.5, L* 0.45
#   p9a09:  9 clients, alpha 0.9, L* 0.40
#   p14a03: 14 clients, alpha 0.3, L* 0.45
# and, with profile.explore.prior_regime (the prior's trajectory feeds the plateau guard and the learning
# curve's rate, depl_fl/orchestration/prior_regime.py), a development setting (FIRST < 1000) and three
# more settings fixed before any result of the rule:
#   d7a06:  7 clients, alpha 0.6, L* 0.45 (development only)
#   p6a07:  6 clients, alpha 0.7, L* 0.45
#   p11a04: 11 clients, alpha 0.4, L* 0.42
#   p12a06: 12 clients, alpha 0.6, L* 0.40
# PRIOR_REGIME=false runs the prior arm without it (as the first three settings' figures were made).
# The prior's source, by one rule fixed with the settings: the default job (method=depl, tracking on,
# the default profile, pi 0.9, the setting's alpha and L*) on another federation of the same network and
# dataset, with 3 more clients than the setting and seed FIRST-1 (other clients, other partitions), made
# once per setting under OUT/prior-sources/<s>; its energy is reported apart (prior-sources.md), never
# added to the arms' totals.
# Arms per setting and target probability pi in PIS (default 0.9; T is empty at pi 0.9, else -pi<pi>;
# one Hydra multirun each, nice -n 10, one at a time):
#   OUT/<s>T-default/depl  the default job: method=depl, tracking on, the default profile (auto: frugal),
#                          seeds FIRST..FIRST+SEEDS-1
#   OUT/<s>T-prior/depl    the same with profile.prior=OUT/prior-sources/<s>/results.json, the same seeds
#   OUT/<s>/full           plain FedAvg (tracking off, its own thorough exploration) at pi 0.9, FULL_SEEDS
#                          seeds from FIRST; copied into every arm's folder, so every arm and pi is
#                          reported against the same full jobs
#   OUT/<s>T-static-default/depl, OUT/<s>T-static-prior/depl
#                          the default and prior arms' commands with tracking.enabled=false (static plans:
#                          no re-plan corrects the exploration; without tracking profile.explore's auto
#                          options resolve to the thorough exploration), run only when ARMS names them
#   OUT/<s>T-static-frugal-default/depl, OUT/<s>T-static-frugal-prior/depl
#                          the static arms with profile=frugal (the frugal exploration whatever tracking
#                          says: cheapest clusters, value stop, rate window 0.5)
# ARMS (default "default prior") picks the arms, in that order, e.g. ARMS="static-default static-prior".
# Each arm has its own profile cache folder.
#   SEEDS=10 FULL_SEEDS=5 FIRST=1100 [PIS="0.9 0.95"] [ARMS="default prior static-default ..."] \
#       bash benchmarks/exploration_prior.sh OUT [SETTING ...]
# then OUT/<folder>/report.{md,json} (depl-fl report), RESULTS/summary.{md,json}
# (benchmarks/exploration_energy.py), RESULTS/prior-sources.md (benchmarks/prior_sources.py: what the
# sources cost), RESULTS/prior-effect.md (benchmarks/prior_effect.py: the seeds whose job the prior
# changed) and RESULTS/report-<folder>.md; RESULTS defaults to benchmarks/results/exploration_prior.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
mkdir -p "${1:-multirun/exploration-prior}"
S=$(cd "${1:-multirun/exploration-prior}" && pwd)
N=${SEEDS:-10}
NF=${FULL_SEEDS:-5}
F=${FIRST:-1100}
declare -A CLIENTS=([p5a05]=5 [p9a09]=9 [p14a03]=14 [d7a06]=7 [p6a07]=6 [p11a04]=11 [p12a06]=12)
declare -A ALPHA=([p5a05]=0.5 [p9a09]=0.9 [p14a03]=0.3 [d7a06]=0.6 [p6a07]=0.7 [p11a04]=0.4 [p12a06]=0.6)
declare -A LOSS=([p5a05]=0.45 [p9a09]=0.4 [p14a03]=0.45 [d7a06]=0.45 [p6a07]=0.45 [p11a04]=0.42 [p12a06]=0.4)
# shellcheck source=benchmarks/sweep_common.sh
source benchmarks/sweep_common.sh
# shellcheck disable=SC2206
PI_LIST=(${PIS:-0.9})
# shellcheck disable=SC2206
ARM_LIST=(${ARMS:-default prior})
for arm in "${ARM_LIST[@]}"; do
  case $arm in
    default | prior | static-default | static-prior | static-frugal-default | static-frugal-prior) ;;
    *) echo "exploration_prior: unknown arm $arm (default, prior, static-default, static-prior," \
         "static-frugal-default, static-frugal-prior)" >&2; exit 2 ;;
  esac
done

NAMES=("${@:2}")
[ ${#NAMES[@]} -eq 0 ] && NAMES=(p5a05 p9a09 p14a03)
for name in "${NAMES[@]}"; do
  [ -n "${CLIENTS[$name]:-}" ] || { echo "exploration_prior: unknown setting $name" >&2; exit 2; }
done
FOLDERS=()
for name in "${NAMES[@]}"; do
  task=(partition.alpha="${ALPHA[$name]}" target.loss="${LOSS[$name]}")
  over=(num_clients="${CLIENTS[$name]}" "${task[@]}")
  source_dir="$S/prior-sources/$name"
  if [ ! -f "$source_dir/results.json" ]; then
    nice -n 10 "$PY" -m depl_fl.main "${COMMON[@]}" method=depl num_clients=$((CLIENTS[$name] + 3)) \
        "${task[@]}" target.prob=0.9 tracking.enabled=true "seed=$((F - 1))" \
        profile.cache_dir="$S/prior-sources/cache-$name" hydra.run.dir="$source_dir" \
        > "$S/$name.prior-source.log" 2>&1 || true
  fi
  [ -f "$source_dir/results.json" ] || { echo "exploration_prior: no prior source for $name" >&2; exit 1; }
  seeds="range($F,$((F + N)))"
  done_folders=()
  for pi in "${PI_LIST[@]}"; do
    tag=$([ "$pi" = 0.9 ] && echo "" || echo "-pi$pi")
    for arm in "${ARM_LIST[@]}"; do
      tracking=$([ "${arm#static-}" = "$arm" ] && echo true || echo false)
      extra=()
      [ "${arm#static-frugal-}" = "$arm" ] || extra=(profile=frugal)
      [ "${arm%prior}" = "$arm" ] || extra+=(profile.prior="$source_dir/results.json" \
          profile.explore.prior_regime="${PRIOR_REGIME:-true}")
      mkdir -p "$S/$name$tag-$arm"
      multirun "$S/$name$tag-$arm/depl" "$S/$name$tag-$arm/cache" "$S/$name$tag.$arm.log" "$seeds" \
          method=depl "${over[@]}" target.prob="$pi" tracking.enabled="$tracking" ${extra[@]+"${extra[@]}"}
      done_folders+=("$name$tag-$arm")
    done
  done
  multirun "$S/$name/full" "$S/$name/cache-full" "$S/$name.full.log" "range($F,$((F + NF)))" method=full \
      "${over[@]}" target.prob=0.9 tracking.enabled=false
  for folder in "${done_folders[@]}"; do
    report_arm "$S" "$folder" "$name"
    FOLDERS+=("$folder")
  done
done
R=${RESULTS:-benchmarks/results/exploration_prior}
mkdir -p "$R"
"$PY" benchmarks/exploration_energy.py "$S" --out "$R/summary"
"$PY" benchmarks/prior_sources.py "$S/prior-sources" --out "$R/prior-sources.md"
"$PY" benchmarks/prior_effect.py "$S" --out "$R/prior-effect.md"
copy_reports "$S" "$R" "${FOLDERS[@]}"
