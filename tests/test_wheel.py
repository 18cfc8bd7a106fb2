"""An installed wheel works from an empty directory, without the checkout (slow: builds and installs).

The wheel is built from a copy of the checkout, installed into a fresh virtual
environment whose only link to the test's environment is a ``.pth`` line naming
that environment's site-packages (for numpy, torch, flwr, ...; an editable
install of the checkout there is not activated, its ``.pth`` is not read).
Every command runs in an empty directory with no ``PYTHONPATH``, and checks
that it imported the installed copy.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("flwr")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "tests" / "data" / "example_scenario.json"
COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "outputs", "multirun", ".depl_cache", "__pycache__",
                                     "build", "dist", "*.egg-info", ".pytest_cache", ".hypothesis")
TINY_JOB = ["simulation=inprocess", "num_clients=3", "profile.explore.rounds=2",
            "profile.explore.max_rounds=2", "profile.explore.switch_rounds=[2]", "target.loss=2.2",
            "profile.explore.stop_when_met=false",
            "target.prob=0.6", "target.max_rounds=2", "tracking.enabled=false", "output.plot=false"]


def _run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1", RAY_DEDUP_LOGS="0")
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("wheel")
    source, dist, venv, empty = base / "src", base / "dist", base / "venv", base / "empty"
    shutil.copytree(ROOT, source, ignore=COPY_IGNORE)
    empty.mkdir()
    # Offline where setuptools is installed; else pip fetches it into an isolated build env.
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q",
                  "-w", str(dist), str(source)], cwd=empty, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("depl_fl-*.whl")
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=empty)
    assert made.returncode == 0, made.stderr[-2000:]
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                     cwd=empty).stdout.strip())
    (site / "_shared_env.pth").write_text(sysconfig.get_path("purelib") + "\n", encoding="utf-8")
    done = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                 str(wheel)], cwd=empty, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"wheel": wheel, "python": python, "bin": venv / "bin", "site": site, "empty": empty}


def test_wheel_ships_the_packages_and_conf(installed: dict[str, Path]) -> None:
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    assert {"depl_fl/cli.py", "depl_fl/conf/config.yaml", "depl_fl/conf/model/digits_cnn.yaml",
            "strategies/server_app.py", "clients/client_app.py"} <= names
    assert not any(n.startswith(("tests/", "benchmarks/", "conf/")) for n in names)
    conf = ROOT / "conf"
    shipped = {f"depl_fl/conf/{p.relative_to(conf).as_posix()}" for p in conf.rglob("*.yaml")}
    assert len(shipped) > 20 and shipped <= names, sorted(shipped - names)


def test_apps_import_and_config_composes_from_an_empty_directory(installed: dict[str, Path]) -> None:
    code = ("import depl_fl, clients.client_app, strategies.server_app\n"
            "from clients.client_app import app as c\n"
            "from strategies.server_app import app as s\n"
            "from depl_fl.runs.runconfig import config_from_run_config\n"
            "cfg = config_from_run_config({'overrides': 'num_clients=3 method=full'})\n"
            "print(depl_fl.__file__, type(c).__name__, type(s).__name__,\n"
            "      cfg['num_clients'], cfg['method'])\n")
    proc = _run([str(installed["python"]), "-c", code], cwd=installed["empty"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    path, client_app, server_app, num_clients, method = proc.stdout.split()
    assert Path(path).is_relative_to(installed["site"]), path
    assert (client_app, server_app, num_clients, method) == ("ClientApp", "ServerApp", "3", "full")


def test_depl_fl_plan_from_an_empty_directory(installed: dict[str, Path]) -> None:
    plan = installed["empty"] / "plan.json"
    proc = _run([str(installed["bin"] / "depl-fl"), "plan", str(EXAMPLE), "--target-loss", "1.5",
                 "--target-prob", "0.9", "--deadline-s", "200", "--out", str(plan)], cwd=installed["empty"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(plan.read_text(encoding="utf-8"))
    assert doc["feasible"] is True and doc["rounds"]
    again = _run([str(installed["python"]), "-m", "depl_fl.cli", "evaluate", str(EXAMPLE), str(plan),
                  "--target-loss", "1.5", "--target-prob", "0.9", "--deadline-s", "200"],
                 cwd=installed["empty"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["valid"] is True


def test_inprocess_job_from_an_empty_directory(installed: dict[str, Path], tmp_path: Path) -> None:
    work = tmp_path / "job"
    work.mkdir()
    proc = _run([str(installed["python"]), "-m", "depl_fl.main", *TINY_JOB, "hydra.run.dir=out"],
                cwd=work, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = Path(proc.stdout.strip().splitlines()[-1])
    assert results == (work / "out" / "results.json").resolve()
    doc = json.loads(results.read_text(encoding="utf-8"))
    phases = [r["phase"] for r in doc["rounds"]]  # federated profiling (the default), then training
    assert phases[:2] == ["profile", "profile"] and phases.count("train") <= 2, phases
    assert doc["config"]["num_clients"] == 3
    assert (work / ".depl_cache").is_dir()  # the profile cache lands in the job's directory
