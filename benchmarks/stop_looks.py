"""Does checking the stop rule every round break the stop margin's one-look promise?

Tracking stops at the first round whose ``validation loss + margin <= L*``;
the margin (:func:`depl_fl.tracking.split_margin.stop_margin`) is the
pi-quantile of ``test - validation`` for ONE look. Checked every round, the
rule picks the first round whose validation loss happens to be low, and the
same validation/test split serves every round of a run.

This benchmark trains one trajectory per setting in process (FedAvg of the
full model: ``--clients-per-round`` of ``--clients`` Dirichlet partitions a
round, the job's local training, :func:`depl_fl.task.slicing.aggregate`),
evaluates every round's merged model ONCE on the pooled held-out samples
(validation + test) and stores the per-sample losses. Then, for every split
seed, the pooled samples are re-split as a job splits them
(:func:`depl_fl.task.data.split_held_out`, half validation, half test) and
the stop rule is applied round by round:

- ``one look``: the margin of :func:`stop_margin` (today's rule; the job's
  margin seed ``split seed * 100003 + round``);
- ``joint``: :func:`depl_fl.tracking.split_margin.joint_stop_margin` over the
  looks so far whose validation loss was within reach (``<= L*``: where the
  job measures a margin), with the same redraws for every look.

Per rule, L* and pi: the share of split seeds that stop, the share of stops
whose test loss exceeds validation + margin (the margin's promise: at most
``1 - pi``), the share of stops with test > L* (what the guarantee judges),
and the mean stop round. For comparison, the one-look miss rate at fixed
rounds (the margin checked once, whatever the validation loss).
L* (fixed before any split was drawn): the running minimum of the pooled
loss at a quarter, half and three quarters of the rounds.

    nice -n 10 python benchmarks/stop_looks.py [--settings cnn resnet] [--seed 100] [--splits 1000]
        [--split-seed0 0] [--rounds 40] [--out benchmarks/results/tracking/stop_looks.md]

Trajectories are cached as ``.npz`` in ``--cache`` (default ``multirun/stop_looks``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from depl_fl.runs.report import wilson_interval  # noqa: E402
from depl_fl.task.data import split_held_out  # noqa: E402
from depl_fl.tracking.split_margin import margin_quantiles  # noqa: E402

PROBS = (0.8, 0.9, 0.95)
#: Hydra overrides of each setting (the guarantee sweeps' non-IID digits, 10 clients, alpha 0.5).
SETTINGS = {
    "cnn": ["model=digits_cnn", "num_clients=10", "partition.alpha=0.5"],
    "resnet": ["model=digits_resnet", "num_clients=10", "partition.alpha=0.5", "train.lr=0.2"],
}
RULES = ("one look", "joint")
#: Fractions of the rounds whose running-minimum pooled loss become the targets L*.
TARGET_AT = (0.25, 0.5, 0.75)


def train_trajectory(setting: str, seed: int, rounds: int, clients_per_round: int
                     ) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-sample pooled held-out losses of every round's merged model, the labels, the CPU seconds.

    Returns ``losses`` of shape ``(rounds, n_pooled)``: row ``r`` is the model
    after round ``r + 1``.
    """
    import torch

    from depl_fl.runs.runconfig import compose_config
    from depl_fl.task.local_update import initial_state, local_update, variant_model
    from depl_fl.task.partitions import client_partition, dataset, geometry
    from depl_fl.task.slicing import aggregate
    from depl_fl.task.subnets import network_layout
    from depl_fl.task.training import per_sample_losses

    torch.set_num_threads(1)
    t0 = time.process_time()
    cfg = compose_config([*SETTINGS[setting], f"seed={seed}", "simulation=inprocess"])
    geo = geometry(cfg)
    n = int(cfg["num_clients"])
    parts = [client_partition(cfg, i, n) for i in range(n)]
    data = dataset(cfg)
    x_pool, y_pool = np.asarray(data.x_test), np.asarray(data.y_test)
    train = cfg["train"]
    state = initial_state(geo, seed)
    structure = network_layout(geo).structure(state, 0.0)
    rng = np.random.default_rng(seed)
    out = []
    for r in range(rounds):
        picked = sorted(rng.choice(n, size=clients_per_round, replace=False).tolist())
        replies = []
        for c in picked:
            x, y = parts[c]
            res = local_update(state, geo, 0.0, x, y, epochs=int(train["local_epochs"]),
                               lr=float(train["lr"]),
                               batch_size=int(train["batch_size"]), seed=seed * 100_003 + r * 101 + c)
            replies.append((res.kept_state, res.num_examples))
        state = aggregate(state, replies, structure)
        out.append(per_sample_losses(variant_model(state, geo, 0.0), x_pool, y_pool))
    return np.asarray(out), y_pool, time.process_time() - t0


