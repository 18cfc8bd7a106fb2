#!/bin/bash
ROOT=${ROOT:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}; PY=${PY:-$ROOT/.venv/bin/python}; RAY=${RAY:-$(dirname "$PY")/ray}
# The same checks on the code before (an export: git archive main | tar -x -C outputs/unseen/main_code),
# run from its own folder so that `python -m` imports it.
W=$ROOT; C=$W/outputs/unseen/main_code; D=$W/outputs/unseen/cluster/${RUN:-r1}; P=${P:-6531}
cd $C; export PYTHONPATH=$C RAY_USAGE_STATS_ENABLED=0 PYTHONDONTWRITEBYTECODE=1

SHORT="num_clients=4 profile.source=inprocess profile.seeds=1 profile.rounds=3 profile.switch_at=[2] target.loss=2.2 target.prob=0.6 target.max_rounds=2 tracking.enabled=false simulation.client_num_cpus=0.5"
job() { name=$1; shift; s=$(date +%s.%N)
  timeout -s INT ${TO:-400} nice -n 10 /usr/bin/time -v -o $D/$name.time $PY -m depl_fl.main "$@" hydra.run.dir=$D/$name profile.cache_dir=$D/cache > $D/$name.out 2> $D/$name.err
  rc=$?; e=$(date +%s.%N)
  echo "$name rc=$rc wall=$(echo "$e - $s"|bc) :: $* :: $(grep -E '^depl-fl|Error' $D/$name.err | tail -2 | cut -c1-400)" >> $D/summary.txt; }
TO=120 job main_bigclient $SHORT simulation.ray_address=127.0.0.1:$P simulation.client_num_cpus=2
RAY_ADDRESS=127.0.0.1:$P TO=200 job main_envaddr_default ${SHORT/simulation.client_num_cpus=0.5/} simulation.ray_num_cpus=2
RAY_ADDRESS=127.0.0.1:$P TO=200 job main_envaddr_plain ${SHORT/simulation.client_num_cpus=0.5/}
$PY $W/benchmarks/results/scale/unseen_runs/actors.py 127.0.0.1:$P >> $D/summary.txt 2>>$D/actors.err
$PY -c 'import ray,time; ray.init(num_cpus=1, include_dashboard=False); print("up", flush=True); time.sleep(200)' > $D/other_ray2.log 2>&1 & echo $! > $D/other_ray2.pid
sleep 15
echo "gcs processes: $(pgrep -c gcs_server)" >> $D/summary.txt
TO=150 job main_auto_two $SHORT simulation.ray_address=auto
$PY $W/benchmarks/results/scale/unseen_runs/actors.py 127.0.0.1:$P >> $D/summary.txt 2>>$D/actors.err
kill -TERM $(cat $D/other_ray2.pid)
