"""Re-plan a finished job's scenario under contract versions 1 and 2, and compare the sets chosen.

Reads the ``scenario`` (with the nodes' label histograms) and the targets of
``results.json`` files and plans each one four ways with the same planner:

* ``v1``      -- the scenario as version 1 (histograms ignored): the plan a version-1 planner makes;
* ``r_eff``   -- version 2 with the histograms only (effective data ratio ``c_S r``);
* ``bounds``  -- plus ``max_uncovered = 0`` and ``min_coverage`` (``--min-coverage``);
* ``full v2`` -- plus the floor loss ``F`` (``--floor``) and ``eval_std = --eval-share * std``.

Every plan is then evaluated under the ``full v2`` semantics (20,000
trajectories, ``depl-fl evaluate``'s Monte Carlo): a plan that ignores the
unseen classes shows there what it would be worth if ``F`` and the evaluation
noise are right. The values of ``--floor``, ``--min-coverage`` and
``--eval-share`` are assumptions (docs/CONTRACT_V2.md measured F about 3.6-5.2,
pilot coverage >= 0.86 and 78% of the per-round variance as evaluation noise,
i.e. ``eval_std = sqrt(0.78 / 2) std = 0.62 std``), not fitted on the job.

Usage::

    python benchmarks/coverage_replan.py RUN_DIR/results.json [...] [--floor 4.2]
        [--min-coverage 0.86] [--eval-share 0.62] [--out benchmarks/results/coverage_replan.md]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
from pathlib import Path
from typing import Any

from depl_fl.contract.plan import Targets
from depl_fl.contract.scenario import Scenario, scenario_from_dict
from depl_fl.contract.semantics import evaluate_plan, set_coverage
from depl_fl.planner import make_plan


def variants(doc: dict[str, Any], floor: float, min_coverage: float,
             eval_share: float) -> dict[str, Scenario]:
    """The four readings of one scenario document (see the module docstring)."""
    out = {}
    v1 = copy.deepcopy(doc)
    v1["version"] = 1
    out["v1"] = scenario_from_dict(v1)
    v2 = copy.deepcopy(doc)
    v2["version"] = 2
    for key in ("coverage_floor_loss", "min_coverage", "max_uncovered"):
        v2["loss"].pop(key, None)
    for run in v2["loss"]["run"].values():
        run.pop("eval_std", None)
    out["r_eff"] = scenario_from_dict(v2)
    bounded = copy.deepcopy(v2)
    bounded["loss"].update(min_coverage=min_coverage, max_uncovered=0.0)
    out["bounds"] = scenario_from_dict(bounded)
    full = copy.deepcopy(bounded)
    full["loss"]["coverage_floor_loss"] = floor
    for run in full["loss"]["run"].values():
        run["eval_std"] = [eval_share * s for s in run["std"]]
    out["full v2"] = scenario_from_dict(full)
    return out


def describe(scen: Scenario, judge: Scenario, rounds: list, targets: Targets) -> dict[str, Any]:
    """Sets, models and the full-v2 Monte Carlo of a plan."""
    sets = sorted({r.clients for r in rounds}, key=len)
    cov = [set_coverage(judge, s) for s in sets]
    ev = evaluate_plan(judge, rounds, targets, n=20000, seed=1)
    models: dict[str, int] = {}
    for r in rounds:
        models[r.model] = models.get(r.model, 0) + 1
    return {"sets": [len(s) for s in sets],
            "coverage": [None if c is None else (round(c[0], 3), round(c[1], 3)) for c in cov],
            "models": models, "rounds": len(rounds), "cost": ev["cost_joules"],
            "p_full_v2": ev["probability"], "valid_full_v2": ev["valid"]}


def job_targets(res: dict[str, Any]) -> Targets:
    """The targets the job's initial plan had: the deadline less the exploration rounds' time."""
    tgt, summary = res["config"]["target"], res["summary"]
    spent = 0.0 if summary.get("profile_reused") else float(summary.get("profile_time_s") or 0.0)
    return Targets(float(tgt["loss"]), float(tgt["prob"]), float(tgt["deadline_s"]) - spent,
                   None if tgt.get("max_rounds") is None else int(tgt["max_rounds"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("--floor", type=float, default=4.2)
    parser.add_argument("--min-coverage", type=float, default=0.86)
    parser.add_argument("--eval-share", type=float, default=math.sqrt(0.78 / 2.0))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    lines = ["| job | reading | sets (clients) | (c_S, u_S) | models x rounds | cost J | planner P | "
             "P under full v2 | valid under full v2 |", "|" + "---|" * 9]
    for path in args.results:
        res = json.loads(Path(path).read_text(encoding="utf-8"))
        targets = job_targets(res)
        scens = variants(res["scenario"], args.floor, args.min_coverage, args.eval_share)
        for name, scen in scens.items():
            plan = make_plan(scen, targets, seed=int(res["config"].get("seed", 0)))
            d = describe(scen, scens["full v2"], plan.rounds, targets)
            lines.append(f"| {Path(path).parent.name} | {name} | {d['sets']} | {d['coverage']} | "
                         f"{d['models']} | {d['cost']:.1f} | {plan.predicted['probability']:.3f}"
                         f"{'' if plan.feasible else ' (infeasible)'} | {d['p_full_v2']:.3f} | "
                         f"{d['valid_full_v2']} |")
            print(lines[-1], flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
