"""benchmarks/regime_replan.py: which jobs of a sweep it re-plans."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmark_scripts import load_benchmark

regime_replan = load_benchmark("regime_replan")


def test_only_finished_static_jobs_with_a_plan_are_re_planned(tmp_path: Path) -> None:
    base = {"method": "depl", "tracking": False, "status": "completed", "final_test_loss": 0.3}
    jobs = {"static": {}, "tracked": {"tracking": True}, "running": {"status": "running"},
            "stopped": {"status": "interrupted"}, "full": {"method": "full"},
            "no-loss": {"final_test_loss": None}}
    for name, change in jobs.items():
        (tmp_path / name).mkdir()
        doc = {"summary": {**base, **change}, "plan": {"rounds": [{"model": "full", "clients": ["c0"]}]},
               "profile": {"cache_file": "profile-fed-x.json"}}
        (tmp_path / name / "results.json").write_text(json.dumps(doc))
    found = [Path(path).parent.name for path, _ in regime_replan._static_jobs(tmp_path)]
    assert found == ["static"]
