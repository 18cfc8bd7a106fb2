#!/usr/bin/env bash
# DepL for Flower — set up and run.
#
#   ./run.sh [HYDRA_OVERRIDES...]   set up (first time) and run the default job:
#                                   DepL on the embedded digits dataset, 10 clients
#                                   in 2 clusters, Flower simulation (Ray)
#   ./run.sh test [PYTEST_ARGS...]  set up (first time) and run the test suite
#   ./run.sh depl-fl ARGS...        run the command-line tool (plan, evaluate, profile, report, split)
#
# Set-up creates .venv/ and installs the project with the CPU build of torch.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP="$VENV/.depl-installed"

setup() {
    if [ ! -x "$VENV/bin/python" ]; then
        echo "[run.sh] creating virtual environment in $VENV" >&2
        "$PYTHON" -m venv "$VENV"
    fi
    local want
    want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
    if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
        echo "[run.sh] installing depl-fl and its dependencies (CPU torch, a few minutes the first time)" >&2
        "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null
        # torch is installed first and pinned: a looser requirement pulls CUDA wheels.
        "$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
        "$VENV/bin/python" -m pip install --quiet -e ".[fl,test]"
        echo "$want" > "$STAMP"
    fi
}

setup
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export RAY_DEDUP_LOGS=0
case "${1:-}" in
    test)
        shift
        exec "$VENV/bin/python" -m pytest "$@"
        ;;
    depl-fl)
        shift
        exec "$VENV/bin/depl-fl" "$@"
        ;;
    *)
        exec "$VENV/bin/python" -m depl_fl.main "$@"
        ;;
esac
