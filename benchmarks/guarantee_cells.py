"""Judge every guarantee cell of one or more sweep reports: is it significantly off pi?

A cell is one method, target loss and pi of a ``depl-fl report`` (its ``report.json``). It is
*not significantly off* when the 95% Wilson interval of P[L <= L*] contains pi and the 95%
bootstrap interval of the calibration (empirical pi-quantile of the final test losses / L*) meets
[0.9, 1.0]. It *meets the per-cell goal* when, in addition, the point estimates do: coverage >= pi
and calibration >= 0.9.

    python benchmarks/guarantee_cells.py "LABEL=path/to/report.json" ... [--out FILE.md]

Prints (or writes) one markdown table, one row per cell, and the counts of both judgements.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

CALIBRATION_WINDOW = (0.9, 1.0)


def verdict(group: dict) -> tuple[bool, bool, str]:
    """Return (not significantly off, meets the goal, why off) of one report group."""
    pi = group["target_prob"]
    cal = group.get("calibration")
    low = group.get("calibration_low")
    high = group.get("calibration_high")  # None: infinite (too many runs without a final loss)
    reasons = []
    if group["wilson_low"] > pi:
        reasons.append("Wilson above pi")
    if group["wilson_high"] < pi:
        reasons.append("Wilson below pi")
    if high is not None and high < CALIBRATION_WINDOW[0]:
        reasons.append("calibration below 0.9")
    if low is None or low > CALIBRATION_WINDOW[1]:
        reasons.append("calibration above 1")
    covers = group["wilson_low"] <= pi <= group["wilson_high"]
    meets = group["probability"] >= pi and covers and cal is not None and cal >= CALIBRATION_WINDOW[0]
    return not reasons, meets, "; ".join(reasons)


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "inf" if x is None else format(x, fmt)


def rows(label: str, report: dict) -> list[tuple[str, bool, bool]]:
    """One markdown row per group of ``report``, with its two judgements."""
    out = []
    for g in report["groups"]:
        not_off, meets, reason = verdict(g)
        out.append((
            f"| {label} | {g['method']} | {g['target_prob']:g} | {g['successes']}/{g['runs']} = "
            f"{g['probability']:.3f} [{g['wilson_low']:.2f}, {g['wilson_high']:.2f}] | "
            f"{_num(g.get('calibration'))} [{_num(g.get('calibration_low'))}, "
            f"{_num(g.get('calibration_high'))}] | {g['energy_mean_j']:.0f} | "
            f"{g['total_energy_mean_j']:.0f} | {'yes' if not_off else 'no: ' + reason} | "
            f"{'yes' if meets else 'no'} |",
            not_off, meets))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", metavar="LABEL=REPORT_JSON")
    parser.add_argument("--out", type=Path, help="write the table here instead of stdout")
    args = parser.parse_args(argv)
    command = " ".join(["python benchmarks/guarantee_cells.py"] + [f'"{r}"' for r in args.reports])
    lines = ["# Guarantee cells judged one by one", "", f"`{command}`", "",
             "Not significantly off: the 95% Wilson interval contains pi and the 95% bootstrap interval "
             "of the calibration meets [0.9, 1.0]. Meets the goal: also coverage >= pi and "
             "calibration >= 0.9.", "",
             "| setting | method | π | P[L ≤ L*] [95% Wilson] | calibration [95% bootstrap] | "
             "training J | total J | not significantly off | meets the goal |",
             "|---|---|---|---|---|---|---|---|---|"]
    judged = []
    for item in args.reports:
        label, sep, path = item.partition("=")
        if not sep:
            parser.error(f"expected LABEL=REPORT_JSON, got {item!r}")
        try:
            report = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            print(f"guarantee_cells: {path}: {exc}", file=sys.stderr)
            return 2
        for row, not_off, meets in rows(label, report):
            lines.append(row)
            judged.append((not_off, meets))
    lines += ["", f"Cells not significantly off: {sum(j[0] for j in judged)} of {len(judged)}; "
              f"meeting the per-cell goal: {sum(j[1] for j in judged)} of {len(judged)}."]
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
