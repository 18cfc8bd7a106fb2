"""Why static DepL is over-cautious (spread) and where it fails (label coverage): one pilot run.

Usage (Hydra overrides of the job config)::

    python benchmarks/spread_coverage_analysis.py num_clients=12 partition.alpha=0.5 profile.rounds=20

Runs the configuration's profile pilots once (in-process, validation split),
fits the profile like ``depl-fl profile`` does and prints, per model:

* the lag-1 autocorrelation ``rho`` of the standardised per-round residuals
  and the split of their variance into innovation and evaluation noise
  (:mod:`depl_fl.tracking.noise`), and how much the contract's random walk
  over-states the spread of a 10/20/30-round plan;
* the label coverage ``c_S`` and uncovered share ``u_S``
  (:mod:`depl_fl.contract.coverage`) of the pilot client sets, next to the
  distribution over random sets of 3 and 4 clients of the run's partition,
  i.e. how far a plan on 3-4 clients is outside what the pilots measured.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from depl_fl.contract.coverage import (  # noqa: E402
    coverage,
    measured_bounds,
    pooled_histogram,
    uncovered_share,
)
from depl_fl.contract.scenario import RunProfile  # noqa: E402
from depl_fl.runs.runconfig import compose_config, variant_list  # noqa: E402
from depl_fl.task.partitions import client_partition, geometry  # noqa: E402
from depl_fl.tracking.estimation import (  # noqa: E402
    fit_data_exponents,
    fit_loss_profile,
    run_segments,
)
from depl_fl.tracking.noise import split_spread, spread_ratio  # noqa: E402
from strategies.profiling import _Pilot, run_pilots  # noqa: E402


def spread_lines(cfg) -> list[str]:
    """Per model: rho, split and over-statement of multi-round spread."""
    observations, _ = run_pilots(cfg)
    models = [m for m, _ in variant_list(cfg)]
    a, b = fit_data_exponents(observations, models)
    loss = fit_loss_profile(observations, models, data_exponent_mean=a, data_exponent_std=b)
    lines = [f"data exponents a={a:.2f} b={b:.2f}"]
    for model in models:
        run = loss["run"][model]
        prof = RunProfile(tuple(run["levels"]), tuple(run["mean"]), tuple(run["std"]))
        segs = []
        for seg in run_segments(o for o in observations if o.model == model):
            before = np.array([o.loss_before for o in seg])
            r = np.array([o.sample_fraction for o in seg])
            dec = np.array([o.loss_before - o.loss_after for o in seg])
            segs.append((dec / r**a - prof.mean_at(before)) / (prof.std_at(before) * r ** (-(a + b))))
        split = split_spread(segs)
        rho = min(0.0, max(-0.5, split.rho))
        lines.append(f"{model}: rho={split.rho:+.3f} over {split.pairs} pairs; innovation share of the "
                     f"per-round variance {split.innovation_var / split.per_round_var:.2f}; true/contract "
                     f"std over 10/20/30 rounds = " + "/".join(f"{spread_ratio(rho, k):.2f}"
                                                               for k in (10, 20, 30)))
    return lines


def coverage_lines(cfg) -> list[str]:
    """Coverage of the pilot sets (their own partitions) vs random 3/4-client sets of the run."""
    n, k_classes = int(cfg["num_clients"]), geometry(cfg).num_classes
    pilot_hists, pilot_sets = {}, []
    for s in range(int(cfg["profile"]["seeds"])):
        pilot = _Pilot(cfg, 1_000 + s)
        for pid, (_, y) in enumerate(pilot.parts):
            pilot_hists[f"{s}:{pid}"] = np.bincount(y, minlength=k_classes)
        pilot_sets.append([f"{s}:{p}" for p in range(n)])
        for fraction in cfg["profile"]["subset_fractions"] or []:
            pilot_sets.append([f"{s}:{p}" for p in pilot.subset(float(fraction))])
    ref = pooled_histogram(pilot_hists[f"0:{p}"] for p in range(n))
    low, high = measured_bounds(pilot_sets, pilot_hists, ref)
    hists = [np.bincount(client_partition(cfg, p, n)[1], minlength=k_classes) for p in range(n)]
    lines = [f"pilot sets: min coverage {low:.2f}, max uncovered share {high:.2f}"]
    for size in (3, 4):
        sets = [pooled_histogram(hists[i] for i in c) for c in itertools.combinations(range(n), size)]
        cov = np.array([coverage(h, ref) for h in sets])
        unc = np.array([uncovered_share(h, ref) for h in sets])
        inside = np.mean((cov >= low) & (unc <= high))
        lines.append(f"{size}-client sets of seed {cfg['seed']}: coverage median {np.median(cov):.2f}, "
                     f"share with an unseen class {np.mean(unc > 0):.2f}, inside the pilots' range "
                     f"{inside:.2f}")
    return lines


def main(argv: list[str]) -> None:
    cfg = compose_config(argv)
    for line in coverage_lines(cfg) + spread_lines(cfg):
        print(line, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
