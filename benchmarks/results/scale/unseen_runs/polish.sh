#!/bin/bash
ROOT=${ROOT:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}; PY=${PY:-$ROOT/.venv/bin/python}; RAY=${RAY:-$(dirname "$PY")/ray}
# A newcomer's Ray misconfigurations, from docs/SCALE.md: first on a hand-started two-node loopback cluster
# (head + second node, 1 CPU each, own temp dir), then without any cluster. One job at a time, 90 s limit
# each (more than 60 s counts as a hang). Output in outputs/unseen/polish/${RUN:-r1}/summary.txt.
cd $ROOT
export PYTHONPATH=$PWD RAY_USAGE_STATS_ENABLED=0
unset RAY_ADDRESS
T=/tmp/rpw; P=${P:-6541}; D=outputs/unseen/polish/${RUN:-r1}
mkdir -p $D
SHORT="num_clients=4 profile.source=inprocess profile.seeds=1 profile.rounds=3 profile.switch_at=[2] target.loss=2.2 target.prob=0.6 target.max_rounds=2 tracking.enabled=false simulation.client_num_cpus=0.5"
job() { name=$1; shift; s=$(date +%s.%N)
  timeout -s INT ${TO:-90} nice -n 10 /usr/bin/time -v -o $D/$name.time $PY -m depl_fl.main "$@" hydra.run.dir=$D/$name profile.cache_dir=$D/cache > $D/$name.out 2> $D/$name.err
  rc=$?; e=$(date +%s.%N)
  echo "$name rc=$rc wall=$(echo "$e - $s"|bc) tracebacks=$(grep -c Traceback $D/$name.err) stderr_lines=$(grep -c . $D/$name.err) :: $* :: $(grep -E '^depl-fl|joining' $D/$name.err $D/$name.out | tail -2 | cut -d: -f2- | cut -c1-500)" >> $D/summary.txt; }
actors() { $PY benchmarks/results/scale/unseen_runs/actors.py 127.0.0.1:$P >> $D/summary.txt 2>$D/actors.err; }
setsid $RAY start --head --port=$P --num-cpus=1 --temp-dir=$T --include-dashboard=false --block > $D/head.log 2>&1 & echo $! > $D/head.pid
sleep 12
setsid $RAY start --address=127.0.0.1:$P --num-cpus=1 --block > $D/worker.log 2>&1 & echo $! > $D/worker.pid
sleep 12
echo "raylets: $(pgrep -c raylet)" >> $D/summary.txt
job auto_cluster $SHORT simulation.ray_address=auto
actors
# a job's own Ray (ray.init without an address) beside the cluster
$PY -c 'import ray,time; ray.init(address="local", num_cpus=1, include_dashboard=False); print("up", flush=True); time.sleep(200)' > $D/own_ray.log 2>&1 & echo $! > $D/own_ray.pid
sleep 15
echo "raylets: $(pgrep -c raylet)" >> $D/summary.txt
job auto_beside_own $SHORT simulation.ray_address=auto seed=1
actors
job wrong_port $SHORT simulation.ray_address=127.0.0.1:$((P+1))
kill -TERM $(cat $D/own_ray.pid); sleep 5
job ray_client_url $SHORT simulation.ray_address=ray://127.0.0.1:10001
job unresolved_host $SHORT simulation.ray_address=no-such-head.invalid:6379
job port_out_of_range $SHORT simulation.ray_address=127.0.0.1:70000
for f in $D/worker.pid $D/head.pid; do kill -TERM -- -$(cat $f) 2>/dev/null; done
sleep 10; echo "after stopping the cluster: raylets $(pgrep -c raylet)" >> $D/summary.txt
# no cluster any more: the job starts its own Ray (or refuses)
job auto_nothing $SHORT simulation.ray_address=auto
job cpus_zero $SHORT simulation.client_num_cpus=0
job cpus_negative $SHORT simulation.client_num_cpus=-1
job cpus_above_machine $SHORT simulation.client_num_cpus=8
job gpu_without_gpu $SHORT simulation.client_num_gpus=1
job ray_cpus_zero $SHORT simulation.ray_num_cpus=0
job cpus_tiny $SHORT simulation.ray_num_cpus=1 simulation.client_num_cpus=0.1
echo "left: raylets $(pgrep -c raylet) gcs $(pgrep -c gcs_server)" >> $D/summary.txt
