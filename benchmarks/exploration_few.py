"""Where a small federation's exploration energy goes, round by round.

Reads the ``results.json`` of DepL jobs (sweep folders, one per setting and
arm) and writes, per job, every exploration round's clients per variant, its
modelled energy and the worst variant's validation loss after it, the value
stop's judgements (the plan from here, the round, the plan from the loss one
more round would reach), why the exploration ended, and the training that
followed (rounds, joules, joules per round). Then per folder: the means of
exploration and training energy, the exploration rounds, the mean energy of
an exploration round against a training round's, and the share of the
exploration energy spent after the first judged round; and how the value stop's look-ahead
(:func:`depl_fl.orchestration.exploration_value.next_loss`, the straight line through the last two
decreases) compares with the loss the next round reached: of the judged rounds followed by another,
those where it predicted a lower loss, those whose look-ahead plan had no round (the look-ahead at or
below the target), and of those the rounds whose next loss stayed above the target. Reads results
only.

    python benchmarks/exploration_few.py LABEL=SWEEP_DIR... --out PREFIX
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.sweep_io import labelled_folders
from depl_fl.orchestration.exploration_value import next_loss


def job_rows(result: dict[str, Any]) -> dict[str, Any]:
    """One job's exploration and training, split by round (see module doc)."""
    rounds = result["rounds"]
    explore = [r for r in rounds if r.get("phase") == "profile"]
    train = [r for r in rounds if r.get("phase") != "profile"]
    profile = result["profile"]
    summary = result["summary"]
    judged = {int(v["round"]): v for v in profile.get("values") or []}
    rows = []
    for r in explore:
        groups = {g["model"]: len(g["clients"]) for g in r.get("groups", [])}
        v = judged.get(int(r["round"]))
        rows.append({"round": int(r["round"]), "clients": len(r["clients"]), "groups": groups,
                     "energy_j": float(r["energy_j"]), "loss": float(r["loss"]),
                     "value": None if v is None else {k: float(v[k]) for k in ("plan_j", "round_j",
                                                                                "next_plan_j")}})
    if profile.get("met_round"):
        why = "met"
    elif profile.get("value_round"):
        why = "value"
    else:
        why = "rounds"
    train_j = float(sum(float(r["energy_j"]) for r in train))
    trajectory = [float(explore[0]["loss_before"])] + [float(r["loss"]) for r in explore] if explore else []
    ahead = []
    for k, v in sorted(judged.items()):
        if k < len(explore):
            ahead.append({"round": k, "predicted": next_loss(trajectory[:k + 1]),
                          "reached": trajectory[k + 1], "no_round": float(v["next_plan_j"]) == 0.0})
    return {"seed": int(summary["seed"]), "explore": rows, "why": why,
            "explore_j": float(summary["profile_energy_j"]), "train_j": train_j,
            "train_rounds": len(train), "total_j": float(summary["total_energy_j"]),
            "final_test_loss": summary.get("final_test_loss"), "target": float(summary["target_loss"]),
            "look_ahead": ahead}


def folder_summary(jobs: list[dict[str, Any]]) -> dict[str, float]:
    """The means over a folder's jobs (see module doc)."""
    explore_round = [r["energy_j"] for j in jobs for r in j["explore"]]
    train_round = [j["train_j"] / j["train_rounds"] for j in jobs if j["train_rounds"]]
    after_judged = []
    for j in jobs:
        first = next((r["round"] for r in j["explore"] if r["value"] is not None), None)
        spent = sum(r["energy_j"] for r in j["explore"] if first is not None and r["round"] > first)
        after_judged.append(spent / j["explore_j"] if j["explore_j"] else 0.0)
    ahead = [(a, j["target"]) for j in jobs for a in j["look_ahead"]]
    no_round = [(a, t) for a, t in ahead if a["no_round"]]
    return {"look_ahead_rounds": len(ahead),
            "look_ahead_below_reached": sum(a["predicted"] < a["reached"] for a, _ in ahead),
            "look_ahead_no_round": len(no_round),
            "no_round_reached_above_target": sum(a["reached"] > t for a, t in no_round),
            "jobs": len(jobs), "explore_j": float(np.mean([j["explore_j"] for j in jobs])),
            "train_j": float(np.mean([j["train_j"] for j in jobs])),
            "explore_rounds": float(np.mean([len(j["explore"]) for j in jobs])),
            "explore_round_j": float(np.mean(explore_round)) if explore_round else float("nan"),
            "train_round_j": float(np.mean(train_round)) if train_round else float("nan"),
            "share_after_first_judged": float(np.mean(after_judged))}


def markdown(folders: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["| folder | jobs | exploration J | rounds | J / exploration round | training J | "
             "J / training round | share of exploration J after the first judged round | "
             "look-ahead: judged rounds followed by another, predicted below the loss reached, "
             "plan of no round, of those above the target |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, jobs in folders.items():
        s = folder_summary(jobs)
        lines.append(f"| {label} | {s['jobs']} | {s['explore_j']:.1f} | {s['explore_rounds']:.1f} | "
                     f"{s['explore_round_j']:.2f} | {s['train_j']:.1f} | {s['train_round_j']:.2f} | "
                     f"{s['share_after_first_judged']:.2f} | {s['look_ahead_rounds']}, "
                     f"{s['look_ahead_below_reached']}, {s['look_ahead_no_round']}, "
                     f"{s['no_round_reached_above_target']} |")
    lines.append("")
    for label, jobs in folders.items():
        lines += [f"## {label}", "",
                  "| seed | end | round: clients per variant, J, loss, value (plan / round / next plan J) | "
                  "training rounds, J | test loss |", "|---|---|---|---|---|"]
        for j in jobs:
            cells = []
            for r in j["explore"]:
                groups = "+".join(f"{m}:{n}" for m, n in r["groups"].items())
                cell = f"{r['round']}: {groups} {r['energy_j']:.1f} J {r['loss']:.3f}"
                if r["value"] is not None:
                    v = r["value"]
                    cell += f" [{v['plan_j']:.1f}/{v['round_j']:.1f}/{v['next_plan_j']:.1f}]"
                cells.append(cell)
            loss = j["final_test_loss"]
            lines.append(f"| {j['seed']} | {j['why']} | {'; '.join(cells)} | {j['train_rounds']}, "
                         f"{j['train_j']:.1f} | {'-' if loss is None else f'{loss:.3f}'} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="LABEL=SWEEP_DIR")
    parser.add_argument("--out", required=True, help="output prefix (.md and .json)")
    args = parser.parse_args(argv)
    pairs = labelled_folders(args.folders, "exploration_few: expected LABEL=SWEEP_DIR, got {item!r}")
    if pairs is None:
        return 2
    folders: dict[str, list[dict[str, Any]]] = {}
    for label, path in pairs:
        results = sorted(path.rglob("results.json"))
        folders[label] = [job_rows(json.loads(p.read_text(encoding="utf-8"))) for p in results]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(markdown(folders) + "\n", encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(folders, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
