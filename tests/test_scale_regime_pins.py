"""The committed synthetic-MLP figures keep the plan regime they were measured with.

``conf/model/synthetic_mlp.yaml`` carries the network's own plan-regime constants; the
benchmarks whose committed figures were made before (with the digits CNN's constants, or the
network's constants of then) pin those in their commands, so that each still reproduces its figures.
They were measured before ``profile.plan_regime.rate_at_full`` read a ``max_clients`` exploration's
rate at ``r = 1``: they pin ``rate_at_full=cheapest`` (the rate as measured).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from depl_fl.runs.runconfig import compose_config, validate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import scale_bench  # noqa: E402
import scale_ray_job  # noqa: E402

#: The constants the digits CNN's trajectory bank gave (conf/profile/default.yaml's fallbacks).
DIGITS = {"power": 1.080, "floor": 0.145, "rate_exponent": 0.310, "noise_exponent": 0.550,
          "oscillation": 0.160, "judged_error_factor": 0.754, "oscillation_dof": 3.40,
          "steps_exponent": 0.6, "reference_steps": 3.125}
#: The constants a fit gives (the other two are the digits CNN's on every network).
FITTED = ("power", "floor", "rate_exponent", "noise_exponent", "oscillation", "judged_error_factor",
          "oscillation_dof")


def regime(overrides: list[str]) -> dict:
    cfg = compose_config(overrides)
    validate(cfg)
    return dict(cfg["profile"]["plan_regime"])


def guarantee_scale_overrides() -> list[str]:
    """The overrides ``benchmarks/guarantee_scale.sh`` gives every job by default."""
    text = (ROOT / "benchmarks" / "guarantee_scale.sh").read_text().replace("\\\n", "")
    setting = re.search(r"^setting=\((.*?)\)", text, re.S | re.M).group(1).split()
    return [*setting, *re.search(r'^DIGITS="(.*?)"', text, re.M).group(1).split()]


def commented_regime(prefix: str) -> list[str]:
    """The overrides of a ``REGIME`` (or ``R``) given in ``benchmarks/guarantee_scale.sh``'s header."""
    text = (ROOT / "benchmarks" / "guarantee_scale.sh").read_text()
    return re.search(rf'^#   {prefix}="(\+\+model\.regime=\{{.*?\}}.*?)"', text, re.M).group(1).split()


@pytest.mark.parametrize(("overrides", "explored", "anchor"), [
    (scale_bench.JOB, 0.073, "trend"),
    (scale_ray_job.JOB, None, "last"),
    (guarantee_scale_overrides(), None, "last"),
], ids=["scale_bench", "scale_ray_job", "guarantee_scale"])
def test_committed_scale_figures_run_with_the_digits_cnns_constants(overrides, explored, anchor):
    values = regime(list(overrides))
    assert {k: values[k] for k in DIGITS} == DIGITS
    assert (values["explored_oscillation"], values["anchor"]) == (explored, anchor)
    assert values["rate_at_full"] == "cheapest"


def test_the_steps_range_is_opt_in_and_read_from_the_models_regime():
    held = regime(["model.regime.steps_min=3.207", "model.regime.steps_max=5.614"])
    assert (held["steps_min"], held["steps_max"]) == (3.207, 5.614)
    for overrides in ([], ["model=digits_resnet"], ["dataset=synthetic", "model=synthetic_mlp"],
                      scale_bench.JOB, scale_ray_job.JOB, guarantee_scale_overrides()):
        values = regime(list(overrides))
        assert (values["steps_min"], values["steps_max"]) == (None, None)


def test_the_new_default_reads_the_capped_explorations_rate_at_full():
    assert regime(_setting())["rate_at_full"] == "always"


def test_the_synthetic_mlp_has_its_own_constants_fitted_with_the_rate_at_full():
    own = regime(["dataset=synthetic", "model=synthetic_mlp"])
    assert {k: own[k] for k in FITTED} != {k: DIGITS[k] for k in FITTED}
    assert (own["explored_oscillation"], own["anchor"], own["rate_at_full"]) == (None, "last", "always")
    fitted = json.loads((ROOT / "benchmarks" / "results" / "plan_regime" / "synthetic_mlp" / "rate_at_full"
                         / "fit.json").read_text())["constants"]
    assert fitted["rate_at_full"] == "always"
    assert {k: own[k] for k in FITTED} == {k: fitted[k] for k in FITTED}


def _setting() -> list[str]:
    return [o for o in guarantee_scale_overrides() if "rate_at_full" not in o and "model.regime" not in o]


@pytest.mark.parametrize(("prefix", "fit"), [("R", "converged"), ("REGIME", ".")],
                         ids=["converged_fit", "own_constants"])
def test_the_earlier_own_constant_sweeps_run_the_fits_they_ran_with(prefix, fit):
    values = regime([*_setting(), *commented_regime(prefix)])
    fitted = json.loads((ROOT / "benchmarks" / "results" / "plan_regime" / "synthetic_mlp" / fit
                         / "fit.json").read_text())["constants"]
    assert {k: values[k] for k in FITTED} == {k: fitted[k] for k in FITTED}
    assert values["rate_at_full"] == "cheapest"


def test_sweep_job_folders_are_named_short():
    text = (ROOT / "benchmarks" / "guarantee_scale.sh").read_text()
    subdir = re.search(r'^short="hydra\.sweep\.subdir=(.*)"$', text, re.M).group(1)
    assert "override_dirname" not in subdir and "seed" in subdir
    command = re.search(r'^\s*"\$PY" -m depl_fl\.main -m .*?> "\$S/\$1\.log"', text, re.M | re.S).group(0)
    assert '"$short"' in command
