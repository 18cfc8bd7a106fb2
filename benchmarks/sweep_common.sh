# Shared pieces of the exploration sweeps (sourced by benchmarks/exploration_prior.sh and
# benchmarks/exploration_few.sh, never run on its own). Needs PY (the Python interpreter) set and the
# working directory at the repository root.
# shellcheck shell=bash

# Overrides every job of the sweeps takes: in-process simulation, no plots.
COMMON=(simulation=inprocess output.plot=false)

# multirun FOLDER CACHE LOG SEEDS OVERRIDES...: one Hydra multirun over SEEDS (nice -n 10), its sweep in
# FOLDER, its profile cache in CACHE, its output in LOG; skipped when FOLDER already holds a result.
multirun() {
  local dir=$1 cache=$2 log=$3 seeds=$4
  shift 4
  [ -n "$(find "$dir" -name results.json 2>/dev/null | head -1)" ] && return 0
  nice -n 10 "$PY" -m depl_fl.main -m "${COMMON[@]}" "$@" "seed=$seeds" profile.cache_dir="$cache" \
      hydra.sweep.dir="$dir" > "$log" 2>&1 || true
}

# report_arm SWEEP FOLDER SETTING: copy SWEEP/SETTING/full (the setting's full jobs) into SWEEP/FOLDER
# and write SWEEP/FOLDER/report.{md,json} (depl-fl report).
report_arm() {
  local sweep=$1 folder=$2 setting=$3
  rm -rf "${sweep:?}/$folder/full" && cp -r "$sweep/$setting/full" "$sweep/$folder/full"
  "$PY" -m depl_fl.cli report "$sweep/$folder" --out "$sweep/$folder" > /dev/null
}
