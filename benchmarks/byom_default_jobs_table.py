"""Table of the default jobs that ``benchmarks/byom_default_jobs.sh`` ran on users' networks.

Reads every ``results.json`` under ``multirun/byom_default/<method>/<network>/`` and the sweep's log
beside it, and writes ``benchmarks/results/byom_zoo/default_jobs.md``: per network, the jobs' exit
statuses, how many met L* on the test split (final test loss <= target), the median test loss,
rounds, re-plans, the variants the training rounds used, exploration / training / total energy,
wall time per job and the bytes check (measured == modelled ``bytes_down``/``bytes_up`` in every
round). A job that stopped on an error keeps the status its sweep line names (``depl-fl: job #N``).

Usage: ``python benchmarks/byom_default_jobs_table.py``
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "multirun" / "byom_default"
OUT = ROOT / "benchmarks" / "results" / "byom_zoo" / "default_jobs.md"
NETWORKS = ["quickstart_net_8", "resnet_tiny", "mobilenet_v2_tiny", "vgg_net", "convnext_net"]
#: results.json's status of a job that raised (mark_stopped) -> its exit status outside a sweep
STOPPED_STATUS = {"infeasible": 3, "failed": 1}


def job_models(rnd: dict) -> list[str]:
    """The variants one round trained (its groups' models, else its ``model`` field split on ``+``)."""
    groups = rnd.get("groups") or []
    return [g["model"] for g in groups] if groups else str(rnd.get("model", "")).split("+")


def summarise_job(path: Path) -> dict:
    """One job's figures from its ``results.json``."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    s = doc["summary"]
    rounds = doc.get("rounds", [])
    train = [r for r in rounds if r.get("phase", "train") == "train"]
    checked = [r for r in rounds if "bytes_down" in r and "modelled_bytes_down" in r]
    variants = Counter(m for r in train for m in job_models(r))
    status = s.get("status")
    test_loss = s.get("final_test_loss")
    return {"seed": doc.get("seed"), "status": status, "error": s.get("error", ""),
            "rc": STOPPED_STATUS.get(status, 0),
            "met": test_loss is not None and test_loss <= s["target_loss"],
            "met_flag": s.get("met"), "test_loss": test_loss, "target": s.get("target_loss"),
            "rounds": s.get("rounds"), "replans": s.get("replans"), "variants": variants,
            "explore_j": s.get("profile_energy_j") or 0.0, "train_j": s.get("cost_j") or 0.0,
            "total_j": s.get("total_energy_j"), "explore_rounds": s.get("profile_rounds"),
            "wall_s": (s.get("wall_s") or 0.0) + (doc.get("profile", {}).get("wall_s") or 0.0),
            "stop": s.get("stop_reason") or "",
            "explore_loss": next((r.get("loss") for r in reversed(rounds) if r.get("phase") == "profile"),
                                 None),
            "bytes_rounds": len(checked),
            "bytes_exact": bool(checked) and all(r[f"bytes_{d}"] == r[f"modelled_bytes_{d}"]
                                                 for r in checked for d in ("down", "up"))}


def sweep_lines(log: Path) -> list[str]:
    """The ``depl-fl:`` lines and a traceback flag of a sweep's log."""
    if not log.exists():
        return []
    text = log.read_text(encoding="utf-8", errors="replace")
    lines = [line for line in text.splitlines() if line.startswith("depl-fl:")]
    return lines + (["(log holds a Traceback)"] if "Traceback" in text else [])


def med(values: list[float]) -> str:
    """The median of the values that exist, ``-`` if none."""
    values = [v for v in values if v is not None]
    return f"{statistics.median(values):.4g}" if values else "-"


def network_jobs(method: str, name: str) -> list[dict]:
    """Every job of one network's sweep, by seed."""
    return sorted((summarise_job(p) for p in (RUNS / method / name).rglob("results.json")),
                  key=lambda j: j["seed"])


def overview(method: str) -> list[str]:
    """One line per network: the sweep's outcome at a glance."""
    lines = [f"## Overview ({method})", "",
             "| network | exit statuses | met L\\* (test) | test loss, median (jobs that trained) "
             "| training rounds, median "
             "| re-plans, median | variants in training (rounds, all jobs) "
             "| explore / train / total J, median "
             "| wall s per job, median | bytes = modelled |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in NETWORKS:
        jobs = network_jobs(method, name)
        if not jobs:
            continue
        variants = sum((j["variants"] for j in jobs), Counter())
        energy = " / ".join(med([j[k] for j in jobs]) for k in ("explore_j", "train_j", "total_j"))
        lines.append(f"| `{name}` | {' '.join(str(j['rc']) for j in jobs)} "
                     f"| {sum(j['met'] for j in jobs)}/{len(jobs)} | {med([j['test_loss'] for j in jobs])} "
                     f"| {med([j['rounds'] for j in jobs])} | {med([j['replans'] for j in jobs])} "
                     f"| {', '.join(f'{m} {n}' for m, n in sorted(variants.items())) or '-'} | {energy} "
                     f"| {med([j['wall_s'] for j in jobs])} "
                     f"| {sum(j['bytes_exact'] for j in jobs)}/{len(jobs)} jobs |")
    return lines + [""]


def energy_against_full() -> list[str]:
    """DepL's total energy (exploration + training) against ``method=full``'s on the same seeds."""
    lines = ["## Energy against `full` (same seeds, total J including each job's exploration)", "",
             "| network | seeds | DepL total J, median | full total J, median | ratio of medians "
             "| per-seed ratio, median [min, max] | met L\\* DepL / full |", "|---|---|---|---|---|---|---|"]
    for name in NETWORKS:
        full = {j["seed"]: j for j in network_jobs("full", name) if j["status"] != "running"}
        depl = {j["seed"]: j for j in network_jobs("depl", name)}
        seeds = sorted(set(full) & set(depl))
        if not seeds:
            continue
        ratios = [depl[s]["total_j"] / full[s]["total_j"] for s in seeds]
        d, f = (statistics.median(x[s]["total_j"] for s in seeds) for x in (depl, full))
        lines.append(f"| `{name}` | {len(seeds)} | {d:.1f} | {f:.1f} | {d / f:.3f} "
                     f"| {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}] "
                     f"| {sum(depl[s]['met'] for s in seeds)}/{sum(full[s]['met'] for s in seeds)} |")
    return lines + [""]


def section(method: str, name: str) -> list[str]:
    """The table of one network's sweep."""
    jobs = network_jobs(method, name)
    lines = [f"### `{name}` ({method})", ""]
    status_file = RUNS / method / "multirun_status.txt"
    sweep = [ln for ln in (status_file.read_text().splitlines() if status_file.exists() else [])
             if ln.startswith(f"{name} ")]
    if sweep:
        lines.append(f"Sweep: `{sweep[-1]}` (exit status of the multirun, its wall seconds for all jobs).")
    for line in sweep_lines(RUNS / method / f"{name}.log"):
        lines.append(f"- `{line}`")
    lines.append("")
    if not jobs:
        return lines + ["No job wrote results.json.", ""]
    lines += ["| seed | exit | status | loss after exploration | test loss | met L* | rounds (+ exploration) "
              "| re-plans | variants in training (rounds) | explore J | train J | total J | wall s "
              "| bytes = modelled |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for j in jobs:
        lines.append(row(j))
    stops = Counter((j["stop"] or j["error"]).partition(":")[0] for j in jobs)
    lines += ["", f"**{sum(j['met'] for j in jobs)}/{len(jobs)} met L\\*** ({jobs[0]['target']}, test loss); "
              f"median test loss {med([j['test_loss'] for j in jobs])}; "
              f"median training rounds {med([j['rounds'] for j in jobs])}; "
              f"median total J {med([j['total_j'] for j in jobs])}; "
              f"median wall {med([j['wall_s'] for j in jobs])} s; "
              f"bytes = modelled in every round: {sum(j['bytes_exact'] for j in jobs)}/{len(jobs)} jobs. "
              "Stops: " + "; ".join(f"{k or '-'} x{n}" for k, n in stops.items()), ""]
    return lines


def row(j: dict) -> str:
    """One job's table row."""
    variants = ", ".join(f"{m} {n}" for m, n in sorted(j["variants"].items()))
    loss = "-" if j["test_loss"] is None else f"{j['test_loss']:.3f}"
    explored = "-" if j["explore_loss"] is None else f"{j['explore_loss']:.3f}"
    bytes_ok = f"{'yes' if j['bytes_exact'] else 'NO'} ({j['bytes_rounds']} rounds)"
    met = "yes" if j["met"] else "no"
    return (f"| {j['seed']} | {j['rc']} | {j['status']} | {explored} | {loss} | {met} "
            f"| {j['rounds']} (+{j['explore_rounds']}) | {j['replans']} | {variants} "
            f"| {j['explore_j']:.1f} | {j['train_j']:.1f} | {j['total_j'] or 0:.1f} | {j['wall_s']:.0f} "
            f"| {bytes_ok} |")


def main() -> None:
    lines = ["# Users' networks through the default job", "",
             "Command (per network, seeds 0-4 in one Hydra multirun, the environment `run.sh` exports):", "",
             "```", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 RAY_DEDUP_LOGS=0 \\",
             "  python -m depl_fl.main -m model=custom model.factory=tests.user_nets:NAME seed=0,1,2,3,4 \\",
             "  profile.cache_dir=multirun/byom_default/depl/NAME/cache \\",
             "  hydra.sweep.dir=multirun/byom_default/depl/NAME",
             "```", "",
             "(`vgg_net` from `tests.user_nets_more`; `profile.cache_dir` and the sweep folder only place "
             "files.) Regenerate: `bash benchmarks/byom_default_jobs.sh && "
             "python benchmarks/byom_default_jobs_table.py`; `method=full`: "
             "`METHOD=full bash benchmarks/byom_default_jobs.sh NAME ...`.", "",
             "Exit: the job's exit status outside a sweep (0 ran to its end; 3 no dependable plan; "
             "1 failed). Loss after exploration: the validation loss of the last exploration round. "
             "Met L\\*: final test loss <= L\\*. Rounds: training rounds (+ exploration rounds). "
             "Variants: the "
             "training rounds' groups by variant (full, pNN = NN% of the channels removed). Energies are "
             "the modelled joules of the cost model; wall s = exploration + training wall seconds the job "
             "records (the sweep line's seconds also hold Ray's start and the variants' derivation).", ""]
    for method in ("depl", "full"):
        if (RUNS / method).exists():
            lines += overview(method)
    if (RUNS / "full").exists():
        lines += energy_against_full()
    for method in ("depl", "full"):
        for name in NETWORKS:
            if (RUNS / method / name).exists():
                lines += section(method, name)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(OUT)


if __name__ == "__main__":
    main()