def targets_of(losses: np.ndarray) -> list[float]:
    """L*: the running minimum of the pooled mean loss at :data:`TARGET_AT` of the rounds."""
    running = np.minimum.accumulate(losses.mean(axis=1))
    return [round(float(running[max(0, int(round(f * len(running))) - 1)]), 4) for f in TARGET_AT]


def split_runs(losses: np.ndarray, labels: np.ndarray, targets: list[float], split_seed: int,
               draws: int, fixed_rounds: list[int]) -> dict[str, Any]:
    """Both rules on one split: per rule, target and pi the stop round (or None), miss, test > L*."""
    val_idx, test_idx = split_held_out(labels, 0.5, split_seed)
    val_l = losses[:, val_idx]
    val, test = val_l.mean(axis=1), losses[:, test_idx].mean(axis=1)
    n_test = test_idx.size
    single: dict[int, np.ndarray] = {}

    def one_look(k: int) -> np.ndarray:
        if k not in single:
            single[k] = margin_quantiles(val_l[k:k + 1], n_test, PROBS, draws=draws,
                                         seed=split_seed * 100_003 + k + 1, joint=False)
        return single[k]

    out: dict[str, Any] = {"fixed": {k: (test[k] - val[k] > one_look(k)).tolist() for k in fixed_rounds}}
    for rule in RULES:
        per_target = []
        for target in targets:
            stops: list[dict[str, Any] | None] = [None] * len(PROBS)
            reach: list[int] = []
            for k in range(len(val)):
                if val[k] > target:
                    continue
                reach.append(k)
                margins = (one_look(k) if rule == "one look" else
                           margin_quantiles(val_l[reach], n_test, PROBS, draws=draws,
                                            seed=split_seed * 100_003 + k + 1, joint=True))
                for i, m in enumerate(margins):
                    if stops[i] is None and val[k] + m <= target:
                        stops[i] = {"round": k + 1, "miss": bool(test[k] - val[k] > m),
                                    "over": bool(test[k] > target), "looks": len(reach)}
                if all(s is not None for s in stops):
                    break
            per_target.append(stops)
        out[rule] = per_target
    return out


def summarise(runs: list[dict[str, Any]], targets: list[float], fixed_rounds: list[int]) -> dict[str, Any]:
    """Rates over split seeds, with Wilson 95% intervals."""
    n = len(runs)
    summary: dict[str, Any] = {"fixed": {}, "rules": {}}
    for k in fixed_rounds:
        row = []
        for i in range(len(PROBS)):
            c = sum(r["fixed"][k][i] for r in runs)
            row.append({"miss": c, "n": n, "wilson": wilson_interval(c, n)})
        summary["fixed"][k + 1] = row
    for rule in RULES:
        cells = []
        for t, target in enumerate(targets):
            for i, prob in enumerate(PROBS):
                stops = [r[rule][t][i] for r in runs if r[rule][t][i] is not None]
                miss = sum(s["miss"] for s in stops)
                over = sum(s["over"] for s in stops)
                cells.append({"target": target, "prob": prob, "splits": n, "stopped": len(stops),
                              "miss": miss, "over": over,
                              "miss_wilson": wilson_interval(miss, len(stops)) if stops else None,
                              "over_wilson": wilson_interval(over, len(stops)) if stops else None,
                              "mean_round": float(np.mean([s["round"] for s in stops])) if stops else None,
                              "mean_looks": float(np.mean([s["looks"] for s in stops])) if stops else None})
        summary["rules"][rule] = cells
    return summary


def _rate(c: int, n: int, wilson: Any) -> str:
    return f"{c}/{n} = {c / n:.3f} [{wilson[0]:.3f}, {wilson[1]:.3f}]" if n else "-"


