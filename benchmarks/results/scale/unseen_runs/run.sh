#!/bin/bash
ROOT=${ROOT:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}; PY=${PY:-$ROOT/.venv/bin/python}; RAY=${RAY:-$(dirname "$PY")/ray}
# usage: run.sh NAME TIMEOUT_S OVERRIDES...   (one job; time -v + wall + exit into outputs/unseen/NAME/)
name=$1; shift; to=$1; shift
d=$ROOT/outputs/unseen/$name
mkdir -p $d
cd $ROOT
export PYTHONPATH=$PWD
start=$(date +%s.%N)
timeout -s INT $to nice -n 10 /usr/bin/time -v -o $d/time.txt $PY -m depl_fl.main "$@" profile.cache_dir=$d/cache hydra.run.dir=$d > $d/stdout.txt 2> $d/stderr.txt
rc=$?
end=$(date +%s.%N)
echo "$rc $(echo "$end - $start" | bc)" > $d/exit_wall.txt
echo "$*" > $d/cmd.txt
