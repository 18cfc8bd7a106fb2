"""How the sweep analyses read a sweep folder and write their report (benchmarks/sweep_io.py), and how each
refuses a sweep without its jobs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from sweep_io import job_records, write_report  # noqa: E402

SCRIPTS = ["no_plan_reach", "rise_lift_replan", "tracking_stop_margins", "regime_replan",
           "oscillation_replan"]


def _job(folder: Path, record: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(record), encoding="utf-8")


def test_job_records_walk_every_depth_in_path_order(tmp_path: Path) -> None:
    _job(tmp_path / "b" / "0", {"seed": 2})
    _job(tmp_path / "a", {"seed": 1})
    (tmp_path / "a" / "other.json").write_text("{}", encoding="utf-8")
    assert [(p.relative_to(tmp_path).as_posix(), d["seed"]) for p, d in job_records(tmp_path)] == [
        ("a/results.json", 1), ("b/0/results.json", 2)]
    assert list(job_records(tmp_path / "missing")) == []


def test_write_report_makes_the_folder_or_prints(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_report("| a |\n", tmp_path / "deep" / "r.md")
    assert (tmp_path / "deep" / "r.md").read_text(encoding="utf-8") == "| a |\n"
    write_report("| c |\n", tmp_path / "with-data.md", [{"a": 1}])
    assert json.loads((tmp_path / "with-data.json").read_text(encoding="utf-8")) == [{"a": 1}]
    write_report("| b |\n", None)
    assert capsys.readouterr().out == "| b |\n"


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_sweep_without_the_scripts_jobs_is_refused_in_one_line(script: str, tmp_path: Path) -> None:
    _job(tmp_path / "0", {"summary": {"method": "full"}, "rounds": []})
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{script}.py"), str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: no ") and len(proc.stderr.strip().splitlines()) == 1
