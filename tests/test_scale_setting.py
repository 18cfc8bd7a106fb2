"""The learning-curve script that chose the 1,000-client setting: which clients a round trains."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import scale_setting  # noqa: E402

COUNTS = np.array([5, 50, 7, 40, 9, 30, 11, 20])


def test_largest_takes_the_clients_with_most_samples_every_round():
    assert scale_setting.pick_clients("largest", COUNTS, 3, seed=1, server_round=1) == [1, 3, 5]
    assert scale_setting.pick_clients("largest", COUNTS, 3, seed=1, server_round=9) == [1, 3, 5]


def test_fixed_keeps_one_seeded_set_and_random_draws_a_new_one_each_round():
    fixed = [scale_setting.pick_clients("fixed", COUNTS, 4, seed=3, server_round=k) for k in range(1, 6)]
    assert all(f == fixed[0] for f in fixed) and len(set(fixed[0])) == 4

    def drawn():
        return [tuple(scale_setting.pick_clients("random", COUNTS, 4, seed=3, server_round=k))
                for k in range(1, 6)]
    assert len(set(drawn())) > 1 and drawn() == drawn()


def test_the_table_shows_the_loss_after_the_marked_rounds():
    row = {"label": "iid", "seed": 7, "pick": "largest", "per_round": 15, "samples_per_round": 1234.0,
           "val_loss": [2.0 - 0.1 * k for k in range(12)], "min_val_loss": 0.9, "argmin_round": 11,
           "final_test_loss": 0.95}
    text = scale_setting.table([row])
    assert "| iid | 7 | largest x 15 | 1234 | 2.000 | 1.500 | 1.000 |  |" in text
    assert text.rstrip().endswith("| 0.900 (11) | 0.950 |")
