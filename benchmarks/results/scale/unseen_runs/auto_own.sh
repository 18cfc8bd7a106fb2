#!/bin/bash
ROOT=${ROOT:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}; PY=${PY:-$ROOT/.venv/bin/python}
# Two jobs on one machine, no `ray start` cluster: the first starts its own Ray (no ray_address) and runs
# longer; once its Ray is up, a second job asks for simulation.ray_address=auto.
# CODE: the checkout whose code runs (default this one); output in outputs/unseen/auto_own/${RUN:-r1}/.
C=${CODE:-$ROOT}; D=$ROOT/outputs/unseen/auto_own/${RUN:-r1}; mkdir -p $D
cd $C; export PYTHONPATH=$C RAY_USAGE_STATS_ENABLED=0 PYTHONDONTWRITEBYTECODE=1
SHORT="num_clients=4 profile.source=inprocess profile.seeds=1 profile.rounds=3 profile.switch_at=[2] target.loss=2.2 target.prob=0.6 target.max_rounds=2 tracking.enabled=false simulation.client_num_cpus=0.5"
LONG="num_clients=4 target.loss=2.2 target.prob=0.6 target.max_rounds=60 tracking.enabled=false simulation.client_num_cpus=0.5 simulation.ray_num_cpus=1"
s0=$(date +%s.%N)
timeout -s INT 400 nice -n 10 $PY -m depl_fl.main $LONG hydra.run.dir=$D/first profile.cache_dir=$D/cache_first > $D/first.out 2> $D/first.err &
first=$!
gcs() { for p in $(pgrep -P $first); do pgrep -P $p -f gcs_server; done; }  # timeout -> python -> gcs_server
until [ -n "$(gcs)" ] || ! kill -0 $first 2>/dev/null; do sleep 1; done
echo "first job's Ray up after $(echo "$(date +%s.%N) - $s0" | bc) s: its GCS $(tr '\0' ' ' < /proc/$(gcs)/cmdline | grep -o 'gcs_server_port=[0-9]*')" >> $D/summary.txt
s=$(date +%s.%N)
timeout -s INT 300 nice -n 10 $PY -m depl_fl.main $SHORT simulation.ray_address=auto hydra.run.dir=$D/second profile.cache_dir=$D/cache_second > $D/second.out 2> $D/second.err
echo "second rc=$? wall=$(echo "$(date +%s.%N) - $s" | bc) :: $(grep -E '^depl-fl|Connecting to existing' $D/second.err $D/second.out | tail -2 | cut -c1-400)" >> $D/summary.txt
wait $first
echo "first rc=$? wall=$(echo "$(date +%s.%N) - $s0" | bc) :: $(grep -E '^depl-fl' $D/first.err | tail -1 | cut -c1-300)" >> $D/summary.txt
