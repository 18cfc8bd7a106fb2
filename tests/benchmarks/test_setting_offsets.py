"""benchmarks/setting_offsets.py: the leave-one-setting-out score and the reading of the committed offsets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.benchmark_scripts import load_benchmark

setting_offsets = load_benchmark("setting_offsets")


def test_loo_error_is_zero_for_a_linear_law_and_not_for_noise() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (12, 2))
    assert setting_offsets.loo_rmse(x, 0.3 - 2.0 * x[:, 0] + x[:, 1]) == pytest.approx(0.0, abs=1e-9)
    noise = rng.normal(0, 0.2, 12)
    # a feature unrelated to the offsets predicts held-out settings no better than their mean
    assert setting_offsets.loo_rmse(rng.uniform(0, 1, (12, 1)), noise) >= \
        0.9 * setting_offsets.loo_rmse(np.empty((12, 0)), noise)


def test_every_setting_has_its_committed_offset() -> None:
    results = setting_offsets.RESULTS
    bank = setting_offsets.bank_offsets(results / "plan_regime" / "fit.json")
    assert set(bank) == {"bank d1", "bank d2", "bank d3", "bank d4"}  # not the setting-by-horizon rows
    offsets = {**bank, **setting_offsets.sweep_offsets(results / "settings" / "pit-pooled-all.md")}
    assert set(setting_offsets.FEATURES) <= set(offsets)
    assert all(-3.0 < v < 3.0 for v in offsets.values())


def test_the_sweep_table_is_read_by_name(tmp_path: Path) -> None:
    path = tmp_path / "pooled.md"
    path.write_text("| sweep | runs | probit mean |\n|---|---|---|\n"
                    "| `/tmp/x/g10/static` | 120 | +0.25 | 0.69 | 1.07 |\n")
    assert setting_offsets.sweep_offsets(path) == {"g10": 0.25}
