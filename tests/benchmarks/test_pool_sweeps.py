"""Pooling the jobs of one target probability from several sweeps (benchmarks/pool_sweeps.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import pool_sweeps  # noqa: E402


def _job(folder: Path, seed: int, prob: float) -> None:
    folder.mkdir(parents=True)
    doc = {"seed": seed, "summary": {"seed": seed, "target_prob": prob}}
    (folder / "results.json").write_text(json.dumps(doc), encoding="utf-8")
    (folder / "checkpoint.pkl").write_bytes(b"not copied")


def test_only_the_chosen_probability_is_pooled_and_nothing_else(tmp_path: Path) -> None:
    first, second, into = tmp_path / "first", tmp_path / "second", tmp_path / "pooled"
    for seed, prob in [(0, 0.95), (1, 0.9), (2, 0.95)]:
        _job(first / "a" / f"{seed}_x", seed, prob)
    _job(second / "b" / "7_y" / "deep", 20, 0.95)
    assert pool_sweeps.main(["--prob", "0.95", "--into", str(into), str(first), str(second)]) == 0
    pooled = sorted(into.rglob("results.json"))
    seeds = sorted(json.loads(p.read_text(encoding="utf-8"))["seed"] for p in pooled)
    assert seeds == [0, 2, 20]
    assert not list(into.rglob("checkpoint.pkl"))


def test_a_folder_with_content_or_a_missing_sweep_is_refused(tmp_path: Path, capsys) -> None:
    into = tmp_path / "pooled"
    _job(into / "old", 0, 0.95)
    assert pool_sweeps.main(["--prob", "0.95", "--into", str(into), str(tmp_path)]) == 2
    assert pool_sweeps.main(["--prob", "0.95", "--into", str(tmp_path / "new"), str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].endswith("not empty") and err[1].startswith("error: not a folder")
