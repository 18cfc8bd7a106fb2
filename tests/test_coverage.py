"""Label coverage of client sets (scenario contract version 2, depl_fl.contract.coverage)."""

from __future__ import annotations

import numpy as np
import pytest

from depl_fl.contract import coverage as cov
from depl_fl.errors import ScenarioError

UNIFORM = [1.0] * 4


def test_coverage_is_one_minus_total_variation():
    assert cov.coverage([10, 10, 10, 10], UNIFORM) == pytest.approx(1.0)
    assert cov.coverage([5, 5, 5, 5], [2, 2, 2, 2]) == pytest.approx(1.0)  # only shares count
    assert cov.coverage([10, 10, 0, 0], UNIFORM) == pytest.approx(0.5)  # half the labels missing
    assert cov.coverage([40, 0, 0, 0], UNIFORM) == pytest.approx(0.25)
    s, q = np.array([3.0, 1.0, 0.0, 6.0]), np.array([1.0, 2.0, 3.0, 4.0])
    tv = 0.5 * np.abs(s / s.sum() - q / q.sum()).sum()
    assert cov.coverage(s, q) == pytest.approx(1.0 - tv)


def test_effective_ratio_keeps_r_for_a_set_distributed_like_the_reference():
    assert cov.effective_ratio([25, 25, 25, 25], UNIFORM, 400) == pytest.approx(0.25)
    assert cov.effective_ratio([50, 50, 0, 0], UNIFORM, 400) == pytest.approx(0.125)


def test_uncovered_share_counts_classes_the_set_almost_never_shows():
    q = [0.1, 0.2, 0.3, 0.4]
    assert cov.uncovered_share([100, 100, 100, 100], q) == 0.0
    assert cov.uncovered_share([100, 0, 100, 100], q) == pytest.approx(0.2)
    # 1 sample of class 0 among 1,000: share 0.001 < 0.1 * 0.1, so class 0 counts as unseen.
    assert cov.uncovered_share([1, 333, 333, 333], q) == pytest.approx(0.1)
    assert cov.uncovered_share([1, 333, 333, 333], q, threshold=0.001) == 0.0
    assert cov.with_unseen_classes(0.4, 0.1, 4.0) == pytest.approx(0.76)
    assert cov.with_unseen_classes(0.4, 0.0, 4.0) == pytest.approx(0.4)
    assert cov.with_unseen_classes(0.4, 0.3, None) == 0.4
    latent = np.array([0.3, 0.5])
    assert np.allclose(cov.with_unseen_classes(latent, 0.2, 5.0), 0.8 * latent + 1.0)


def test_sets_without_histograms_keep_the_version_1_meaning():
    hists = {"c0": [5, 0], "c1": [0, 5]}
    assert cov.set_coverage(["c0", "c2"], hists, [1, 1]) is None
    assert cov.is_predictable(None, 0.9, 0.0)
    c, u = cov.set_coverage(["c0", "c1"], hists, [1, 1])
    assert (c, u) == (pytest.approx(1.0), 0.0)
    assert cov.set_coverage(["c0"], hists, [1, 1]) == (pytest.approx(0.5), pytest.approx(0.5))


def test_predictable_sets_stay_within_the_pilots_range():
    rng = np.random.default_rng(0)
    hists = {f"c{i}": rng.dirichlet([0.3] * 10) * 200 for i in range(12)}
    q = np.ones(10)
    pilots = [[f"c{i}" for i in range(6)], [f"c{i}" for i in range(6, 12)]]
    low, high = cov.measured_bounds(pilots, hists, q)
    assert all(cov.is_predictable(cov.set_coverage(p, hists, q), low, high) for p in pilots)
    every = cov.set_coverage(list(hists), hists, q)
    assert every[0] >= low and cov.is_predictable(every, low, high)
    singles = [cov.set_coverage([c], hists, q) for c in hists]
    assert any(not cov.is_predictable(s, low, high) for s in singles)
    for s in singles:  # predictable exactly when inside both bounds
        assert cov.is_predictable(s, low, high) == (s[0] >= low and s[1] <= high)


def test_malformed_histograms_are_named():
    with pytest.raises(ScenarioError, match="clients\\[0\\].label_histogram: counts must be finite"):
        cov.as_histogram([1, -2], "clients[0].label_histogram")
    with pytest.raises(ScenarioError, match="has 2 classes, expected 3"):
        cov.as_histogram([1, 2], "h", num_classes=3)
    with pytest.raises(ScenarioError, match="must be a list of counts"):
        cov.as_histogram("abc", "h")
    with pytest.raises(ScenarioError, match="2 classes vs 3 reference shares"):
        cov.coverage([1, 1], [1, 1, 1])
    with pytest.raises(ScenarioError, match="no pilot set"):
        cov.measured_bounds([["x"]], {}, [1])


def test_scenario_builder_carries_histograms_and_coverage_fields():
    from depl_fl.orchestration.scenario_builder import client_doc, coverage_fields
    from depl_fl.runs.runconfig import compose_config

    cfg = compose_config([])
    props = {"c0": {"cluster": "A", "num-samples": 4, "label-histogram": [3, 1, 0]},
             "c1": {"cluster": "B", "num-samples": 6, "label-histogram": [0, 1, 5]}}
    clients = [client_doc(cid, p) for cid, p in props.items()]
    assert clients[0]["label_histogram"] == [3, 1, 0]
    fields = coverage_fields(cfg, clients, {"min_coverage": 0.7, "initial": 2.3})
    assert fields["label_shares"] == pytest.approx([0.3, 0.2, 0.5])
    assert fields["coverage_threshold"] == 0.1 and fields["min_coverage"] == 0.7
    assert "max_uncovered" not in fields
    old = [client_doc("c2", {"cluster": "A", "num-samples": 5})]
    assert "label_histogram" not in old[0] and coverage_fields(cfg, old + clients, {}) == {}
    with pytest.raises(ScenarioError, match="client c3: label-histogram"):
        client_doc("c3", {"cluster": "A", "num-samples": 5, "label-histogram": [-1, 2]})


def test_unseen_class_map_takes_one_share_per_element() -> None:
    latent = np.array([0.4, 0.4, 0.4])
    shares = np.array([0.0, 0.5, 1.5])  # clipped to [0, 1]
    judged = cov.with_unseen_classes(latent, shares, 2.0)
    assert np.allclose(judged, [0.4, 1.2, 2.0]) and judged is not latent
