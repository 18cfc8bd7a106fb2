"""Why a tracked job stops on its validation loss while its test loss misses the target.

Reads finished tracking jobs (their ``results.json`` and ``checkpoint.pkl``, which holds the final
global model) and, per job:

- the stop: the last round's validation loss, its stop margin and test loss, whether the stop rule
  (``validation + margin <= L*``) passed there, and over the training rounds with a measured margin
  the mean ``test - validation`` gap and the share of rounds where it exceeded the margin (a gap that
  holds at every look belongs to the split, not to the look that stopped);
- the final model, evaluated again on the job's validation and test splits: per-sample losses, their
  class mix, the samples with a loss above ``--bad`` (confidently wrong) and how much of each mean
  they carry, the mean without them;
- the same final model on ``--resplits`` other validation/test splits of the pooled held-out samples
  (``depl_fl.task.data.split_held_out``, split seeds ``--split-seed0`` on): how often its gap exceeds
  the one-look margin (``stop_margin``) when the split, not the model, is redrawn, and where the
  job's own split's gap ranks among them.

    python benchmarks/stop_misses.py JOBS_DIR [JOBS_DIR ...] [--resplits 200] [--out FILE.json]

Writes a markdown table to stdout and, with ``--out``, the figures as json.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from depl_fl.task.data import split_held_out  # noqa: E402
from depl_fl.task.geometry import model_id  # noqa: E402
from depl_fl.task.local_update import loaded_variant  # noqa: E402
from depl_fl.task.losses import load_loss, loss_spec  # noqa: E402
from depl_fl.task.partitions import dataset, geometry, test_split, validation_split  # noqa: E402
from depl_fl.task.training import evaluate_with_losses  # noqa: E402
from depl_fl.tracking.split_margin import margin_quantiles, stop_margin  # noqa: E402

#: Probabilities whose one-look margins are checked on the re-splits (0.975 and 0.99: stricter margins).
RESPLIT_PROBS = [0.8, 0.9, 0.95, 0.975, 0.99]


def job_dirs(roots: list[str]) -> list[Path]:
    """Every folder under ``roots`` that holds a results.json and a checkpoint.pkl, by seed."""
    found = [p.parent for root in roots for p in Path(root).rglob("results.json")
             if (p.parent / "checkpoint.pkl").exists()]
    return sorted(found, key=lambda d: json.loads((d / "results.json").read_text())["seed"])


def round_figures(rounds: list[dict[str, Any]], target: float) -> dict[str, Any]:
    """The stop round's figures and the gap over the training rounds that measured a margin."""
    train = [r for r in rounds if r.get("phase") != "profile" and r.get("loss") is not None]
    last = train[-1]
    measured = [r for r in train if r.get("loss_margin") is not None
                and math.isfinite(float(r["loss_margin"])) and r.get("test_loss") is not None]
    gaps = np.array([r["test_loss"] - r["loss"] for r in measured])
    over = np.array([r["test_loss"] - r["loss"] > r["loss_margin"] for r in measured])
    passing = [r["round"] for r in measured if r["loss"] + r["loss_margin"] <= target]
    tested = [r for r in train if r.get("test_loss") is not None]
    all_gaps = np.array([r["test_loss"] - r["loss"] for r in tested])
    return {"mean_gap_train": float(all_gaps.mean()), "mean_gap_last10": float(all_gaps[-10:].mean()),
            "last_round": last["round"], "val": last["loss"], "margin": last.get("loss_margin"),
            "test": last.get("test_loss"), "passes": passing,
            "measured_rounds": len(measured), "mean_gap_measured": float(gaps.mean()) if gaps.size else None,
            "share_gap_over_margin": float(over.mean()) if over.size else None,
            "train_rounds": len(train)}


def variant_compression(cfg: dict[str, Any], model_name: str) -> float:
    """The compression of variant ``model_name``: a spec network's ``model.variants``, else the
    ``model.compressions`` whose id (``full``, ``p50``...) it is."""
    variants = cfg["model"].get("variants")
    if variants:
        return next(float(v["compression"]) for v in variants if v["id"] == model_name)
    return next(float(c) for c in cfg["model"]["compressions"] if model_id(float(c)) == model_name)


