"""The table of ``benchmarks/quickstart_lr.sh``: per learning rate and seed, how the default job ended.

    python benchmarks/quickstart_lr_table.py OUT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def exit_codes(out: Path) -> dict[tuple[str, str], str]:
    """``(lr, seed) -> exit status`` from the script's ``rc.txt`` (the last line of a pair wins)."""
    codes = {}
    for line in (out / "rc.txt").read_text().splitlines():
        if line.strip():
            lr, seed, code = (part.split("=", 1)[1] for part in line.split())
            codes[(lr, seed)] = code
    return codes


def row(out: Path, lr: str, seed: str, code: str) -> str:
    """One markdown row: exit, test loss, met, rounds, total energy, and the clause of an exit-3 error."""
    summary = json.loads((out / f"lr{lr}" / f"seed{seed}" / "results.json").read_text())["summary"]
    clause = ""
    if code == "3":
        lines = [x for x in (out / f"lr{lr}" / f"seed{seed}.log").read_text().splitlines()
                 if x.startswith("depl-fl:")]
        clause = lines[-1][lines[-1].find("; but first") + 2:] if lines and "; but first" in lines[-1] else ""
    test = summary.get("final_test_loss")
    test_text = f"{test:.4f}" if isinstance(test, float) and code == "0" else "-"
    trained = summary.get("rounds") if code == "0" else 0
    met = "yes" if summary.get("met") else "no"
    energy = summary.get("total_energy_j", 0.0)
    return (f"| {lr} | {seed} | {code} | {test_text} | {met} | {summary.get('profile_rounds')} | {trained} | "
            f"{energy:.1f} | {clause} |")


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    codes = exit_codes(out)
    print("| train.lr | seed | exit | test loss | met L\\* | exploration rounds | training rounds | "
          "total J | the error's last clause (exit 3) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for lr, seed in sorted(codes, key=lambda k: (float(k[0]), int(k[1]))):
        print(row(out, lr, seed, codes[(lr, seed)]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
