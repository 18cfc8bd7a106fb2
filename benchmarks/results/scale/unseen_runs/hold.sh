#!/bin/bash
ROOT=${ROOT:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}; PY=${PY:-$ROOT/.venv/bin/python}; RAY=${RAY:-$(dirname "$PY")/ray}
# Another job holds both CPUs of the cluster (two idle 1-CPU actors); a short job then joins it (60 s limit),
# on this branch's code and on main's.
W=$ROOT; D=$W/outputs/unseen/cluster/${RUN:-r1}; P=${P:-6531}; PY=$PY
export RAY_USAGE_STATS_ENABLED=0
$PY -c "
import ray, time
ray.init(address='127.0.0.1:$P', logging_level='ERROR')
@ray.remote(num_cpus=1)
class Hold:
    def ping(self): return 1
hs = [Hold.remote() for _ in range(2)]
print(ray.get([h.ping.remote() for h in hs]), flush=True)
time.sleep(400)
" > $D/hold.log 2>&1 & echo $! > $D/hold.pid
sleep 20; cat $D/hold.log
SHORT="num_clients=4 profile.source=inprocess profile.seeds=1 profile.rounds=3 profile.switch_at=[2] target.loss=2.2 target.prob=0.6 target.max_rounds=2 tracking.enabled=false simulation.client_num_cpus=0.5"
for code in branch main; do
  if [ $code = branch ]; then C=$W; else C=$W/outputs/unseen/main_code; fi
  cd $C; s=$(date +%s.%N)
  PYTHONPATH=$C PYTHONDONTWRITEBYTECODE=1 timeout -s INT 60 nice -n 10 $PY -m depl_fl.main $SHORT simulation.ray_address=127.0.0.1:$P hydra.run.dir=$D/held_$code profile.cache_dir=$D/cache > $D/held_$code.out 2> $D/held_$code.err
  rc=$?; echo "held_$code rc=$rc wall=$(echo "$(date +%s.%N) - $s"|bc) :: last lines: $(grep -v '^\s*$' $D/held_$code.out | tail -2 | cut -c1-300 | tr '\n' '|') :: $(grep -E '^depl-fl' $D/held_$code.err | tail -1)" >> $D/summary.txt
done
kill -TERM $(cat $D/hold.pid)