def _mean(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def markdown(setting: str, seed: int, pooled: np.ndarray, targets: list[float], summary: dict[str, Any],
             meta: dict[str, Any]) -> str:
    """One setting's tables."""
    lines = [f"### {setting} (trajectory seed {seed}; split seeds {meta['split_seeds']})", "",
             f"{meta['rounds']} rounds, {meta['clients_per_round']} of 10 clients a round; pooled held-out "
             f"loss by round: {', '.join(f'{v:.3f}' for v in pooled)}. "
             f"Training {meta['train_cpu_s']:.0f} s CPU, "
             f"splits {meta['split_cpu_s']:.0f} s CPU.", "",
             "One look at a fixed round (the margin's own calibration): P[test - validation > margin]", "",
             "| round | pooled loss | " + " | ".join(f"π {p} (≤ {1 - p:.2f})" for p in PROBS) + " |",
             "|---|---|" + "---|" * len(PROBS)]
    for rnd, row in summary["fixed"].items():
        lines.append(f"| {rnd} | {pooled[int(rnd) - 1]:.3f} | "
                     + " | ".join(_rate(c["miss"], c["n"], c["wilson"]) for c in row) + " |")
    lines += ["", "First passage (the rule checked every round, stop at the first pass). A miss: test - "
              "validation > margin at the stop; of stops (what the sweeps' stop tables count) and of all "
              "split seeds (a split that never stops cannot miss here: the promise bounds this one). "
              f"Rounds: to the stop, {meta['rounds']} for a split that never stops.", "",
              "| rule | L* | π | stopped | miss: of stops [Wilson] | miss: of all splits [Wilson] "
              "| test > L* at the stop: of stops | of all splits [Wilson] | mean stop round "
              "| mean rounds | mean looks within reach at the stop |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for rule, cells in summary["rules"].items():
        for c in cells:
            stopped, n = c["stopped"], c["splits"]
            rounds = ((c["mean_round"] or 0.0) * stopped + meta["rounds"] * (n - stopped)) / n
            lines.append(f"| {rule} | {c['target']:.3f} | {c['prob']} | {stopped}/{n} | "
                         f"{_rate(c['miss'], stopped, c['miss_wilson'])} | "
                         f"{_rate(c['miss'], n, wilson_interval(c['miss'], n))} | "
                         f"{_rate(c['over'], stopped, c['over_wilson'])} | "
                         f"{_rate(c['over'], n, wilson_interval(c['over'], n))} | "
                         f"{_mean(c['mean_round'])} | {rounds:.1f} | {_mean(c['mean_looks'])} |")
    return "\n".join(lines) + "\n"


def rewrite(figures_json: Path, out: Path | None) -> int:
    """The markdown of an earlier run's figures (no split is drawn again)."""
    if not figures_json.is_file():
        print(f"error: --report: no such file {figures_json}", file=sys.stderr)
        return 2
    figures = json.loads(figures_json.read_text())
    texts = [f"`{figures['command']}`", ""]
    for setting, fig in figures["settings"].items():
        texts.append(markdown(setting, fig["seed"], np.asarray(fig["pooled"]), fig["targets"], fig, fig))
    text = "\n".join(texts)
    if out is None:
        print(text)
    else:
        out.write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--seed", type=int, default=100, help="seed of the trajectories")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--clients-per-round", type=int, default=4)
    parser.add_argument("--splits", type=int, default=1000, help="split seeds")
    parser.add_argument("--split-seed0", type=int, default=0, help="first split seed")
    parser.add_argument("--draws", type=int, default=2000, help="bootstrap redraws per margin")
    parser.add_argument("--cache", type=Path, default=Path("multirun/stop_looks"))
    parser.add_argument("--out", type=Path, default=None, help="markdown here, the figures in its .json")
    parser.add_argument("--report", type=Path, default=None,
                        help="only write the markdown of this .json of an earlier run (to --out or stdout)")
    args = parser.parse_args(argv)
    if args.report is not None:
        return rewrite(args.report, args.out)
    if args.splits < 1 or args.draws < 1 or args.rounds < 4 or not 1 <= args.clients_per_round <= 10:
        print("error: --splits, --draws >= 1, --rounds >= 4, 1 <= --clients-per-round <= 10", file=sys.stderr)
        return 2
    command = "python benchmarks/stop_looks.py " + " ".join(argv if argv is not None else sys.argv[1:])
    texts, figures = [f"`{command}`", ""], {"command": command, "settings": {}}
    for setting in args.settings:
        args.cache.mkdir(parents=True, exist_ok=True)
        cached = args.cache / f"{setting}_{args.seed}_{args.rounds}_{args.clients_per_round}.npz"
        if cached.exists():
            z = np.load(cached)
            losses, labels, train_cpu = z["losses"], z["labels"], float(z["train_cpu_s"])
        else:
            losses, labels, train_cpu = train_trajectory(setting, args.seed, args.rounds,
                                                         args.clients_per_round)
            np.savez(cached, losses=losses, labels=labels, train_cpu_s=train_cpu)
        targets = targets_of(losses)
        fixed = sorted({max(0, int(round(f * args.rounds)) - 1) for f in TARGET_AT})
        seeds = range(args.split_seed0, args.split_seed0 + args.splits)
        t0 = time.process_time()
        runs = [split_runs(losses, labels, targets, s, args.draws, fixed) for s in seeds]
        split_cpu = time.process_time() - t0
        summary = summarise(runs, targets, fixed)
        meta = {"rounds": args.rounds, "clients_per_round": args.clients_per_round, "train_cpu_s": train_cpu,
                "split_cpu_s": split_cpu, "split_seeds": f"{seeds.start}-{seeds.stop - 1}",
                "draws": args.draws}
        pooled = losses.mean(axis=1)
        texts.append(markdown(setting, args.seed, pooled, targets, summary, meta))
        figures["settings"][setting] = {"seed": args.seed, "targets": targets, "pooled": pooled.tolist(),
                                        **meta, **summary}
        print(texts[-1], flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(texts))
        args.out.with_suffix(".json").write_text(json.dumps(figures, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