def final_model_figures(job: Path, cfg: dict[str, Any], last_model: str, last_round: int,
                        bad: float, resplits: int, split_seed0: int) -> dict[str, Any]:
    """Per-sample figures of the checkpointed final model on the job's splits and on re-splits."""
    import torch

    torch.set_num_threads(1)
    state = pickle.loads((job / "checkpoint.pkl").read_bytes())["global_state"]
    compression = variant_compression(cfg, last_model)
    loss_fn = load_loss(loss_spec(cfg))
    model = loaded_variant(state, geometry(cfg), compression, "cpu")
    prob, seed, target = float(cfg["target"]["prob"]), int(cfg["seed"]), float(cfg["target"]["loss"])
    (xv, yv), (xt, yt) = validation_split(cfg), test_split(cfg)
    val, val_acc, lv = evaluate_with_losses(model, xv, yv, loss_fn=loss_fn)
    test, test_acc, lt = evaluate_with_losses(model, xt, yt, loss_fn=loss_fn)
    margin = stop_margin(lv, len(yt), prob, seed=seed * 100_003 + int(last_round))
    own_margins = margin_quantiles(lv[None, :], len(yt), RESPLIT_PROBS, seed=seed * 100_003 + int(last_round),
                                   joint=False)
    classes = int(max(yv.max(), yt.max())) + 1

    def tail(losses: np.ndarray) -> dict[str, Any]:
        heavy = np.sort(losses[losses > bad])[::-1]
        top5 = np.sort(losses)[::-1][:5]
        return {"n": int(losses.size), "bad": int(heavy.size),
                "bad_share_of_mean": float(heavy.sum() / losses.sum()),
                "mean_without_bad": float(losses[losses <= bad].mean()),
                "top5": [round(float(x), 2) for x in top5],
                "median": float(np.median(losses)), "q90": float(np.quantile(losses, 0.9))}

    held = dataset(cfg)
    x_all, y_all = np.asarray(held.x_test), np.asarray(held.y_test)
    _, _, l_all = evaluate_with_losses(model, x_all, y_all, loss_fn=loss_fn)
    own_v, own_t = split_held_out(y_all, 0.5, seed)
    assert np.isclose(l_all[own_v].mean(), val) and np.isclose(l_all[own_t].mean(), test)
    gaps, over, margins = [], [], []
    over_at = np.zeros(len(RESPLIT_PROBS))
    for s in range(split_seed0, split_seed0 + resplits):
        vi, ti = split_held_out(y_all, 0.5, s)
        ms = margin_quantiles(l_all[vi][None, :], ti.size, RESPLIT_PROBS, seed=s * 100_003 + int(last_round),
                              joint=False)
        m = float(ms[RESPLIT_PROBS.index(prob)]) if prob in RESPLIT_PROBS else stop_margin(
            l_all[vi], ti.size, prob, seed=s * 100_003 + int(last_round))
        gap = float(l_all[ti].mean() - l_all[vi].mean())
        gaps.append(gap)
        margins.append(m)
        over.append(gap > m)
        over_at += gap > ms
    gaps_a = np.array(gaps)
    return {"val": float(val), "test": float(test), "gap": float(test - val), "margin": float(margin),
            "val_acc": float(val_acc), "test_acc": float(test_acc), "pooled": float(l_all.mean()),
            "val_classes": np.bincount(yv, minlength=classes).tolist(),
            "test_classes": np.bincount(yt, minlength=classes).tolist(),
            "val_tail": tail(lv), "test_tail": tail(lt),
            "resplit_gap_over_margin": float(np.mean(over)), "resplit_gap_sd": float(gaps_a.std(ddof=1)),
            "resplit_margin_mean": float(np.mean(margins)),
            "resplit_over_at": {str(p): float(v / resplits)
                                for p, v in zip(RESPLIT_PROBS, over_at, strict=True)},
            "own_margins_at": {str(p): float(m) for p, m in zip(RESPLIT_PROBS, own_margins, strict=True)},
            "own_gap_rank": float(np.mean(gaps_a < test - val)),
            "target_met_pooled": bool(l_all.mean() <= target), "pooled_losses": l_all.tolist()}


