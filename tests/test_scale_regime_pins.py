"""The committed synthetic-MLP figures keep the plan regime they were measured with.

``conf/model/synthetic_mlp.yaml`` carries the network's own plan-regime constants; the
benchmarks whose committed figures were made before (with the digits CNN's constants) pin those in
their commands, so that each still reproduces its figures.
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


def regime(overrides: list[str]) -> dict:
    cfg = compose_config(overrides)
    validate(cfg)
    return dict(cfg["profile"]["plan_regime"])


def guarantee_scale_overrides() -> list[str]:
    """The overrides ``benchmarks/guarantee_scale.sh`` gives every job by default."""
    text = (ROOT / "benchmarks" / "guarantee_scale.sh").read_text().replace("\\\n", "")
    setting = re.search(r"^setting=\((.*?)\)", text, re.S | re.M).group(1).split()
    return [*setting, re.search(r'^DIGITS="(.*?)"', text, re.M).group(1)]


@pytest.mark.parametrize(("overrides", "explored", "anchor"), [
    (scale_bench.JOB, 0.073, "trend"),
    (scale_ray_job.JOB, None, "last"),
    (guarantee_scale_overrides(), None, "last"),
], ids=["scale_bench", "scale_ray_job", "guarantee_scale"])
def test_committed_scale_figures_run_with_the_digits_cnns_constants(overrides, explored, anchor):
    values = regime(list(overrides))
    assert {k: values[k] for k in DIGITS} == DIGITS
    assert (values["explored_oscillation"], values["anchor"]) == (explored, anchor)


def test_the_synthetic_mlp_has_its_own_constants():
    own = regime(["dataset=synthetic", "model=synthetic_mlp"])
    fitted = ("power", "floor", "rate_exponent", "noise_exponent", "oscillation", "judged_error_factor",
              "oscillation_dof")
    assert {k: own[k] for k in fitted} != {k: DIGITS[k] for k in fitted}
    assert (own["explored_oscillation"], own["anchor"]) == (None, "last")


def test_the_converged_sweep_runs_the_converged_fits_constants():
    text = (ROOT / "benchmarks" / "guarantee_scale.sh").read_text()
    override = re.search(r'^#   R="(\+\+model\.regime=\{.*?\})"', text, re.M).group(1)
    values = regime([*guarantee_scale_overrides()[:-1], override])
    fitted = json.loads((ROOT / "benchmarks" / "results" / "plan_regime" / "synthetic_mlp" / "converged"
                         / "fit.json").read_text())["constants"]
    names = ("power", "floor", "rate_exponent", "noise_exponent", "oscillation", "judged_error_factor",
             "oscillation_dof")
    assert {k: values[k] for k in names} == {k: fitted[k] for k in names}


def test_sweep_job_folders_are_named_short():
    text = (ROOT / "benchmarks" / "guarantee_scale.sh").read_text()
    subdir = re.search(r'^short="hydra\.sweep\.subdir=(.*)"$', text, re.M).group(1)
    assert "override_dirname" not in subdir and "seed" in subdir
    command = re.search(r'^\s*"\$PY" -m depl_fl\.main -m .*?> "\$S/\$1\.log"', text, re.M | re.S).group(0)
    assert '"$short"' in command
