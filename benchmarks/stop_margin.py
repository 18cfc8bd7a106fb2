"""How often a stopped model's test loss exceeds ``validation loss + margin``.

Tracking stops when ``validation loss + margin <= target``; the run is then
judged on the test split. For a stop at probability pi the margin must leave
the test loss above it in at most ``1 - pi`` of the runs. This benchmark
trains the task's CNN centrally on the digits training data, keeps the model
at a few loss levels, and for every level and ``--splits`` seeds of the
validation/test split (the run seed's split, ``depl_fl.task.data.split_held_out``)
counts how often the test loss lies above

- the Gaussian margin ``Phi^-1(pi) * sd * sqrt(1/n_val + 1/n_test)`` (the
  textbook margin), and
- the bootstrap-t margin :func:`depl_fl.tracking.split_margin.stop_margin`,

both read from the validation losses only. Misses are given with their
Wilson 95% interval; the promise is ``1 - pi``.

    python benchmarks/stop_margin.py [--splits 400] [--out benchmarks/results/stop_margin.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from depl_fl.runs.report import wilson_interval  # noqa: E402
from depl_fl.task.data import load_dataset, split_held_out  # noqa: E402
from depl_fl.tracking.split_margin import gaussian_margin, stop_margin  # noqa: E402

PROBS = (0.8, 0.9, 0.95)


def trained_losses(levels: list[float], seed: int, *, batch: int = 64, lr: float = 0.02,
                   max_steps: int = 2000) -> dict[float, np.ndarray]:
    """Per-sample held-out losses of the digits CNN when its mean first falls below each level.

    The CNN trains centrally on the digits training data, one small step
    (``batch`` samples, learning rate ``lr``) at a time, at most ``max_steps``
    steps, so that levels are passed closely; levels passed in one step share
    that step's losses.
    """
    import torch

    from depl_fl.task.models import build_model
    from depl_fl.task.training import per_sample_losses, train_local

    torch.set_num_threads(1)
    data = load_dataset("digits")
    x, y = np.asarray(data.x_train), np.asarray(data.y_train)
    xh, yh = np.asarray(data.x_test), np.asarray(data.y_test)
    model = build_model("digits_cnn", 10, x.shape[1], x.shape[2], seed=seed)
    rng = np.random.default_rng(seed)
    out: dict[float, np.ndarray] = {}
    pending = sorted(levels, reverse=True)
    for step in range(max_steps):
        picked = rng.choice(len(y), size=batch, replace=False)
        train_local(model, x[picked], y[picked], epochs=1, lr=lr, batch_size=32, seed=seed + step)
        losses = per_sample_losses(model, xh, yh)
        while pending and losses.mean() <= pending[0]:
            out[pending.pop(0)] = losses
        if not pending:
            break
    return out


def misses(losses: np.ndarray, labels: np.ndarray, splits: int, draws: int) -> dict[str, list[int]]:
    """Per margin and pi: the split seeds whose test loss lies above validation + margin."""
    count = {"gaussian": [0] * len(PROBS), "bootstrap-t": [0] * len(PROBS)}
    for seed in range(splits):
        val_idx, test_idx = split_held_out(labels, 0.5, seed)
        val, test = losses[val_idx], losses[test_idx].mean()
        for i, prob in enumerate(PROBS):
            count["gaussian"][i] += test > val.mean() + gaussian_margin(val, test_idx.size, prob)
            count["bootstrap-t"][i] += test > val.mean() + stop_margin(val, test_idx.size, prob,
                                                                        draws=draws, seed=seed)
    return count


def report(by_level: dict[float, np.ndarray], labels: np.ndarray, splits: int, draws: int) -> str:
    """Markdown table: per loss level and margin, the miss rate at each pi with its Wilson interval."""
    lines = [f"Miss rate P[test > validation + margin] over {splits} split seeds "
             f"(promise: {' / '.join(f'{1 - p:.2f}' for p in PROBS)} at pi = "
             f"{' / '.join(str(p) for p in PROBS)})", "",
             "| held-out loss | margin | " + " | ".join(f"pi {p}" for p in PROBS) + " |",
             "|---|---|" + "---|" * len(PROBS)]
    for level in sorted(by_level):
        losses = by_level[level]
        for name, counts in misses(losses, labels, splits, draws).items():
            cells = []
            for c in counts:
                lo, hi = wilson_interval(c, splits)
                cells.append(f"{c / splits:.3f} [{lo:.3f}, {hi:.3f}]")
            lines.append(f"| {losses.mean():.3f} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=400, help="split seeds per loss level")
    parser.add_argument("--draws", type=int, default=2000, help="bootstrap redraws per margin")
    parser.add_argument("--levels", type=float, nargs="+", default=[0.6, 0.45, 0.35, 0.25, 0.15])
    parser.add_argument("--seed", type=int, default=0, help="seed of the CNN's training")
    parser.add_argument("--out", type=Path, default=None, help="write the table here too")
    args = parser.parse_args(argv)
    if args.splits < 1 or args.draws < 1:
        parser.error("--splits and --draws must be at least 1")
    labels = np.asarray(load_dataset("digits").y_test)
    text = report(trained_losses(args.levels, args.seed), labels, args.splits, args.draws)
    print(text, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(f"`python benchmarks/stop_margin.py --splits {args.splits}`\n\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