def cross_table(rows: list[dict[str, Any]], bad: float, resplits: int, split_seed0: int) -> str:
    """Every final model's gap on every job's split: is a seed's split adverse for any model?

    Row: the split of a job's seed; figures: the mean and the range of ``test - validation`` of all
    final models on that split, the number of models whose gap there is above their own run's margin,
    and how many of the pooled samples that are badly classified (loss above ``bad``) by at least half
    of the models fall in that split's validation / test half. Then the one-look misses on the
    re-splits at every probability of ``RESPLIT_PROBS``, and the split's effect on many split seeds.
    """
    losses = np.array([r["final"]["pooled_losses"] for r in rows])
    margins = np.array([r["final"]["margin"] for r in rows])
    cfg = json.loads((Path(rows[0]["job"]) / "results.json").read_text())["config"]
    y_all = np.asarray(dataset(cfg).y_test)
    hard = np.mean(losses > bad, axis=0) >= 0.5
    classes = np.bincount(y_all[hard], minlength=int(y_all.max()) + 1).tolist()
    lines = [f"Samples badly classified (loss > {bad:g}) by at least half of the {len(rows)} final models: "
             f"{int(hard.sum())} of {losses.shape[1]}, per class {classes}.", "",
             "| split of seed | mean gap of all final models | min / max | models with gap > own margin "
             "| hard samples in validation / test |", "|---|---|---|---|---|"]
    for r in rows:
        vi, ti = split_held_out(y_all, 0.5, int(r["seed"]))
        gaps = losses[:, ti].mean(axis=1) - losses[:, vi].mean(axis=1)
        lines.append(f"| {r['seed']} | {gaps.mean():+.3f} | {gaps.min():+.3f} / {gaps.max():+.3f} "
                     f"| {int(np.sum(gaps > margins))} of {len(rows)} "
                     f"| {int(hard[vi].sum())} / {int(hard[ti].sum())} |")
    over_at = {p: np.mean([r["final"]["resplit_over_at"][str(p)] for r in rows]) for p in RESPLIT_PROBS}
    lines += ["", f"One look, the final models on {resplits} re-splits each (split seeds {split_seed0} on): "
              "share of (model, split) with test - validation above the margin at probability p "
              "(promise 1 - p): " + ", ".join(f"p {p}: {v:.3f}" for p, v in over_at.items()) + "."]
    effect = np.array([_effect(losses, y_all, s)
                       for s in range(SPLIT_EFFECT_SEED0, SPLIT_EFFECT_SEED0 + SPLIT_EFFECT_SPLITS)])
    ranks = ", ".join(f"{r['seed']} {np.mean(effect < _effect(losses, y_all, int(r['seed']))):.3f}"
                      for r in rows)
    lines += ["", f"The split's effect (gap averaged over all final models) on {SPLIT_EFFECT_SPLITS} other "
              f"split seeds ({SPLIT_EFFECT_SEED0} on): sd {effect.std(ddof=1):.3f}, "
              "quantiles 0.9 / 0.95 / 0.99 "
              + " / ".join(f"{np.quantile(effect, q):+.3f}" for q in (0.9, 0.95, 0.99))
              + f"; each job seed's split effect ranks above this share of them: {ranks}."]
    lines += ["", "Each job's own final model and split: the gap and the one-look margin at each probability "
              "(* gap above it)", "",
              "| seed | gap | " + " | ".join(f"margin p {p}" for p in RESPLIT_PROBS) + " |",
              "|" + "---|" * (2 + len(RESPLIT_PROBS))]
    for r in rows:
        fm = r["final"]
        at = [fm["own_margins_at"][str(p)] for p in RESPLIT_PROBS]
        cells = [f"{m:.3f}{'*' if fm['gap'] > m else ''}" for m in at]
        lines.append(f"| {r['seed']} | {fm['gap']:+.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: Split seeds on which the split's effect is drawn (none of them a job seed of the benchmarks).
SPLIT_EFFECT_SEED0, SPLIT_EFFECT_SPLITS = 90_000, 2000


def _effect(losses: np.ndarray, y_all: np.ndarray, seed: int) -> float:
    vi, ti = split_held_out(y_all, 0.5, seed)
    return float(np.mean(losses[:, ti].mean(axis=1) - losses[:, vi].mean(axis=1)))


def _rounded(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def job_table(rows: list[dict[str, Any]], bad: float) -> str:
    """One line per job: the stop, the gap over its rounds, its final model's tails and re-splits."""
    head = ["seed", "met", "stop", "rounds", "val", "margin", "test", "gap", "passes (first)",
            "gap > margin, measured rounds", "mean gap, measured rounds",
            "mean gap, all / last 10 training rounds", "class counts max diff",
            f"val bad / test bad (> {bad:g})", "test mean w/o bad", "val mean w/o bad",
            "pooled 360", "re-splits gap > margin", "own gap rank"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        rf, fm = r["rounds"], r["final"]
        first = rf["passes"][0] if rf["passes"] else "-"
        class_diff = max(abs(a - b) for a, b in zip(fm["val_classes"], fm["test_classes"], strict=True))
        cells = [r["seed"], "yes" if r["met"] else "**no**", r["stop_reason"] or "-", rf["last_round"],
                 f"{fm['val']:.3f}", f"{fm['margin']:.3f}", f"{fm['test']:.3f}", f"{fm['gap']:+.3f}",
                 f"{len(rf['passes'])} ({first})",
                 f"{_rounded(rf['share_gap_over_margin'], 2)} of {rf['measured_rounds']}",
                 _rounded(rf["mean_gap_measured"], 3),
                 f"{rf['mean_gap_train']:+.3f} / {rf['mean_gap_last10']:+.3f}", class_diff,
                 f"{fm['val_tail']['bad']} / {fm['test_tail']['bad']}",
                 f"{fm['test_tail']['mean_without_bad']:.3f}", f"{fm['val_tail']['mean_without_bad']:.3f}",
                 f"{fm['pooled']:.3f}", f"{fm['resplit_gap_over_margin']:.3f}", f"{fm['own_gap_rank']:.2f}"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+")
    parser.add_argument("--bad", type=float, default=2.0, help="per-sample loss counted as confidently wrong")
    parser.add_argument("--resplits", type=int, default=200)
    parser.add_argument("--split-seed0", type=int, default=50_000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    jobs = job_dirs(args.roots)
    if not jobs:
        print("stop_misses: no job folder with results.json and checkpoint.pkl", file=sys.stderr)
        return 2
    rows = []
    for job in jobs:
        res = json.loads((job / "results.json").read_text())
        cfg = dict(res["config"])
        s = res["summary"]
        target = float(s["target_loss"])
        rf = round_figures(res["rounds"], target)
        last = [r for r in res["rounds"] if r.get("phase") != "profile"][-1]
        fm = final_model_figures(job, cfg, last["model"], rf["last_round"], args.bad, args.resplits,
                                 args.split_seed0)
        if not math.isclose(fm["val"], float(s["final_loss"]), rel_tol=1e-5):
            print(f"stop_misses: {job}: the checkpoint's model gives validation loss {fm['val']:.6g}, "
                  f"the job recorded {s['final_loss']:.6g}", file=sys.stderr)
            return 2
        rows.append({"job": str(job), "seed": res["seed"], "met": s["met"],
                     "stop_reason": s.get("stop_reason"), "stop_looks": cfg["tracking"].get("stop_looks"),
                     "rounds": rf, "final": fm})
    print(job_table(rows, args.bad))
    print()
    print(cross_table(rows, args.bad, args.resplits, args.split_seed0))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
