"""The profile side of contract v2 (docs/CONTRACT_V2.md): coverage bounds, r_eff and eval_std.

Both profile sources emit them in the fitted ``loss`` section, for the
scenario builder to pass on: the federated exploration (tests in
tests/test_federated_profiling.py) and the in-process pilots (here).
"""

from __future__ import annotations

import numpy as np
import pytest

from depl_fl.runs.runconfig import compose_config

pytest.importorskip("torch")

PILOTS = ["num_clients=4", "partition.alpha=0.3", "profile.source=inprocess", "profile.seeds=1",
          "profile.rounds=6", "profile.switch_at=[3]", "profile.subset_fractions=[0.5]"]


@pytest.fixture(scope="module")
def pilot_doc(tmp_path_factory):
    import depl_fl.task.data as data
    import depl_fl.task.partitions as partitions
    from depl_fl.orchestration.profiling import build_profile

    # tests/test_federated_profiling.py can leave partitions bound to its "no bundled data" stub
    # (the module is imported again while the stub is in place); these pilots need the real loader.
    mp = pytest.MonkeyPatch()
    mp.setattr(partitions, "load_dataset", data.load_dataset)
    try:
        cfg = compose_config([*PILOTS, f"profile.cache_dir={tmp_path_factory.mktemp('cache')}"])
        yield cfg, build_profile(cfg)
    finally:
        mp.undo()


def test_inprocess_pilots_measure_their_coverage_bounds(pilot_doc):
    from depl_fl.orchestration.profiling import _Pilot

    cfg, doc = pilot_doc
    pilot = _Pilot(cfg, 1_000)
    subset = pilot.subset(0.5)
    c_s, u_s = pilot.coverage.of([str(i) for i in subset])
    # The full set covers the pooled reference exactly; the half set is what bounds the profile.
    assert pilot.coverage.of([str(i) for i in range(4)]) == pytest.approx((1.0, 0.0))
    assert doc["loss"]["min_coverage"] == pytest.approx(c_s) and c_s < 1.0
    assert doc["loss"]["max_uncovered"] == pytest.approx(u_s)
    # The subset pilots' sample fraction is their r_eff.
    sizes = [len(y) for _, y in pilot.parts]
    assert pilot.sample_fraction(subset) == pytest.approx(c_s * sum(sizes[i] for i in subset) / sum(sizes))


def test_inprocess_pilots_fit_eval_std_per_level(pilot_doc):
    _, doc = pilot_doc
    for run in doc["loss"]["run"].values():
        eval_std = np.asarray(run["eval_std"])
        assert eval_std.shape == (len(run["levels"]),)
        # At most half the per-round variance is evaluation noise.
        assert np.all(eval_std >= 0) and np.all(eval_std <= np.asarray(run["std"]) / np.sqrt(2) + 1e-12)
