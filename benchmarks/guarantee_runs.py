"""Every job of one or more sweep folders, seed by seed, and how each one ended.

Reads each job's ``results.json`` and writes one markdown table per folder: the final test and
validation losses, whether the job met L*, its training rounds and re-plans, how it ended, its
exploration, training and total energy (modelled J) and its wall seconds; then the misses again.
How a job ended, read from ``results.json``:

- ``stop rule``: its last re-plan, at its last training round, says the measured loss met the target
  (``target met: ...``, the tracking stop);
- ``stalled`` / ``diverged``: ``summary.status`` (the patience or the divergence stop;
  ``summary.stop_reason`` says why);
- ``deadline``: the training ran out of the job's deadline (``elapsed_s >= deadline_s``);
- ``plan end``: it trained every round of its last plan;
- ``infeasible`` / ``failed`` / others: the status, with ``summary.error``.

Beside it, ``rule at end``: whether the last round's validation loss plus its recorded stop margin
(``loss_margin``) was at most L* (the stop rule's test without its judged-error floor).

    python benchmarks/guarantee_runs.py LABEL=SWEEP_DIR [LABEL=SWEEP_DIR ...] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sweep_io import labelled_folders  # noqa: E402


def ending(doc: dict[str, Any]) -> str:
    """How the job of ``doc`` (a parsed ``results.json``) ended, in a few words."""
    s = doc["summary"]
    status = s.get("status")
    if status in ("stalled", "diverged"):
        return f"{status}: {s.get('stop_reason')}"
    if status != "completed":
        return f"{status}: {s.get('error', '')}".rstrip(": ")
    train = [r for r in doc["rounds"] if r.get("phase") == "train"]
    if not train:
        met = s.get("profile_met_round")
        return "no training round (exploration met the target)" if met else "no training round"
    last = train[-1]["round"]
    replans = [p for p in doc.get("replans", []) if p.get("round") == last]
    if replans and str(replans[-1].get("reason", "")).startswith("target met"):
        return "stop rule"
    if s.get("elapsed_s") is not None and s.get("deadline_s") and s["elapsed_s"] >= s["deadline_s"]:
        return "deadline"
    return "plan end"


def row(doc: dict[str, Any]) -> dict[str, Any]:
    """The per-seed figures of one job."""
    s = doc["summary"]
    train = [r for r in doc["rounds"] if r.get("phase") == "train"]
    last = train[-1] if train else {}
    val, margin = last.get("loss"), last.get("loss_margin")
    rule = None if val is None or margin is None else val + margin <= s["target_loss"]
    return {"seed": s["seed"], "test": s.get("final_test_loss"), "val": s.get("final_loss"),
            "margin": margin, "met": bool(s.get("met")), "rounds": s.get("rounds"),
            "profile_rounds": s.get("profile_rounds"), "replans": s.get("replans"),
            "ending": ending(doc), "rule_at_end": rule, "explore_j": s.get("profile_energy_j") or 0.0,
            "train_j": s.get("cost_j") or 0.0, "total_j": s.get("total_energy_j") or 0.0,
            "wall_s": s.get("wall_s"), "target": s["target_loss"]}


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def table(label: str, rows: list[dict[str, Any]]) -> str:
    """One folder's markdown section."""
    head = ("| seed | test loss | met L* | validation loss | stop margin | rule at end | training rounds "
            "(+ exploration) | re-plans | how it ended | explore J | train J | total J | wall s |\n"
            + "|---" * 13 + "|\n")
    rule = {None: "-", True: "passed", False: "not"}
    body = "".join(
        f"| {r['seed']} | {_f(r['test'], '.3f')} | {'yes' if r['met'] else '**no**'} | "
        f"{_f(r['val'], '.3f')} | {_f(r['margin'], '.3f')} | {rule[r['rule_at_end']]} | "
        f"{r['rounds']} (+{r['profile_rounds']}) | {r['replans']} | {r['ending']} | {r['explore_j']:.1f} | "
        f"{r['train_j']:.1f} | {r['total_j']:.1f} | {_f(r['wall_s'], '.1f')} |\n" for r in rows)
    walls = sorted(r["wall_s"] for r in rows if r["wall_s"] is not None)
    misses = [r for r in rows if not r["met"]]
    endings: dict[str, int] = {}
    for r in rows:
        endings[r["ending"]] = endings.get(r["ending"], 0) + 1
    tail = (f"\n{len(rows) - len(misses)}/{len(rows)} met L* ({rows[0]['target'] if rows else '-'}); "
            f"endings: {', '.join(f'{k} x{v}' for k, v in sorted(endings.items()))}; "
            f"wall s per job: median {_f(walls[len(walls) // 2] if walls else None, '.1f')}, "
            f"max {_f(walls[-1] if walls else None, '.1f')}.\n")
    if misses:
        tail += "Misses: " + "; ".join(
            f"seed {r['seed']} (test {_f(r['test'], '.3f')}, validation {_f(r['val'], '.3f')}, "
            f"{r['ending']}, {r['rounds']} training rounds)" for r in misses) + ".\n"
    return f"## {label}\n\n{head}{body}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="LABEL=SWEEP_DIR")
    parser.add_argument("--out", help="write the markdown here (default: stdout)")
    args = parser.parse_args(argv)
    pairs = labelled_folders(args.folders,
                             "guarantee_runs: expected LABEL=SWEEP_DIR with an existing folder, got {item!r}")
    if pairs is None:
        return 2
    sections = []
    for label, path in pairs:
        docs = [json.loads(p.read_text()) for p in path.rglob("results.json")]
        sections.append(table(label, sorted((row(d) for d in docs), key=lambda r: r["seed"])))
    text = ("# Jobs seed by seed\n\n`python benchmarks/guarantee_runs.py " + " ".join(
        f"{a.partition('=')[0]}=..." for a in args.folders) + "`\n\n" + "\n".join(sections))
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
