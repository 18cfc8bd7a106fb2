# Sourced by the exploration benchmarks (exploration_frugal.sh, exploration_cheap.sh, and through
# sweep_common.sh exploration_prior.sh and exploration_few.sh).
#
# multirun FOLDER CACHE LOG SEEDS OVERRIDES...
#   One Hydra multirun of depl_fl.main (seeds SEEDS, e.g. "range(900,910)") into FOLDER, with its own
#   profile cache CACHE and its output in LOG; skipped when FOLDER already holds a results.json, so a
#   re-run of the script resumes where it stopped. A failed multirun does not stop the script (its
#   jobs' results.json say why). Reads the caller's PY (the interpreter), COMMON (an array of overrides
#   every run shares) and MULTIRUN_NICE (niceness, default 10).
multirun() {
  local dir=$1 cache=$2 log=$3 seeds=$4
  shift 4
  [ -n "$(find "$dir" -name results.json 2>/dev/null | head -1)" ] && return 0
  nice -n "${MULTIRUN_NICE:-10}" "$PY" -m depl_fl.main -m "${COMMON[@]}" "$@" "seed=$seeds" \
      profile.cache_dir="$cache" hydra.sweep.dir="$dir" > "$log" 2>&1 || true
}
