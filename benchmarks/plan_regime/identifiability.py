"""Can one job's exploration fit the learning curve's floor and power itself?

An exploration stops near ``stop_loss_factor x L*`` (2 L* by default) after
about ten rounds. Below that, the plan regime's learning curve
``L_k = f + A (k + k0)**-alpha`` (``alpha = 1 / (p - 1)``) carries the plan
down to the target; its floor ``f`` and power ``p`` are task constants
(:mod:`depl_fl.tracking.learning_curve`). This script draws synthetic
exploration trajectories from that curve with known ``f, p`` and the plan
regime's own oscillation (``eval_std = o sqrt(L)``), fits ``f, p`` back by
least squares over a grid (the curve through the first and last loss, as
:func:`depl_fl.tracking.learning_curve.rate_coefficient` puts it), and
reports the spread of the fitted constants and of the rounds they predict from
the exploration's end to ``L*``, against the true rounds.

    python benchmarks/plan_regime/identifiability.py [--out FILE.md] [--trials N] [--seed S]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.sweep_io import write_report  # noqa: E402

FIRST, TARGET, ROUNDS = 2.3, 0.35, 10
FLOORS = np.linspace(0.0, 0.34, 35)
POWERS = np.array([1.02, 1.04, 1.08, 1.12, 1.2, 1.3, 1.5, 1.75, 2.0, 2.5, 3.0])


def curve(floor: float, power: float, first: float, last: float, rounds: int, k: np.ndarray) -> np.ndarray:
    """The learning curve through ``(0, first)`` and ``(rounds, last)`` at rounds ``k``."""
    alpha = 1.0 / (power - 1.0)
    progress = 1.0 - ((last - floor) / (first - floor)) ** (1.0 / alpha)
    t_end = rounds / progress
    return floor + (last - floor) * (t_end / (k + t_end - rounds)) ** alpha


def rounds_to(target: float, floor: float, power: float, first: float, last: float, rounds: int) -> float:
    """Rounds after the exploration's end until the curve reaches ``target`` (inf below its floor)."""
    if target <= floor:
        return float("inf")
    alpha = 1.0 / (power - 1.0)
    t_end = rounds / (1.0 - ((last - floor) / (first - floor)) ** (1.0 / alpha))
    return t_end * ((last - floor) / (target - floor)) ** (1.0 / alpha) - t_end


def fit(losses: np.ndarray) -> tuple[float, float]:
    """Least-squares ``(floor, power)`` of a trajectory over the grid (curve through its ends)."""
    k = np.arange(len(losses), dtype=float)
    first, last, rounds = float(losses[0]), float(losses[-1]), len(losses) - 1
    best, arg = np.inf, (float("nan"), float("nan"))
    for floor in FLOORS[FLOORS < 0.5 * last]:
        for power in POWERS:
            sse = float(np.sum((curve(floor, power, first, last, rounds, k)[1:-1] - losses[1:-1]) ** 2))
            if sse < best:
                best, arg = sse, (float(floor), float(power))
    return arg


def trial(rng: np.random.Generator, floor: float, power: float, oscillation: float) -> tuple[float, ...]:
    """One synthetic exploration: its fitted floor and power, fitted and true rounds to ``L*``."""
    k = np.arange(ROUNDS + 1, dtype=float)
    true = curve(floor, power, FIRST, 2 * TARGET, ROUNDS, k)
    noisy = true + oscillation * np.sqrt(true) * rng.standard_normal(true.size)
    noisy[0] = FIRST
    noisy = np.maximum(noisy, 0.5 * TARGET)
    f_hat, p_hat = fit(noisy)
    last = float(noisy[-1])
    return (f_hat, p_hat, rounds_to(TARGET, f_hat, p_hat, FIRST, last, ROUNDS),
            rounds_to(TARGET, floor, power, FIRST, last, ROUNDS))


def _q(values: np.ndarray) -> str:
    finite = values[np.isfinite(values)]
    share = 1 - finite.size / values.size
    body = "n/a" if finite.size == 0 else "{:.3g} [{:.3g}, {:.3g}]".format(
        *np.quantile(finite, [0.5, 0.1, 0.9]))
    return body + (f" ({share:.0%} never)" if share else "")


def report(trials: int, seed: int) -> str:
    """The markdown table: per true (floor, power, oscillation), the fitted spreads."""
    rng = np.random.default_rng(seed)
    lines = ["# The learning curve's floor and power from one exploration", "",
             f"`python benchmarks/plan_regime/identifiability.py --trials {trials} --seed {seed}`", "",
             f"Synthetic explorations: {ROUNDS} rounds from loss {FIRST} to 2 L* = {2 * TARGET} on the "
             "learning curve of the true floor f and power p, plus the oscillation o sqrt(L) per round; "
             "f and p fitted back by least squares (grid f in [0, 0.34] below half the last loss, p in "
             f"{POWERS.min()}-{POWERS.max()}); rounds from the exploration's end to L* = {TARGET} by the "
             "fitted and by the true constants (both through the noisy first and last loss). "
             "Median [10%, 90%] over the trials.", "",
             "| true f | true p | o | fitted f | fitted p | rounds to L*, fitted curve | "
             "rounds to L*, true f and p |", "|---|---|---|---|---|---|---|"]
    for floor, power in ((0.145, 1.08), (0.05, 1.5), (0.25, 1.2)):
        for oscillation in (0.0, 0.02, 0.16):
            rows = np.array([trial(rng, floor, power, oscillation) for _ in range(trials)])
            lines.append(f"| {floor} | {power} | {oscillation} | {_q(rows[:, 0])} | {_q(rows[:, 1])} | "
                         f"{_q(rows[:, 2])} | {_q(rows[:, 3])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.trials < 1:
        print(f"error: --trials must be at least 1, got {args.trials}", file=sys.stderr)
        return 2
    text = report(args.trials, args.seed)
    write_report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
