"""results.json and the loss plot of one federated DepL job.

Layout of ``results.json``::

    {"version": 1,
     "seed": 0,
     "summary": {"final_loss", "final_accuracy", "initial_loss", "target_loss", "target_prob",
                 "deadline_s", "cost_j", "time_s", "wall_s", "method", "seed", "met",
                 "rounds", "planned_rounds", "replans", "rejected_replies", "rolled_back_rounds",
                 "flagged_losses", "predicted": {...plan.predicted}},
     "rounds": [{"round", "model", "clients", "levels", "loss", "loss_before", "accuracy",
                 "predicted_quantile", "energy_j", "round_time_s", "wall_s",
                 "replied": [client, ...], "rejected": [{"client", "reason"}, ...],
                 "rolled_back": null | reason, "loss_flag": null | "non-finite" | "spike",
                 "tracked_loss", ...}],
     "replans": [...], "plan": {...}, "scenario": {...}, "config": {...}}

``cost_j`` and ``time_s`` are modeled with the contract's cost model (real
FLOPs and bytes of the variants); ``wall_s`` is measured. A run whose final
loss is not finite writes ``final_loss: null`` and ``met: false``; the report
counts it as a failure.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

RESULTS_VERSION = 1


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def summarize(rounds: list[Mapping[str, Any]], cfg: Mapping[str, Any], *, initial_loss: float | None,
              predicted: Mapping[str, Any] | None, planned_rounds: int, replans: int,
              wall_s: float) -> dict[str, Any]:
    """The ``summary`` section from the round records and the config."""
    target = cfg["target"]
    final_loss = rounds[-1]["loss"] if rounds else initial_loss
    met = final_loss is not None and math.isfinite(final_loss) and final_loss <= float(target["loss"])
    return {
        "final_loss": final_loss,
        "final_accuracy": rounds[-1].get("accuracy") if rounds else None,
        "initial_loss": initial_loss,
        "target_loss": float(target["loss"]),
        "target_prob": float(target["prob"]),
        "deadline_s": float(target["deadline_s"]),
        "cost_j": float(sum(r["energy_j"] for r in rounds)),
        "time_s": float(sum(r["round_time_s"] for r in rounds)),
        "wall_s": float(wall_s),
        "method": str(cfg["method"]),
        "tracking": bool((cfg.get("tracking") or {}).get("enabled", False)),
        "seed": int(cfg["seed"]),
        "met": bool(met),
        "rounds": len(rounds),
        "planned_rounds": int(planned_rounds),
        "replans": int(replans),
        # Robustness (README "Robustness"): rejected client replies, rolled-back
        # aggregates and flagged (not tracked) losses over the run.
        "rejected_replies": sum(len(r.get("rejected") or ()) for r in rounds),
        "rolled_back_rounds": sum(bool(r.get("rolled_back")) for r in rounds),
        "flagged_losses": sum(r.get("loss_flag") is not None for r in rounds),
        "predicted": dict(predicted or {}),
    }


def build_results(strategy: Any, cfg: Mapping[str, Any], wall_s: float) -> dict[str, Any]:
    """The results document of a finished :class:`strategies.depl_strategy.DepLStrategy` run."""
    from depl_fl.contract.plan import plan_to_dict
    from depl_fl.contract.scenario import scenario_to_dict

    ctrl = strategy.controller
    rounds = list(ctrl.records) if ctrl is not None else []
    plan = strategy.plan
    return _finite_or_none({
        "version": RESULTS_VERSION,
        "seed": int(cfg["seed"]),
        "summary": summarize(rounds, cfg, initial_loss=strategy.initial_loss,
                             predicted=plan.predicted if plan is not None else None,
                             planned_rounds=len(plan.rounds) if plan is not None else 0,
                             replans=len(ctrl.replans) if ctrl is not None else 0, wall_s=wall_s),
        "rounds": rounds,
        "replans": list(ctrl.replans) if ctrl is not None else [],
        "plan": plan_to_dict(plan) if plan is not None else None,
        "scenario": scenario_to_dict(strategy.scenario) if strategy.scenario is not None else None,
        "config": dict(cfg),
    })


def plot_results(doc: Mapping[str, Any], path: str | Path) -> Path:
    """PNG: loss per round, the predicted pi-quantile of the final loss, the target line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = doc["rounds"]
    summary = doc["summary"]
    xs = [0] + [r["round"] for r in rounds]
    loss = [summary.get("initial_loss")] + [r["loss"] for r in rounds]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(xs, [math.nan if v is None else v for v in loss], marker="o", ms=3, label="global loss")
    ax.plot([r["round"] for r in rounds],
            [math.nan if r.get("predicted_quantile") is None else r["predicted_quantile"] for r in rounds],
            ls="--", label=f"predicted q{100 * summary['target_prob']:.0f} of final loss")
    ax.axhline(summary["target_loss"], color="red", lw=1, label=f"target L* = {summary['target_loss']:g}")
    for r in rounds:
        if r.get("replanned"):
            ax.axvline(r["round"], color="grey", lw=0.6, ls=":")
    models = [r["model"] for r in rounds]
    for i, r in enumerate(rounds):
        if i == 0 or models[i] != models[i - 1]:
            ax.annotate(r["model"], (r["round"], r["loss"]), fontsize=7, xytext=(2, 6),
                        textcoords="offset points")
    ax.set_xlabel("round")
    ax.set_ylabel("loss")
    ax.set_title(f"{summary['method']}, seed {summary['seed']}: final {summary['final_loss']:.3f}, "
                 f"cost {summary['cost_j']:.4g} J")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_results(doc: Mapping[str, Any], out_dir: str | Path, plot: bool = True) -> Path:
    """Write ``results.json`` (and ``loss.png``) into ``out_dir``; returns the JSON path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    if plot and doc.get("rounds"):
        plot_results(doc, out / "loss.png")
    return path
