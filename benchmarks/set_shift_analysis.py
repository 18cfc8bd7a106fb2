"""The set shift: how a round on a new client set departs from the profile's prediction.

Reads the ``results.json`` of a sweep (e.g. the static arms of
``benchmarks/settings_sweep.sh``) and, for every job, compares the observed
decrease ``d = L_before - L_after`` of a round with the mean the job's own
fitted profile predicts for it, ``mu_m(L_before) * r_eff**a`` (the contract's
run step, ``r_eff = c_S * n_S / reference_samples``):

1. training rounds: the plan's first round against its later rounds, on a
   subset of the clients against on every client;
2. the first round's shortfall ``mu * r_eff**a - d`` per label-coverage gap
   ``1 - c_S`` of the plan's set, with the share of jobs that met the target;
3. exploration groups (every one starts from the global model trained on all
   clients, as a plan does): the shortfall of their one round and its
   regression on ``1 - c_S`` -- what the exploration could measure of the
   shift before planning.

Only validation losses (what decisions read) are used; ``met`` is the test-loss verdict.

    python benchmarks/set_shift_analysis.py SWEEP_DIR [SWEEP_DIR ...] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np


def _predicted_decrease(loss: dict[str, Any], model: str, level: float, ratio: float) -> float:
    run = loss["run"][model]
    return float(np.interp(level, run["levels"], run["mean"])) * ratio ** float(loss["data_exponent_mean"])


def _set_terms(scenario: dict[str, Any], clients: list[str]) -> tuple[float, float]:
    """``(1 - c_S, r_eff)`` of a client set, as the contract computes them."""
    loss = scenario["loss"]
    by_id = {c["id"]: c for c in scenario["clients"]}
    hist = np.sum([by_id[c]["label_histogram"] for c in clients], axis=0).astype(float)
    coverage = float(np.minimum(hist / hist.sum(), np.asarray(loss["label_shares"])).sum())
    samples = sum(by_id[c]["num_samples"] for c in clients)
    return 1.0 - coverage, coverage * samples / float(loss["reference_samples"])


def job_rows(doc: dict[str, Any]) -> tuple[list[tuple], list[tuple]]:
    """Training-round rows ``(all clients, first, gap, L_before, d, predicted, met, fitted jump)`` and
    exploration-group rows ``(rounds before the end, gap, L_before, d, predicted)`` of one job."""
    scenario, loss = doc["scenario"], doc["scenario"]["loss"]
    everyone = len(scenario["clients"])
    met = bool(doc["summary"].get("met"))
    shift = (loss.get("set_shift") or {}).get("mean", 0.0)
    train, groups = [], []
    training = [r for r in doc["rounds"] if r.get("phase", "train") == "train"]
    for i, rec in enumerate(training):
        gap, ratio = _set_terms(scenario, rec["clients"])
        train.append((len(rec["clients"]) == everyone, i == 0, gap, rec["loss_before"],
                      rec["loss_before"] - rec["loss"],
                      _predicted_decrease(loss, rec["model"], rec["loss_before"], ratio), met,
                      shift * gap if i == 0 and len(rec["clients"]) < everyone else 0.0))
    explore = [r for r in doc["rounds"] if r.get("phase") == "profile"]
    for k, rec in enumerate(explore):
        for group in rec.get("groups", []):
            if group.get("switch_from"):
                continue
            gap, ratio = _set_terms(scenario, group["clients"])
            groups.append((len(explore) - k, gap, group["loss_before"], group["loss_before"] - group["loss"],
                           _predicted_decrease(loss, group["model"], group["loss_before"], ratio)))
    return train, groups


def _load(sweep: Path) -> tuple[int, np.ndarray, np.ndarray]:
    """Jobs, training-round rows and exploration-group rows of a sweep folder (version-2 jobs)."""
    train, groups = [], []
    jobs = 0
    for path in sorted(sweep.rglob("results.json")):
        doc = json.loads(path.read_text())
        if "label_shares" in doc.get("scenario", {}).get("loss", {}):
            t, g = job_rows(doc)
            train += t
            groups += g
            jobs += 1
    return jobs, np.array(train, dtype=float).reshape(-1, 8), np.array(groups, dtype=float).reshape(-1, 5)


def _training_table(t: np.ndarray) -> list[str]:
    lines = ["| rounds | set | n | mean L before | observed d | profile's d | shortfall |",
             "|---|---|---|---|---|---|---|"]
    for everyone in (0.0, 1.0):
        for first in (1.0, 0.0):
            m = (t[:, 0] == everyone) & (t[:, 1] == first)
            if m.any():
                short = t[m, 5] - t[m, 4]
                where = "every client" if everyone else "subset"
                lines.append(f"| {'first' if first else 'later'} | {where} | {m.sum()} | "
                             f"{t[m, 3].mean():.2f} | {t[m, 4].mean():+.3f} | {t[m, 5].mean():+.3f} | "
                             f"{short.mean():+.3f} ± {short.std() / np.sqrt(m.sum()):.3f} |")
    lines += ["", "First round of a subset plan, by the set's coverage gap 1 - c_S (fitted jump: the "
              "profile's `loss.set_shift` mean times the gap, 0 without one):", "",
              "| 1 - c_S | jobs | shortfall | fitted jump | met |", "|---|---|---|---|---|"]
    first = (t[:, 1] == 1.0) & (t[:, 0] == 0.0)
    for lo, hi in ((0.0, 0.08), (0.08, 0.15), (0.15, 1.0)):
        m = first & (t[:, 2] >= lo) & (t[:, 2] < hi)
        if m.any():
            lines.append(f"| [{lo:.2f}, {hi:.2f}) | {m.sum()} | {np.mean(t[m, 5] - t[m, 4]):+.3f} | "
                         f"{t[m, 7].mean():+.3f} | {t[m, 6].mean():.2f} |")
    if first.any():
        lines.append(f"| all | {first.sum()} | {np.mean(t[first, 5] - t[first, 4]):+.3f} ± "
                     f"{np.std(t[first, 5] - t[first, 4]) / np.sqrt(first.sum()):.3f} | "
                     f"{t[first, 7].mean():+.3f} | {t[first, 6].mean():.2f} |")
    return lines


def _group_lines(g: np.ndarray, t: np.ndarray) -> list[str]:
    short, gap = g[:, 4] - g[:, 3], g[:, 1]
    late = g[:, 0] <= 4
    slope = float(gap[late] @ short[late] / (gap[late] @ gap[late]))
    corr = float(np.corrcoef(gap[late], short[late])[0, 1])
    spread = float(np.std(short[late] - slope * gap[late]))
    lines = ["", "Exploration groups (one round from the all-client model), last 4 rounds:", "",
             f"- {late.sum()} group rounds, mean L before {g[late, 2].mean():.2f}, coverage gap "
             f"{gap[late].mean():.2f} ({gap[late].min():.2f}-{gap[late].max():.2f})",
             f"- observed d {g[late, 3].mean():+.3f}, profile's d {g[late, 4].mean():+.3f}, shortfall "
             f"{short[late].mean():+.3f}",
             f"- shortfall against 1 - c_S: slope through 0 {slope:.2f}, correlation {corr:.2f}, "
             f"residual spread {spread:.3f}"]
    first = (t[:, 1] == 1.0) & (t[:, 0] == 0.0)
    if first.any():
        lines.append(f"- that slope predicts {slope * t[first, 2].mean():+.3f} for the plans' first rounds "
                     f"(mean 1 - c_S {t[first, 2].mean():.2f}); observed "
                     f"{np.mean(t[first, 5] - t[first, 4]):+.3f}")
    return lines


def report(sweep: Path) -> list[str]:
    """Markdown lines for one sweep folder."""
    jobs, t, g = _load(sweep)
    lines = [f"## {sweep}", "", f"{jobs} jobs.", ""]
    if not t.size:
        return lines + ["No training rounds.", ""]
    lines += _training_table(t)
    if g.size:
        lines += _group_lines(g, t)
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    lines = ["# Set shift: rounds on a new client set against the profile", ""]
    for sweep in args.sweeps:
        lines += report(sweep)
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
