#!/bin/bash
ROOT=${ROOT:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}; PY=${PY:-$ROOT/.venv/bin/python}; RAY=${RAY:-$(dirname "$PY")/ray}
# A Ray cluster started by hand (head + second node, 1 CPU each, own temp dir), jobs on it, then stopped.
cd $ROOT
export PYTHONPATH=$PWD RAY_USAGE_STATS_ENABLED=0

T=/tmp/rs3w; P=${P:-6531}; D=outputs/unseen/cluster/${RUN:-r1}
mkdir -p $D
SHORT="num_clients=4 profile.source=inprocess profile.seeds=1 profile.rounds=3 profile.switch_at=[2] target.loss=2.2 target.prob=0.6 target.max_rounds=2 tracking.enabled=false simulation.client_num_cpus=0.5"
job() { name=$1; shift; s=$(date +%s.%N)
  timeout -s INT ${TO:-400} nice -n 10 /usr/bin/time -v -o $D/$name.time $PY -m depl_fl.main "$@" hydra.run.dir=$D/$name profile.cache_dir=$D/cache > $D/$name.out 2> $D/$name.err
  rc=$?; e=$(date +%s.%N)
  echo "$name rc=$rc wall=$(echo "$e - $s"|bc) rss_kb=$(grep Maximum $D/$name.time | awk '{print $NF}') :: $* :: $(grep '^depl-fl' $D/$name.err | tail -1 | cut -c1-400)" >> $D/summary.txt; }
actors() { $PY benchmarks/results/scale/unseen_runs/actors.py 127.0.0.1:$P >> $D/summary.txt 2>$D/actors.err; }
setsid $RAY start --head --port=$P --num-cpus=1 --temp-dir=$T --block > $D/head.log 2>&1 & echo $! > $D/head.pid
sleep 12
setsid $RAY start --address=127.0.0.1:$P --num-cpus=1 --block > $D/worker.log 2>&1 & echo $! > $D/worker.pid
sleep 12
$RAY status --address 127.0.0.1:$P > $D/status_before.txt 2>&1
echo "gcs processes: $(pgrep -c gcs_server)" >> $D/summary.txt
job auto1 $SHORT simulation.ray_address=auto
job hostport1 $SHORT simulation.ray_address=127.0.0.1:$P
actors
job hostport2 $SHORT simulation.ray_address=127.0.0.1:$P seed=1
actors
s=$(date +%s.%N); nice -n 10 $PY -m depl_fl.main -m $SHORT simulation.ray_address=127.0.0.1:$P seed=0,1 hydra.sweep.dir=$D/multi profile.cache_dir=$D/cache > $D/multi.out 2> $D/multi.err
echo "multirun rc=$? wall=$(echo "$(date +%s.%N) - $s"|bc) :: $(grep '^depl-fl' $D/multi.err | tail -1)" >> $D/summary.txt
actors
job bigclient $SHORT simulation.ray_address=127.0.0.1:$P simulation.client_num_cpus=2
RAY_ADDRESS=127.0.0.1:$P job envaddr_default num_clients=4 profile.source=inprocess profile.seeds=1 profile.rounds=3 profile.switch_at=[2] target.loss=2.2 target.prob=0.6 target.max_rounds=2 tracking.enabled=false simulation.ray_num_cpus=2
# a second Ray instance on the machine (a job's own ray.init), beside the cluster: what does auto join?
$PY -c 'import ray,time; ray.init(num_cpus=1, include_dashboard=False); print("up", flush=True); time.sleep(300)' > $D/other_ray.log 2>&1 & echo $! > $D/other_ray.pid
sleep 15
echo "gcs processes: $(pgrep -c gcs_server)" >> $D/summary.txt
TO=120 job auto_two $SHORT simulation.ray_address=auto
kill -TERM $(cat $D/other_ray.pid); sleep 5
job wrongport $SHORT simulation.ray_address=127.0.0.1:$((P+1))
job inproc_addr $SHORT simulation=inprocess simulation.ray_address=127.0.0.1:$P
$RAY status --address 127.0.0.1:$P > $D/status_after.txt 2>&1
echo "status after rc=$?" >> $D/summary.txt
