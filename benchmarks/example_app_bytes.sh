#!/usr/bin/env bash
# The example app (examples/quickstart-depl) under `flwr run` in simulation (3 SuperNodes), with its own
# network and with two a user might bring instead (benchmarks/example_app_nets.py: a CNN with BatchNorm,
# an MLP), and the bytes every round's messages carried against what the cost model charges.
#   bash benchmarks/example_app_bytes.sh [OUT] [VARIANT ...]      VARIANT: quickstart, bn_cnn, mlp (default all)
# Writes OUT/<variant>.{json,log} (OUT defaults to multirun/example-app-bytes) and RESULTS/bytes.md
# (RESULTS defaults to benchmarks/results/example_app). One flwr run at a time, nice -n 10; the local
# SuperLink flwr starts (with FLWR_HOME=OUT/home) is stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-$ROOT/.venv/bin/python}
BIN=$(dirname "$PY")
mkdir -p "${1:-multirun/example-app-bytes}"
OUT=$(cd "${1:-multirun/example-app-bytes}" && pwd)
VARIANTS=("${@:2}")
[ ${#VARIANTS[@]} -eq 0 ] && VARIANTS=(quickstart bn_cnn mlp)
# The example's targets suit its own network; the others cost more per round (bn_cnn) or learn slower
# (mlp) with the same train function, so their targets are loosened (chosen before the runs).
BASE="target.prob=0.8 profile.explore.rounds=3 profile.explore.max_rounds=3 profile.explore.switch_rounds=[2]"
declare -A NET=([quickstart]="" [bn_cnn]=BnCnn [mlp]=Mlp)
declare -A TARGETS=([quickstart]="target.loss=0.3 target.max_rounds=6"
                    [bn_cnn]="target.loss=0.6 target.max_rounds=30 target.deadline_s=3000"
                    [mlp]="target.loss=1.2 target.max_rounds=30 target.deadline_s=3000")
for v in "${VARIANTS[@]}"; do
  [ -n "${TARGETS[$v]:-}" ] || { echo "example_app_bytes: unknown variant $v" >&2; exit 2; }
done
export FLWR_HOME=$OUT/home FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 PYTHONPATH=$ROOT
export PATH=$BIN:$PATH RAY_ADDRESS=local  # a Ray cluster already running here would host the simulation
mkdir -p "$FLWR_HOME"
printf '[superlink]\ndefault = "local"\n\n[superlink.local]\noptions.num-supernodes = 3\n' > "$FLWR_HOME/config.toml"
APP=$OUT/app  # one folder, its task.py changed per variant: the local SuperLink keeps its first folder
stop_superlink() {  # the SuperLink flwr started for this FLWR_HOME (its log file names it), by pid
  for f in /proc/[0-9]*/cmdline; do
    if tr '\0' ' ' < "$f" 2>/dev/null | grep -q -- "--log-file $FLWR_HOME/"; then
      pid=${f#/proc/}; pid=${pid%/cmdline}; kill "$pid" 2>/dev/null || true
    fi
  done
}
trap stop_superlink EXIT
rm -rf "$APP" && cp -r examples/quickstart-depl "$APP"
cp "$APP/quickstart_depl/task.py" "$OUT/task.py.orig"
for v in "${VARIANTS[@]}"; do
  cp "$OUT/task.py.orig" "$APP/quickstart_depl/task.py"
  [ -n "${NET[$v]}" ] && printf '\nfrom benchmarks.example_app_nets import %s as Net  # noqa: E402,F811\n' \
      "${NET[$v]}" >> "$APP/quickstart_depl/task.py"
  rm -rf "$OUT/cache-$v" "$OUT/$v.json"
  (cd "$APP" && nice -n 10 flwr run . local --stream --run-config "out-file=\"$OUT/$v.json\" \
      cache-dir=\"$OUT/cache-$v\" depl-overrides=\"${TARGETS[$v]} $BASE\"" > "$OUT/$v.log" 2>&1) || true
done
R=${RESULTS:-benchmarks/results/example_app}
mkdir -p "$R"
"$PY" - "$OUT" "$R/bytes.md" "${VARIANTS[@]}" <<'PYEOF'
import json
import sys
from pathlib import Path

out, dest, variants = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
lines = ["# The example app's bytes per round, measured and modelled", "",
         "`bash benchmarks/example_app_bytes.sh` (`flwr run . local` in simulation, 3 SuperNodes; "
         "exploration rounds first, then the planned rounds). Targets (the script's TARGETS): quickstart "
         "the example's own (target.loss 0.3, 6 rounds, 300 s); bn_cnn 0.6 and mlp 1.2 within 30 rounds "
         "and 3000 s (with the example's targets bn_cnn's exploration alone takes 314 of the 300 s and mlp "
         "has no dependable plan within 6 rounds). Bytes are the arrays' bytes in the messages; "
         "a round's bytes are the sum over its clients.", "",
         "| network | round | phase | variants (clients) | bytes down | modelled down | bytes up | modelled up "
         "| loss |", "|---|---|---|---|---|---|---|---|---|"]
for v in variants:
    path = out / f"{v}.json"
    if not path.exists():
        tail = [ln for ln in (out / f"{v}.log").read_text().splitlines() if "Error" in ln][-1:]
        lines.append(f"| {v} | - | failed | {tail[0][:200] if tail else 'no out-file'} | | | | | |")
        continue
    doc = json.loads(path.read_text())
    for r in doc["profile"] + doc["rounds"]:
        groups = r.get("groups") or [{"model": r["model"], "clients": r["clients"]}]
        models = " + ".join(f"{g['model']} ({len(g['clients'])})" for g in groups)
        lines.append(f"| {v} | {r['round']} | {r.get('phase') or 'train'} | {models} | {r['bytes_down']} | "
                     f"{r['modelled_bytes_down']} | {r['bytes_up']} | {r['modelled_bytes_up']} | "
                     f"{r['loss']:.4f} |")
dest.write_text("\n".join(lines) + "\n")
print(dest.read_text())
PYEOF
