# Sourced by the exploration benchmarks (exploration_frugal.sh, exploration_static.sh, and through
# sweep_common.sh exploration_prior.sh and exploration_few.sh).
# shellcheck shell=bash
#
# copy_reports SWEEP RESULTS FOLDER...
#   Copies each SWEEP/FOLDER/report.md that exists to RESULTS/report-FOLDER.md (a folder whose jobs
#   all failed has none: it is passed over).
copy_reports() {
  local sweep=$1 results=$2 folder
  shift 2
  for folder in "$@"; do
    if [ -f "$sweep/$folder/report.md" ]; then cp "$sweep/$folder/report.md" "$results/report-$folder.md"; fi
  done
}
