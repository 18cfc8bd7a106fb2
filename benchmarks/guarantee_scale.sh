#!/usr/bin/env bash
# The guarantee at 1,000 synthetic clients (docs/SCALE.md): dataset=synthetic model=synthetic_mlp,
# the setting of benchmarks/scale_setting.py's learning curves (SETTING below), DepL static
# (tracking.enabled=false) and DepL with tracking, SEEDS seeds per pi, in-process backend.
# Every job runs (and pays for) its own exploration: one profile cache per arm and pi
# (a job that finds its federation's profile cached skips the exploration and starts from a
# fresh model, so two jobs cannot share one exploration).
# One multirun at a time, seed by seed (each seed's static and tracking jobs at every pi of the
# pass before the next seed), so a sweep cut short holds the same seeds in every cell:
#   pass 1: FIRST_PROBS (default 0.9); pass 2: THEN_PROBS (default 0.8,0.95; empty: none).
#   nice -n 10 bash benchmarks/guarantee_scale.sh [SWEEP_DIR]
# REGIME: the plan-regime overrides (default: the digits CNN's constants and the exploration's rate as
# measured, as the committed sweep in benchmarks/results/guarantee_scale/ ran; REGIME= : the synthetic
# MLP's own, conf/model/synthetic_mlp.yaml, with the rate read at r = 1, profile.plan_regime.rate_at_full).
# The sweeps before rate_at_full read the max_clients exploration's rate as measured (rate_at_full=cheapest).
# The sweep with the network's constants of then (the capped fit, seeds 20-39, pi 0.9 first):
#   REGIME="++model.regime={power:1.4064,floor:0.1845,rate_exponent:0.5305,noise_exponent:0.06,oscillation:0.0026,judged_error_factor:0.6718,oscillation_dof:3.1033} profile.plan_regime.rate_at_full=cheapest" \
#   SEEDS="range(20,40)" OUT=benchmarks/results/guarantee_scale/own_constants \
#   nice -n 10 bash benchmarks/guarantee_scale.sh multirun/guarantee_scale_own
# The sweep with the constants of the converged fit (benchmarks/results/plan_regime/synthetic_mlp/converged/,
# not the config's), seeds 40-59, two halves in parallel, then the reports over both:
#   R="++model.regime={power:1.001,floor:0.3755,rate_exponent:0.4092,noise_exponent:0.55,oscillation:0.0001,judged_error_factor:0.556,oscillation_dof:3.4} profile.plan_regime.rate_at_full=cheapest"
#   export OUT=benchmarks/results/guarantee_scale/converged_fit
#   REGIME="$R" SEEDS="range(40,50)" nice -n 10 bash benchmarks/guarantee_scale.sh multirun/guarantee_scale_converged/s40 &
#   REGIME="$R" SEEDS="range(50,60)" nice -n 10 bash benchmarks/guarantee_scale.sh multirun/guarantee_scale_converged/s50
#   wait; REPORT_ONLY=1 bash benchmarks/guarantee_scale.sh multirun/guarantee_scale_converged
# The sweep with the network's constants of now, the rate read at r = 1 (seeds 60-79):
#   REGIME= SEEDS="range(60,80)" OUT=benchmarks/results/guarantee_scale/rate_at_full \
#   nice -n 10 bash benchmarks/guarantee_scale.sh multirun/guarantee_scale_rate
#   REPORT_ONLY=1 bash benchmarks/guarantee_scale.sh [SWEEP_DIR]    # the reports of what ran
# Writes benchmarks/results/guarantee_scale/: report.{md,json} (depl-fl report), cells.md
# (benchmarks/guarantee_cells.py), pit.md (benchmarks/plan_pit.py --pooled over the static jobs),
# replan.{md,json} (benchmarks/regime_replan.py: every static job's plan re-made, and the training
# energy method=full plans on the same profile) and, with PERTURB="NAME=VALUE ...", replan-perturbed.{md,json}
# (the static plans re-made with those plan-regime constants, scored on the jobs' own rounds).
set -euo pipefail
cd "$(dirname "$0")/.."
S=${1:-multirun/guarantee_scale}
SEEDS=${SEEDS:-"range(0,20)"}
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-benchmarks/results/guarantee_scale}
# profile=thorough: the exploration these figures were measured with (the default profile explores
# frugally where tracking is on: conf/profile/default.yaml).
setting=(simulation=inprocess dataset=synthetic model=synthetic_mlp num_clients=1000 profile=thorough
         dataset.iid=true dataset.log_sigma=1.0 train.lr=0.2 aggregation.norm_factor=30
         profile.explore.max_clients=100 target.loss=0.5 output.plot=false
         profile.plan_regime.anchor=last profile.plan_regime.explored_oscillation=null)
DIGITS="++model.regime={power:1.080,floor:0.145,rate_exponent:0.310,noise_exponent:0.550,oscillation:0.160,\
judged_error_factor:0.754,oscillation_dof:3.40} profile.plan_regime.rate_at_full=cheapest"
read -r -a regime <<< "${REGIME-$DIGITS}"
cache="profile.cache_dir=$S/cache/t\${tracking.enabled}-p\${target.prob}"
# A job folder is named by its number, seed, arm and pi: named by its overrides (Hydra's default) a
# name is longer than a file name may be (its results.json records the overrides).
short="hydra.sweep.subdir=\${hydra.job.num}_seed\${seed}_t\${tracking.enabled}_p\${target.prob}"
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
pass() {  # pass NAME PROBS: static and tracking at PROBS, seed by seed
    # A multirun with failed jobs (no dependable plan: recorded in their results.json, counted by the
    # report) exits non-zero; the next pass runs anyway.
    "$PY" -m depl_fl.main -m "${setting[@]}" ${regime[@]+"${regime[@]}"} method=depl "seed=$SEEDS" "target.prob=$2" \
        tracking.enabled=false,true "$cache" "hydra.sweep.dir=$S/$1" "$short" > "$S/$1.log" 2>&1 || true
}
if [ "${REPORT_ONLY:-0}" != 1 ]; then
    mkdir -p "$S"
    pass first "${FIRST_PROBS:-0.9}"
    if [ -n "${THEN_PROBS-0.8,0.95}" ]; then pass then "${THEN_PROBS-0.8,0.95}"; fi
fi
mkdir -p "$OUT"
"$PY" -m depl_fl.cli report "$S" --out "$OUT"
"$PY" benchmarks/guarantee_cells.py "scale=$OUT/report.json" --out "$OUT/cells.md"
"$PY" benchmarks/plan_pit.py --pooled "$S" --out "$OUT/pit.md"
"$PY" benchmarks/regime_replan.py "$S" --out "$OUT/replan.md" --json "$OUT/replan.json"
if [ -n "${PERTURB:-}" ]; then
    sets=()
    for change in $PERTURB; do sets+=(--set "$change"); done
    "$PY" benchmarks/regime_replan.py "$S" "${sets[@]}" --out "$OUT/replan-perturbed.md" \
        --json "$OUT/replan-perturbed.json"
fi
