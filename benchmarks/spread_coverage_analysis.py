"""Why static DepL is over-cautious (spread) and where it fails (label coverage): one pilot run.

Usage (Hydra overrides of the job config)::

    python benchmarks/spread_coverage_analysis.py num_clients=12 partition.alpha=0.5 profile.rounds=20
    python benchmarks/spread_coverage_analysis.py --sets=12 num_clients=12 partition.alpha=0.5 \
        profile.rounds=35

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

With ``--sets=N``: trains ``p50`` for ``profile.rounds`` rounds on N seeded
random sets of 3-4 clients of the run's partition (as a static plan on few
clients does) and prints each set's final validation loss against its
coverage and uncovered share, the loss on its unseen classes, and a linear
fit of the final loss on ``u_S`` (what ``loss.coverage_floor_loss`` models).
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
    shares,
    uncovered_share,
)
from depl_fl.contract.scenario import RunProfile  # noqa: E402
from depl_fl.orchestration.profiling import _Pilot, run_pilots  # noqa: E402
from depl_fl.runs.runconfig import compose_config, variant_list  # noqa: E402
from depl_fl.task.partitions import client_partition, geometry  # noqa: E402
from depl_fl.tracking.estimation import (  # noqa: E402
    fit_data_exponents,
    fit_loss_profile,
    run_segments,
)
from depl_fl.tracking.noise import split_spread, spread_ratio  # noqa: E402


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


def per_class_loss(pilot: _Pilot, state, model: str) -> np.ndarray:
    """Mean validation cross-entropy per class of ``model`` pruned from ``state``."""
    import torch

    from depl_fl.task.local_update import evaluate_variant

    x, y = pilot.test
    k = pilot.geometry.num_classes
    out = np.full(k, np.nan)
    with torch.no_grad():
        for c in range(k):
            if np.any(y == c):
                out[c] = evaluate_variant(state, pilot.geometry, pilot.comp[model], x[y == c], y[y == c])[0]
    return out


def set_loss_lines(cfg, n_sets: int, rounds: int, model: str = "p50") -> list[str]:
    """Train ``model`` on random 3-4 client sets of the run's partition; final loss vs coverage."""
    n, k_classes = int(cfg["num_clients"]), geometry(cfg).num_classes
    pilot = _Pilot(cfg, int(cfg["seed"]))
    hists = [np.bincount(y, minlength=k_classes) for _, y in pilot.parts]
    ref = pooled_histogram(hists)
    rng = np.random.default_rng(7)
    rows, lines = [], []
    for _ in range(n_sets):
        clients = sorted(int(i) for i in rng.choice(n, size=int(rng.integers(3, 5)), replace=False))
        pooled = pooled_histogram(hists[i] for i in clients)
        c_s, u_s = coverage(pooled, ref), uncovered_share(pooled, ref)
        state = pilot.initial()
        for k in range(1, rounds + 1):
            state = pilot.round(state, model, k, clients)
        final = pilot.loss(state, model)
        per_class = per_class_loss(pilot, state, model)
        unseen = shares(pooled) < 0.1 * shares(ref)
        lines.append(f"set {clients}: r={pilot.sample_fraction(clients):.2f} c_S={c_s:.2f} u_S={u_s:.2f} "
                     f"final loss {final:.3f}; loss on unseen classes "
                     f"{np.nanmean(per_class[unseen]) if unseen.any() else float('nan'):.2f}, "
                     f"on the others {np.nanmean(per_class[~unseen]):.3f}")
        rows.append((u_s, c_s, final))
    u, c, final = (np.array(v) for v in zip(*rows, strict=True))
    fit = np.polyfit(u, final, 1)
    lines.append(f"final loss ~ {fit[1]:.3f} + {fit[0]:.2f} * u_S (corr {np.corrcoef(u, final)[0, 1]:.2f}); "
                 f"corr with c_S {np.corrcoef(c, final)[0, 1]:.2f}")
    return lines


def main(argv: list[str]) -> None:
    sets = [a for a in argv if a.startswith("--sets=")]
    overrides = [a for a in argv if not a.startswith("--")]
    cfg = compose_config([*overrides, "profile.source=inprocess"])  # the in-process pilots
    if sets:
        for line in set_loss_lines(cfg, int(sets[0].split("=", 1)[1]), int(cfg["profile"]["rounds"])):
            print(line, flush=True)
        return
    for line in coverage_lines(cfg) + spread_lines(cfg):
        print(line, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
