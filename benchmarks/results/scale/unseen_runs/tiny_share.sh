#!/bin/bash
ROOT=${ROOT:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}; PY=${PY:-$ROOT/.venv/bin/python}
# usage: tiny_share.sh CLIENT_NUM_CPUS [RAY_NUM_CPUS]: the short job on its own Ray with a tiny CPU share per
# client (Flower builds RAY_NUM_CPUS / CLIENT_NUM_CPUS ClientApp actors), 90 s limit; every 5 s the summed RSS
# of the Ray worker processes on the machine (run it with no other Ray job here). Output in outputs/unseen/polish/${RUN:-r1}/tiny_SHARE.*
cd $ROOT; export PYTHONPATH=$PWD RAY_USAGE_STATS_ENABLED=0; unset RAY_ADDRESS
share=$1; cpus=${2:-1}; D=outputs/unseen/polish/${RUN:-r1}; mkdir -p $D; n=tiny_$share
SHORT="num_clients=4 profile.source=inprocess profile.seeds=1 profile.rounds=3 profile.switch_at=[2] target.loss=2.2 target.prob=0.6 target.max_rounds=2 tracking.enabled=false"
s=$(date +%s.%N)
timeout -s INT 90 nice -n 10 $PY -m depl_fl.main $SHORT simulation.ray_num_cpus=$cpus simulation.client_num_cpus=$share hydra.run.dir=$D/$n profile.cache_dir=$D/cache > $D/$n.out 2> $D/$n.err &
job=$!
while kill -0 $job 2>/dev/null; do
  w=$(ps -eo rss=,args= | grep -E '^ *[0-9]+ (ray::|.*default_worker\.py)')  # workers retitle themselves ray::...
  echo "$(echo "$(date +%s.%N) - $s" | bc | cut -c1-5) s: workers $(echo "$w" | grep -c .) rss_mib $(echo "$w" | awk '{s+=$1} END {print int(s/1024)}') actors $(echo "$w" | grep -c ClientAppActor)" >> $D/$n.mem
  sleep 5
done
wait $job; rc=$?
echo "$n rc=$rc wall=$(echo "$(date +%s.%N) - $s"|bc) tracebacks=$(grep -c Traceback $D/$n.err) peak_workers=$(awk '{print $4}' $D/$n.mem | sort -n | tail -1) peak_worker_rss_mib=$(awk '{print $6}' $D/$n.mem | sort -n | tail -1) :: $(grep -E '^depl-fl' $D/$n.err | tail -1 | cut -c1-300)" >> $D/summary.txt
