#!/bin/bash
ROOT=${ROOT:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}; PY=${PY:-$ROOT/.venv/bin/python}; RAY=${RAY:-$(dirname "$PY")/ray}
# Stop only this cluster: the two `ray start --block` process groups, then any process left on its temp dir.
D=outputs/unseen/cluster/${RUN:-r1}; T=/tmp/rs3w
cd $ROOT
for f in $D/worker.pid $D/head.pid; do pid=$(cat $f); kill -TERM -- -$pid 2>/dev/null; done
sleep 8
left=$(pgrep -f -- "$T" | tr '\n' ' '); echo "left on $T: $left"
for pid in $left; do kill -TERM $pid 2>/dev/null; done
sleep 3; echo "still: $(pgrep -f -- "$T" | tr '\n' ' ')"
