#!/usr/bin/env bash
# The checks of train.device=cuda on a machine with CUDA (a CPU machine skips them all).
#
# Usage (from anywhere): scripts/gpu_check.sh
#   PYTHON   interpreter (default python3); no venv needed: PYTHONPATH may point at carried
#            packages (flwr, hydra-core, torch-pruning, ...), the checkout is put in front of it
#   OUT      when set, the job's results.json and the logs are copied there
#   DEVICE   the job's train.device (default cuda; DEVICE=cpu dry-runs the job on a CPU machine)
# 1. the GPU tests: python -m pytest -q -m gpu tests/test_device_gpu.py
# 2. one short built-in job, simulation=inprocess train.device=cuda (4 clients, 4 exploration
#    rounds, then training rounds; about 10 s on one CPU core, capped at 170 s here): its last
#    lines (the summary, then the results.json path), and results.json copied to $OUT.
# Exit status: 0 when both passed, else 1. No network is used.
set -u
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 PYTHONUNBUFFERED=1
nvidia-smi -L || echo "nvidia-smi: not found"
"$PY" -c "import torch; ok = torch.cuda.is_available(); print('torch', torch.__version__, 'cuda',
torch.version.cuda, 'available' if ok else 'NOT available', torch.cuda.get_device_name(0) if ok else '')"
OUT_DIR=${OUT:-}
WORK=$(mktemp -d)
status=0

echo "== pytest -m gpu"
"$PY" -m pytest -q -m gpu -p no:cacheprovider tests/test_device_gpu.py 2>&1 | tee "$WORK/pytest.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== job: simulation=inprocess train.device=${DEVICE:-cuda}"
JOB=(num_clients=4 simulation=inprocess "train.device=${DEVICE:-cuda}" target.loss=0.45 target.prob=0.8
     target.max_rounds=10 profile.explore.rounds=4 profile.explore.stop_when_met=false
     "hydra.run.dir=$WORK/job" "profile.cache_dir=$WORK/job/cache")
start=$(date +%s)
timeout 170 "$PY" -m depl_fl.main "${JOB[@]}" >"$WORK/job.log" 2>&1
rc=$?
echo "job exit $rc after $(( $(date +%s) - start )) s; its last lines:"
if [ "$rc" -eq 0 ]; then tail -n 2 "$WORK/job.log"; else status=1; tail -n 20 "$WORK/job.log"; fi
if [ -f "$WORK/job/results.json" ]; then
  "$PY" -c "import json, sys; d = json.load(open(sys.argv[1])); r = d['rounds']; print('results.json: device',
d['config']['train']['device'], 'rounds', [x['phase'] for x in r], 'energy sources',
sorted({str(x.get('energy_source')) for x in r}), 'measured J', [x.get('measured_energy_j') for x in r])" \
    "$WORK/job/results.json"
fi

if [ -n "$OUT_DIR" ]; then
  mkdir -p "$OUT_DIR"
  cp "$WORK/pytest.log" "$WORK/job.log" "$OUT_DIR/"
  [ -f "$WORK/job/results.json" ] && cp "$WORK/job/results.json" "$OUT_DIR/"
fi
echo "gpu_check: $([ "$status" -eq 0 ] && echo passed || echo FAILED)"
exit "$status"
