"""How often *any* static planner could show the per-cell goal: its ceiling.

The per-cell goal judges a cell of ``n`` static runs at probability pi by its final
test losses: coverage >= pi, its 95% Wilson interval covering pi, and
calibration (empirical pi-quantile / L*, inverted CDF) >= 0.9. The three
together fence the outcome in from both sides:

- coverage >= pi with the Wilson interval still reaching down to pi puts the
  count of runs that meet L* in a window ``[k_lo, k_hi]`` a couple of
  binomial standard deviations wide (``coverage_window``); at pi = 0.8 with
  40 runs it is 32-36 of 40, and no success probability puts the count
  there more than 74% of the time (``window_ceiling``);
- calibration >= 0.9 asks the empirical pi-quantile to lie in
  [0.9, 1.0] x L*, which a cautious plan (every run far below L*) misses.

How often a planner can satisfy both depends on how widely its runs spread.
The script measures the least spread there can be: a run's final test loss
is its model's loss on the run's own test half of the server's held-out data
(``split_held_out`` with the run seed), so even a plan whose trained model
were *identical in every run* sees its test loss move with the split. It

1. trains the task's CNN centrally on the digits training data (as
   ``stop_margin.py``) and keeps the model each time its loss on the whole
   held-out pool first falls to a level of a fine grid (0.5-1.05 x L*, steps
   of 0.005 x L*; each level takes the nearest kept model, shifted by the
   small difference);
2. takes each kept model's test-half loss under ``--splits`` split seeds;
3. simulates ``--redraws`` sweeps of one setting: ``n`` runs on ``n``
   distinct split seeds, shared by the three pi (as the project's sweeps
   share seeds), each run's loss the kept model's test-half loss plus an
   independent normal spread of the model itself (``--spread``, a share of
   L*); in each cell the planner stops at the kept model that gives the goal
   its best chance (the best offset from L*, chosen on the same redraws, so
   the chance is if anything too high).

The chance per cell, for the three cells of one setting, and for three
settings (the cube: independent seeds and models) is the ceiling for any
planner whose runs spread at least that much. The bank's trajectories give
the spread a plan made before training cannot foresee (``--bank``; docs/RESULTS.md): the model's own
round-to-round oscillation around its trend, 0.07-0.15 x L* near the target.

``--reports`` reads sweep reports (``depl-fl report`` JSON) and sets every
static cell that was measured beside the chance this ceiling gives it (at
each ``--report-spread``): how many cells met the goal against how many a
planner at the ceiling would be expected to.

No job's decision is involved; nothing here changes a run.

    python benchmarks/goal_ceiling.py [--targets 0.3 0.35 0.45] [--runs 20 40 100]
        [--spread 0 0.05 0.1 0.15 0.2] [--splits 4000] [--redraws 2000] [--seed 0]
        [--reports REPORT.json ...] [--report-spread 0 0.1] [--bank BANK] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from stop_margin import trained_losses  # noqa: E402 - the same central training, on a finer grid

from depl_fl.contract.semantics import empirical_quantile  # noqa: E402
from depl_fl.runs.report import wilson_interval  # noqa: E402
from depl_fl.task.data import load_dataset, split_held_out  # noqa: E402

PROBS = (0.8, 0.9, 0.95)
CALIBRATION_GOAL = 0.9
#: The held-out losses a planner may stop at, as shares of L* (its offsets from the target).
OFFSETS = np.round(np.arange(0.50, 1.0501, 0.005), 3)


def coverage_window(runs: int, prob: float) -> tuple[int, int] | None:
    """Counts ``k`` of ``runs`` that meet the coverage part of the goal.

    ``k / runs >= prob`` and the Wilson interval of ``k`` covering ``prob``;
    ``None`` when no count does.
    """
    counts = []
    for k in range(math.ceil(prob * runs - 1e-9), runs + 1):
        low, high = wilson_interval(k, runs)
        if low <= prob <= high:
            counts.append(k)
    return (counts[0], counts[-1]) if counts else None


def window_ceiling(runs: int, prob: float) -> tuple[float, float]:
    """The largest chance that a Binomial(runs, p) count lands in the coverage window, and its p."""
    from scipy.stats import binom

    window = coverage_window(runs, prob)
    if window is None:
        return 0.0, float("nan")
    grid = np.linspace(0.0, 1.0, 20001)
    chance = binom.cdf(window[1], runs, grid) - binom.cdf(window[0] - 1, runs, grid)
    best = int(np.argmax(chance))
    return float(chance[best]), float(grid[best])


def goal_met_many(losses: np.ndarray, prob: float, target: float) -> np.ndarray:
    """The per-cell goal on each row of ``losses`` (one cell of runs per row).

    The row-wise form of ``plan_pit.meets_goal``'s last value: coverage >= pi,
    its Wilson interval covering pi, and ``empirical_quantile / target >= 0.9``.
    """
    runs = losses.shape[1]
    window = coverage_window(runs, prob)
    if window is None:
        return np.zeros(len(losses), dtype=bool)
    met = np.sum(losses <= target, axis=1)
    calibrated = empirical_quantile(losses, prob, axis=1) / target >= CALIBRATION_GOAL
    return (window[0] <= met) & (met <= window[1]) & calibrated


@dataclass(frozen=True)
class Floor:
    """Kept models: their held-out pool loss and their test-half loss under each split seed."""

    pool_loss: np.ndarray   # (models,)
    halves: np.ndarray      # (models, splits)

    @classmethod
    def measure(cls, targets: list[float], splits: int, seed: int) -> Floor:
        labels = np.asarray(load_dataset("digits").y_test)
        levels = sorted({round(float(t * o), 4) for t in targets for o in OFFSETS}, reverse=True)
        by_level = trained_losses(levels, seed, batch=32, lr=0.01, max_steps=20000)
        kept = list({id(losses): losses for losses in by_level.values()}.values())  # one per model
        masks = np.zeros((splits, labels.size))
        for s in range(splits):
            masks[s, split_held_out(labels, 0.5, s)[1]] = 1.0
        halves = np.array([masks @ k / masks.sum(axis=1) for k in kept])
        return cls(np.array([k.mean() for k in kept]), halves)

    def split_sd(self, target: float) -> float:
        """The sd over split seeds of the test-half loss of the kept model nearest ``target``."""
        return float(self.halves[np.argmin(abs(self.pool_loss - target))].std())

    def around(self, target: float) -> tuple[np.ndarray, np.ndarray]:
        """Test-half losses of a model at each of ``OFFSETS`` x ``target``, and those offsets.

        Each offset takes the kept model nearest it, shifted by the (small)
        difference of pool losses: the kept models are a few thousandths
        apart, too coarse for a window of a few percent of L* on their own.
        """
        levels = OFFSETS * target
        nearest = np.abs(self.pool_loss[None, :] - levels[:, None]).argmin(axis=1)
        return self.halves[nearest] + (levels - self.pool_loss[nearest])[:, None], OFFSETS


def setting_chance(models: np.ndarray, target: float, runs: int, spread: float, redraws: int,
                   rng: np.random.Generator) -> dict:
    """Best chance per pi (with its model index) and the chance that all three cells meet the goal.

    ``models[m, s]`` is kept model ``m``'s test-half loss under split seed
    ``s``; ``spread`` the sd of an independent spread of every run's own
    model, as a share of ``target``. Each pi takes the model with its best
    chance; the three cells share their ``runs`` split seeds.
    """
    seeds = np.array([rng.choice(models.shape[1], size=runs, replace=False) for _ in range(redraws)])
    noise = rng.standard_normal(seeds.shape) * spread * target
    cells, joint = {}, np.ones(redraws, dtype=bool)
    for prob in PROBS:
        hits = np.array([goal_met_many(by_split[seeds] + noise, prob, target) for by_split in models])
        best = int(np.argmax(hits.mean(axis=1)))
        cells[prob] = (float(hits[best].mean()), best)
        joint &= hits[best]
    return {"cells": cells, "setting": float(joint.mean())}


def window_table(runs_list: list[int]) -> list[str]:
    lines = ["| runs | " + " | ".join(f"pi {p}: window, ceiling (at p)" for p in PROBS) + " |",
             "|---|" + "---|" * len(PROBS)]
    for runs in runs_list:
        cells = []
        for prob in PROBS:
            window = coverage_window(runs, prob)
            chance, p = window_ceiling(runs, prob)
            cells.append(f"{window[0]}-{window[1]}, {chance:.2f} ({p:.3f})" if window else "none, 0")
        lines.append(f"| {runs} | " + " | ".join(cells) + " |")
    return lines


def measured_cells(paths: list[Path]) -> list[dict]:
    """Static cells (method ``depl``) of sweep reports: n, pi, L*, the goal, and whether they are off it.

    ``met``: the goal itself. ``off``: significantly off it, i.e. the Wilson
    interval excludes pi or the calibration's bootstrap interval misses
    [0.9, 1.0] altogether (the reports' own intervals).
    """
    cells = []
    for path in paths:
        for group in json.loads(path.read_text())["groups"]:
            if group["method"] != "depl" or not group.get("runs"):
                continue
            n, k, prob = int(group["runs"]), int(group["successes"]), float(group["target_prob"])
            window = coverage_window(n, prob)
            calibration = group.get("calibration")
            met = (window is not None and window[0] <= k <= window[1] and calibration is not None
                   and calibration >= CALIBRATION_GOAL)
            cal_low, cal_high = group.get("calibration_low"), group.get("calibration_high")
            off = not group["wilson_low"] <= prob <= group["wilson_high"] or (
                cal_low is not None and (cal_high < CALIBRATION_GOAL or cal_low > 1.0))
            cells.append({"report": str(path), "runs": n, "prob": prob, "target": float(group["target_loss"]),
                          "successes": k, "calibration": calibration, "met": bool(met), "off": bool(off)})
    return cells


#: Rounds in the centred moving mean that stands for a trajectory's trend (the oscillation's residual).
TREND_WINDOW = 5


def trend_residuals(losses: np.ndarray, target: float) -> np.ndarray:
    """Residuals of a loss trajectory around its centred moving mean, as shares of ``target``.

    Only rounds whose trend lies within [0.7, 1.3] x ``target`` count (where a
    plan aimed at ``target`` stops). Divided by ``sqrt(1 - 1/TREND_WINDOW)``, the
    residuals' sd estimates the sd of independent noise around a smooth trend.
    """
    half = TREND_WINDOW // 2
    out = []
    for k in range(half, len(losses) - half):
        trend = float(np.mean(losses[k - half:k + half + 1]))
        if 0.7 * target <= trend <= 1.3 * target:
            out.append((losses[k] - trend) / target)
    return np.array(out) / math.sqrt(1 - 1 / TREND_WINDOW)


def bank_oscillation(bank: Path) -> list[str]:
    """Per setting of a trajectory bank: the sd of its runs' pool loss around their trend, x L*.

    The pool loss (mean of the validation and test halves) is free of the
    split's persistent offset; what remains is the model's own round-to-round
    oscillation, which a plan made before training cannot foresee.
    """
    import re

    by_setting: dict[str, dict[str, list[float]]] = {}
    for path in sorted(bank.glob("*/seed*/*.json")):
        if path.name in ("job.json", "profile.json"):
            continue
        run = json.loads(path.read_text())
        target = float(re.search(r"target\.loss=([0-9.]+)", run["overrides"]).group(1))
        pool = (np.asarray(run["val"]) + np.asarray(run["test"])) / 2
        residuals = trend_residuals(pool, target).tolist()
        entry = by_setting.setdefault(run["setting"], {"all": [], "every client": []})
        entry["all"] += residuals
        if run["set"] == "all":
            entry["every client"] += residuals
    lines = ["| setting | oscillation sd, every policy (x L*) | every-client policies (x L*) | rounds |",
             "|---|---|---|---|"]
    for setting, entry in sorted(by_setting.items()):
        lines.append(f"| {setting} | {np.std(entry['all']):.3f} | {np.std(entry['every client']):.3f} | "
                     f"{len(entry['all'])} |")
    return lines


def chance_table(floor: Floor, targets: list[float], runs_list: list[int], spreads: list[float],
                 redraws: int, rng: np.random.Generator) -> list[str]:
    """The split floor; per L*, runs and model spread the ceiling per cell, setting and three settings."""
    sds = ", ".join(f"L* {t:g}: {floor.split_sd(t):.4f} ({floor.split_sd(t) / t:.1%})" for t in targets)
    lines = [f"Kept {len(floor.pool_loss)} models (held-out pool loss {floor.pool_loss.min():.3f}-"
             f"{floor.pool_loss.max():.3f}), {floor.halves.shape[1]} split seeds each, {redraws} "
             f"simulated sweeps per row. Test-half sd over split seeds near each target: {sds}", "",
             "| L* | runs | model spread (x L*) | "
             + " | ".join(f"pi {p}: best chance (offset)" for p in PROBS)
             + " | one setting | three settings |",
             "|---|---|---|" + "---|" * len(PROBS) + "---|---|"]
    for target in targets:
        models, offsets = floor.around(target)
        for runs in runs_list:
            for spread in spreads:
                res = setting_chance(models, target, runs, spread, redraws, rng)
                text = " | ".join(f"{c:.2f} (x{offsets[i]:.3f})" for c, i in res["cells"].values())
                lines.append(f"| {target:g} | {runs} | {spread:g} | {text} | {res['setting']:.2f} | "
                             f"{res['setting'] ** 3:.3f} |")
    return lines


def report_label(path: Path) -> str:
    """A report's name in the tables: its file name, or its folder's for ``depl-fl report``'s report.json."""
    return path.parent.name if path.name == "report.json" else path.name


def measured_table(cells: list[dict], floor: Floor, spreads: list[float], redraws: int,
                   rng: np.random.Generator) -> list[str]:
    """Each measured cell beside its ceiling at each spread, and the count met against the expected."""
    lines = ["Measured static cells against the ceiling at each model spread (x L*):", "",
             "| report | runs | pi | L* | met / runs | calibration | goal met | significantly off | "
             + " | ".join(f"ceiling at {s:g}" for s in spreads) + " |",
             "|---|---|---|---|---|---|---|---|" + "---|" * len(spreads)]
    chances = np.zeros((len(cells), len(spreads)))
    for i, cell in enumerate(cells):
        models, _ = floor.around(cell["target"])
        for j, spread in enumerate(spreads):
            res = setting_chance(models, cell["target"], cell["runs"], spread, redraws, rng)
            chances[i, j] = res["cells"][cell["prob"]][0]
        cal = "-" if cell["calibration"] is None else f"{cell['calibration']:.2f}"
        lines.append(f"| {report_label(Path(cell['report']))} | {cell['runs']} | {cell['prob']:g} "
                     f"| {cell['target']:g} | {cell['successes']}/{cell['runs']} | {cal} "
                     f"| {'yes' if cell['met'] else 'no'} | {'yes' if cell['off'] else 'no'} | "
                     + " | ".join(f"{c:.2f}" for c in chances[i]) + " |")
    sds = np.sqrt(np.sum(chances * (1 - chances), axis=0))
    expected = ", ".join(f"{chances[:, j].sum():.1f} (sd {sds[j]:.1f}) at spread {spread:g}"
                         for j, spread in enumerate(spreads))
    met, off = sum(c["met"] for c in cells), sum(c["off"] for c in cells)
    return lines + ["", f"Cells meeting the goal: {met} of {len(cells)}; a planner at the ceiling would "
                        f"meet {expected} (cells independent). Cells significantly off the goal: {off}."]


def input_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the command line, in one line, or ``None``."""
    if min(args.targets) <= 0 or min(args.runs) < 2 or min(args.spread + args.report_spread) < 0:
        return "targets must be > 0, runs >= 2 and spreads >= 0"
    if args.redraws < 1 or args.splits < max(args.runs):
        return f"--redraws must be >= 1 and --splits ({args.splits}) at least the largest --runs"
    missing = [str(p) for p in args.reports if not p.is_file()]
    if missing:
        return f"no such report: {', '.join(missing)}"
    if args.bank is not None and not any(args.bank.glob("*/seed*/job.json")):
        return f"{args.bank}: not a trajectory bank (no <setting>/seed*/job.json)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=float, nargs="+", default=[0.3, 0.35, 0.45])
    parser.add_argument("--runs", type=int, nargs="+", default=[20, 40, 100])
    parser.add_argument("--spread", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.15, 0.2],
                        help="spread of each run's own model, as shares of L* (0: identical models)")
    parser.add_argument("--splits", type=int, default=4000, help="split seeds per kept model")
    parser.add_argument("--redraws", type=int, default=2000, help="simulated sweeps per figure")
    parser.add_argument("--seed", type=int, default=0, help="seed of the CNN's training and the redraws")
    parser.add_argument("--reports", type=Path, nargs="*", default=[],
                        help="sweep report JSONs whose static cells are set beside the ceiling")
    parser.add_argument("--report-spread", type=float, nargs="+", default=[0.0, 0.1],
                        help="model spreads at which the reports' cells get their ceiling")
    parser.add_argument("--bank", type=Path, default=None,
                        help="a trajectory bank (plan_regime/bank.py): its oscillation around the trend")
    parser.add_argument("--out", type=Path, default=None, help="write the tables here too")
    args = parser.parse_args(argv)
    problem = input_problem(args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        cells = measured_cells(args.reports)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: a report could not be read ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2

    targets = sorted(set(args.targets) | {c["target"] for c in cells})
    floor = Floor.measure(targets, args.splits, args.seed)
    rng = np.random.default_rng(args.seed)
    lines = ["The coverage window (counts meeting coverage >= pi with the Wilson interval covering pi) "
             "and the largest chance a binomial count lands in it:", "", *window_table(args.runs), "",
             *chance_table(floor, args.targets, args.runs, args.spread, args.redraws, rng)]
    if args.bank is not None:
        lines += ["", f"The model's own oscillation around its trend in the bank {args.bank.name} (pool "
                      "loss, rounds whose trend is within 0.7-1.3 x L*):", "", *bank_oscillation(args.bank)]
    if cells:
        lines += ["", *measured_table(cells, floor, args.report_spread, args.redraws, rng)]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shown = " ".join(argv if argv is not None else sys.argv[1:])
        args.out.write_text(f"`python benchmarks/goal_ceiling.py {shown}`\n\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
