# Shared pieces of the exploration sweeps (sourced by benchmarks/exploration_prior.sh and
# benchmarks/exploration_few.sh, never run on its own). Needs PY (the Python interpreter) set and the
# working directory at the repository root.
# shellcheck shell=bash

# Overrides every job of the sweeps takes: in-process simulation, no plots, and the exploration static
# plans and full's jobs explored when these sweeps' figures were measured (every client; the default
# without tracking explores on the cheapest clusters; tracking jobs are not affected).
COMMON=(simulation=inprocess output.plot=false profile.explore.without_tracking=thorough)

# multirun FOLDER CACHE LOG SEEDS OVERRIDES... (benchmarks/lib/multirun.sh)
# shellcheck source=benchmarks/lib/multirun.sh
source benchmarks/lib/multirun.sh

# copy_reports SWEEP RESULTS FOLDER... (benchmarks/lib/copy_reports.sh)
# shellcheck source=benchmarks/lib/copy_reports.sh
source benchmarks/lib/copy_reports.sh

# report_arm SWEEP FOLDER SETTING: copy SWEEP/SETTING/full (the setting's full jobs) into SWEEP/FOLDER
# and write SWEEP/FOLDER/report.{md,json} (depl-fl report).
report_arm() {
  local sweep=$1 folder=$2 setting=$3
  rm -rf "${sweep:?}/$folder/full" && cp -r "$sweep/$setting/full" "$sweep/$folder/full"
  "$PY" -m depl_fl.cli report "$sweep/$folder" --out "$sweep/$folder" > /dev/null
}
