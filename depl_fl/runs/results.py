"""results.json and the loss plot of one federated DepL job.

Layout of ``results.json``::

    {"version": 1,
     "seed": 0,
     "summary": {"final_loss", "final_accuracy", "final_test_loss", "final_test_accuracy", "met_on",
                 "initial_loss", "initial_test_loss", "target_loss", "target_prob",
                 "deadline_s", "cost_j", "time_s", "wall_s", "method", "seed", "met",
                 "rounds", "planned_rounds", "replans", "rejected_replies", "rolled_back_rounds",
                 "flagged_losses", "predicted": {...plan.predicted},
                 "status", "stop_reason", "final_model_round", "resumed_from", "at_risk", "dropped_clients",
                 "profile_energy_j", "profile_time_s", "profile_rounds", "profile_reused",
                 "profile_met_round", "profile_value_round",
                 "total_energy_j", "total_time_s", "elapsed_s",
                 "measured": {"measured_time_s", "modelled_time_s", "measured_energy_j",
                              "modelled_energy_j", "energy_source", "bytes_down", "bytes_up"}},
     "rounds": [{"round", "phase", "model", "clients", "levels", "loss", "loss_before", "accuracy",
                 "test_loss", "test_accuracy",
                 "predicted_quantile", "energy_j", "round_time_s", "wall_s",
                 "replied": [client, ...], "rejected": [{"client", "reason"}, ...],
                 "rolled_back": null | reason, "loss_flag": null | "non-finite" | "spike",
                 "tracked_loss", "energy_source", "measured_energy_j", "train_time_s",
                 "bytes_down", "bytes_up", "replies": {client: {...}}, ...}],
     "profile": {"source", "reused", "rounds", "energy_j", "time_s", "cost_when_made", ...},
     "cost": {"source", "clock", "used", "fit", ...},
     "replans": [...], "plan": {...}, "scenario": {...}, "config": {...}}

``loss`` (per round) and ``final_loss`` are measured on the validation split,
the only loss any decision (tracking, stopping, re-planning, profile fitting)
reads; ``test_loss`` and ``final_test_loss`` on a disjoint test split that no
decision reads, and ``met`` judges the test loss.

``summary.status`` is ``running`` while the job runs (the file is rewritten
after every round), ``completed`` at the end and ``interrupted`` after Ctrl-C
or SIGTERM; ``infeasible`` when the job stopped because no dependable plan exists
(e.g. after its exploration rounds) and ``failed`` when it stopped on another error,
both with the one-line reason in ``summary.error``; ``diverged`` or ``stalled`` when
the divergence or the patience stop ended it (``summary.stop_reason`` says why);
``summary.final_model_round`` is the round (numbered as in ``rounds``; the last
exploration round's, or 0, for the model the training started from) whose model
the job ended with and the ``final_*`` figures describe: the last round's,
except after those two stops with ``tracking.early_stop_model=best`` (the
lowest validation loss, :mod:`depl_fl.tracking.best_model`);
``summary.resumed_from`` is
the last completed round before a restart, numbered as in ``rounds`` (``null``
for a job that never restarted).
Every write is atomic.

Every round record has ``phase``: ``profile`` (a federated exploration round,
numbered first) or ``train`` (a planned round, numbered after them).
``cost_j`` / ``time_s`` / ``rounds`` are the training phase;
``profile_energy_j`` / ``profile_time_s`` / ``profile_rounds`` what this job
paid for its loss profile (0 when it reused a cached profile: then
``profile_reused`` is true and ``profile.cost_when_made`` says what the
profile cost); ``total_energy_j`` and ``total_time_s`` add both.
``profile_met_round`` is the exploration round after which the model met the
target by the stop rule (``profile.explore.stop_when_met``): the job then ran
no training round (``rounds`` 0, ``final_loss`` the exploration model's);
``null`` otherwise. ``profile_value_round`` is the exploration round after
which one more round could not pay for itself
(:mod:`depl_fl.orchestration.exploration_value`; ``profile.values`` holds the
energies judged after every round); ``null`` otherwise. With ``profile.prior``,
``profile.rates_from_prior`` names the variants whose learning-curve rate the
plans read from the prior's trajectory (:mod:`depl_fl.orchestration.prior_regime`;
empty otherwise). Energies and
times are modeled with the contract's cost model (real FLOPs and bytes of the
variants; with ``cost.source=measured`` the model fitted from the replies);
``wall_s`` is measured, and ``summary.measured`` puts the measured time and
energy beside the modelled ones (``energy_source`` says where the energy came
from: ``meter``, ``declared`` power x measured busy time, or the ``model``);
``elapsed_s`` is what the deadline counted (``cost.clock``). A run whose final
loss is not finite writes ``final_loss: null`` and ``met: false``; the report
counts it as a failure.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

from depl_fl.identity_memo import LastObjectMemo
from depl_fl.runs.checkpoint import atomic_write_text

RESULTS_VERSION = 1
STATUSES = ("running", "completed", "diverged", "stalled", "interrupted", "infeasible", "failed")
#: The results section of the last scenario object written: see :func:`_scenario_doc`.
_SCENARIO_DOC: LastObjectMemo[dict[str, Any]] = LastObjectMemo()
#: ``(a scenario section, its compact JSON text)``: see :func:`compact_json`.
_SCENARIO_TEXT: tuple[dict[str, Any], str] | None = None


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
              wall_s: float, initial_test_loss: float | None = None,
              final_round: int | None = None) -> dict[str, Any]:
    """The ``summary`` section from the round records and the config.

    ``final_loss`` is the validation loss (what the decisions read) of the
    model the job ended with: the training round ``final_round``'s (0: the
    model the training started from, without accuracies; ``None``: the last
    round's); ``met`` judges its ``final_test_loss`` (the test split no
    decision read) and falls back to ``final_loss`` only when no test loss was
    measured (``met_on`` says which).
    """
    target = cfg["target"]
    final_round = len(rounds) if final_round is None else int(final_round)
    last = rounds[final_round - 1] if final_round > 0 else None
    final_loss = last["loss"] if last is not None else initial_loss
    final_test = last.get("test_loss") if last is not None else initial_test_loss
    judged = final_test if final_test is not None else final_loss
    met = judged is not None and math.isfinite(judged) and judged <= float(target["loss"])
    return {
        "final_loss": final_loss,
        "final_accuracy": last.get("accuracy") if last is not None else None,
        "final_test_loss": final_test,
        "final_test_accuracy": last.get("test_accuracy") if last is not None else None,
        "met_on": "test" if final_test is not None else "validation",
        "initial_loss": initial_loss,
        "initial_test_loss": initial_test_loss,
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
        # Robustness: rejected client replies, rolled-back
        # aggregates and flagged (not tracked) losses over the run.
        "rejected_replies": sum(len(r.get("rejected") or ()) for r in rounds),
        "rolled_back_rounds": sum(bool(r.get("rolled_back")) for r in rounds),
        "flagged_losses": sum(r.get("loss_flag") is not None for r in rounds),
        "predicted": dict(predicted or {}),
    }


def profile_summary(profile: Mapping[str, Any] | None, train_energy_j: float,
                    train_time_s: float) -> dict[str, Any]:
    """Summary fields of the profiling cost, and the totals including it."""
    profile = profile or {}
    energy = float(profile.get("energy_j") or 0.0)
    seconds = float(profile.get("time_s") or 0.0)
    return {"profile_source": profile.get("source"), "profile_reused": bool(profile.get("reused", False)),
            "profile_energy_j": energy, "profile_time_s": seconds,
            "profile_rounds": int(profile.get("rounds") or 0),
            "profile_met_round": profile.get("met_round"),
            "profile_value_round": profile.get("value_round"),
            "total_energy_j": energy + float(train_energy_j), "total_time_s": seconds + float(train_time_s)}


def measured_summary(rounds: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Measured totals beside the modelled ones, over every round of the job (profile rounds too).

    ``measured_time_s``: the rounds' wall time; ``measured_energy_j``: the replies'
    training energy (a reply without a meter or declared power counts its modelled
    energy) and ``energy_source`` the weakest source of any round (``meter`` <
    ``declared`` < ``model``); ``modelled_time_s``/``modelled_energy_j`` the
    same rounds under the plan's cost model; ``bytes_down``/``bytes_up`` the
    replies' arrays. ``None`` (and source ``model``) when no round carried measurements.
    """
    from depl_fl.tracking.device_costs import weakest_source

    measured = [r for r in rounds if "measured_energy_j" in r]
    return {
        "measured_time_s": float(sum(float(r.get("wall_s") or 0.0) for r in rounds)),
        "modelled_time_s": float(sum(float(r.get("round_time_s") or 0.0) for r in rounds)),
        "measured_energy_j": float(sum(r["measured_energy_j"] for r in measured)) if measured else None,
        "modelled_energy_j": float(sum(float(r.get("energy_j") or 0.0) for r in rounds)),
        "energy_source": weakest_source(r.get("energy_source", "model") for r in rounds) if measured
        else "model",
        "bytes_down": int(sum(int(r.get("bytes_down") or 0) for r in measured)),
        "bytes_up": int(sum(int(r.get("bytes_up") or 0) for r in measured)),
    }


def job_rounds(profile_records: list[Mapping[str, Any]], train_records: list[Mapping[str, Any]]
               ) -> list[dict[str, Any]]:
    """All round records of a job: profile rounds first, then the training rounds numbered after them."""
    offset = len(profile_records)
    return ([job_round(r, "profile", offset) for r in profile_records]
            + [job_round(r, "train", offset) for r in train_records])


def job_round(record: Mapping[str, Any], phase: str, offset: int) -> dict[str, Any]:
    """One round record as results.json lists it (a training round numbered after ``offset``)."""
    if phase == "profile":
        return {**record, "phase": "profile"}
    return {**record, "phase": "train", "round": int(record["round"]) + offset}


class RoundsMemo:
    """A job's round records as results.json lists them, and their JSON text, made once per final record.

    results.json is rewritten after every round, and re-encoding every earlier
    round each time makes a job's writes grow with the square of its rounds. A
    record is final once a later round is recorded (the strategy adds the last
    round's step timings after the round is written), so every record but the
    last is converted and encoded once and reused while it is the same object
    at the same place; the last one is made again on every write. One memo per
    job (the rewrites of one output folder).
    """

    def __init__(self) -> None:
        #: Per final record: ``(the source record, its phase and offset, the results dict, its text)``.
        self._made: list[tuple[Mapping[str, Any], tuple[str, int], dict[str, Any], str]] = []
        self._texts: dict[int, str] = {}

    def section(self, profile_records: list[Mapping[str, Any]],
                train_records: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """:func:`job_rounds` with non-finite figures as None, final records reused."""
        offset = len(profile_records)
        sources = [(r, ("profile", offset)) for r in profile_records] + \
            [(r, ("train", offset)) for r in train_records]
        out = []
        for i, (record, key) in enumerate(sources):
            made = self._made[i] if i < len(self._made) else None
            if made is not None and made[0] is record and made[1] == key:
                out.append(made[2])
                continue
            converted = _finite_or_none(job_round(record, *key))
            if i < len(sources) - 1:  # final: kept (what followed a replaced record is made again)
                del self._made[i:]
                self._made.append((record, key, converted, json.dumps(converted, allow_nan=False)))
            out.append(converted)
        self._texts = {id(m[2]): m[3] for m in self._made}
        return out

    def text(self, rounds: list[Any]) -> str:
        """``json.dumps(rounds, allow_nan=False)``, the kept records' text reused."""
        return "[" + ", ".join(self._texts.get(id(r)) or json.dumps(r, allow_nan=False) for r in rounds) + "]"


def build_results(strategy: Any, cfg: Mapping[str, Any], wall_s: float, *, status: str = "completed",
                  resumed_from: int | None = None, rounds_memo: RoundsMemo | None = None) -> dict[str, Any]:
    """The results document of a :class:`strategies.depl_strategy.DepLStrategy` run.

    ``status`` is one of :data:`STATUSES`; ``resumed_from`` the last completed
    round before a restart (``None`` when the job never restarted).
    ``rounds_memo`` (the job's rewrites after every round) reuses the final
    round records made for the last document (the same document).
    A job the divergence stop ended (``controller.stop_reason``, or the exploration's
    ``profiler.stop_reason``) finishes as
    ``diverged``, one the patience stop ended (:mod:`depl_fl.tracking.stall`) as ``stalled``,
    with ``summary.stop_reason`` saying why.
    """
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    from depl_fl.contract.plan import plan_to_dict

    ctrl = strategy.controller
    train = list(ctrl.records) if ctrl is not None else []
    profiler = getattr(strategy, "profiler", None)
    profile = profiler.summary() if profiler is not None else None
    profile_records = list(getattr(profiler, "records", []) or [])
    plan = strategy.plan
    summary = summarize(train, cfg, initial_loss=strategy.initial_loss,
                        predicted=plan.predicted if plan is not None else None,
                        planned_rounds=len(plan.rounds) if plan is not None else 0,
                        replans=len(ctrl.replans) if ctrl is not None else 0, wall_s=wall_s,
                        initial_test_loss=getattr(strategy, "initial_test_loss", None),
                        final_round=ctrl.final_model_round() if ctrl is not None else None)
    summary.update(profile_summary(profile, summary["cost_j"], summary["time_s"]))
    summary["measured"] = measured_summary(profile_records + train)
    summary["elapsed_s"] = float(train[-1]["elapsed_s"]) if train else None
    offset = len(profile_records)
    summary["final_model_round"] = offset + (ctrl.final_model_round() if ctrl is not None else 0)
    stop_reason = getattr(ctrl, "stop_reason", None) or getattr(profiler, "stop_reason", None)
    if status == "completed" and stop_reason:
        status = "stalled" if getattr(ctrl, "stalled", False) else "diverged"
    summary.update(status=status, stop_reason=stop_reason, resumed_from=resumed_from,
                   at_risk=bool(getattr(ctrl, "at_risk", False)),
                   dropped_clients=sorted(getattr(ctrl, "dropped_clients", ()) or ()))
    doc = _finite_or_none({
        "version": RESULTS_VERSION,
        "seed": int(cfg["seed"]),
        "summary": summary,
        "rounds": None,
        "profile": profile,
        "cost": getattr(strategy, "cost_report", None),
        "replans": ([{**r, "round": int(r["round"]) + offset} for r in ctrl.replans]
                    if ctrl is not None else []),
        "plan": plan_to_dict(plan) if plan is not None else None,
        "scenario": None,
        "config": dict(cfg),
    })
    doc["rounds"] = (rounds_memo.section(profile_records, train) if rounds_memo is not None
                     else _finite_or_none(job_rounds(profile_records, train)))
    doc["scenario"] = _scenario_doc(strategy.scenario)
    return doc


def _scenario_doc(scenario: Any) -> dict[str, Any] | None:
    """The scenario's results section, made once per scenario object.

    Every round rewrites results.json; with thousands of clients the scenario
    is its largest part and does not change between rewrites (a scenario is
    immutable; a changed one is a new object). The last one is kept, by a weak
    reference (not in the scenario, which a checkpoint pickles). Shared
    between documents: read only.
    """
    from depl_fl.contract.scenario import scenario_to_dict

    if scenario is None:
        return None
    return _SCENARIO_DOC.get(scenario, lambda: _finite_or_none(scenario_to_dict(scenario)))


def plot_results(doc: Mapping[str, Any], path: str | Path) -> Path:
    """PNG: loss per round, the predicted pi-quantile of the final loss, the target line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = doc["rounds"]
    summary = doc["summary"]
    xs = [0] + [r["round"] for r in rounds]
    start = rounds[0].get("loss_before") if rounds and rounds[0].get("phase") == "profile" \
        else summary.get("initial_loss")
    loss = [start] + [r["loss"] for r in rounds]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(xs, [math.nan if v is None else v for v in loss], marker="o", ms=3,
            label="validation loss (decisions)")
    test = [summary.get("initial_test_loss")] + [r.get("test_loss") for r in rounds]
    if any(v is not None for v in test):
        ax.plot(xs, [math.nan if v is None else v for v in test], marker=".", ms=3, lw=0.8,
                label="test loss (reported)")
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
    final = summary.get("final_test_loss")
    final = summary["final_loss"] if final is None else final
    ax.set_title(f"{summary['method']}, seed {summary['seed']}: final {final:.3f}, "
                 f"energy {summary.get('total_energy_j', summary['cost_j']):.4g} J")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_results(doc: Mapping[str, Any], out_dir: str | Path, plot: bool = True,
                  compact: bool = False, rounds_memo: RoundsMemo | None = None,
                  durable: bool = True) -> Path:
    """Atomically write ``results.json`` (and ``loss.png``) into ``out_dir``; returns the JSON path.

    ``compact``: without indentation (the same document). The rewrite after
    every round uses it: an indented dump goes through json's pure-Python
    encoder, and the document grows with every round (0.16 s a round after
    120 rounds); the job's last write is indented. ``rounds_memo``: the memo
    ``doc`` was built with, whose kept round texts a compact write reuses.
    ``durable``: flushed to the disk before it replaces the last one
    (:mod:`depl_fl.runs.checkpoint` says when a per-round write is).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = compact_json(doc, rounds_memo) if compact else json.dumps(doc, indent=2, allow_nan=False)
    path = atomic_write_text(out / "results.json", text + "\n", durable=durable)
    if plot and doc.get("rounds"):
        plot_results(doc, out / "loss.png")
    return path


def compact_json(doc: Mapping[str, Any], rounds_memo: RoundsMemo | None = None) -> str:
    """``json.dumps(doc, allow_nan=False)``, the same text, with the scenario section encoded once.

    The section is the same object from one rewrite to the next while the
    scenario does not change (:func:`_scenario_doc`); with thousands of
    clients its text is half of the document's, so it is kept with the
    section it was made from. With ``rounds_memo`` the final round records'
    texts are reused as well (:class:`RoundsMemo`).
    """
    global _SCENARIO_TEXT
    section = doc.get("scenario")
    if not isinstance(section, dict) or not all(isinstance(k, str) for k in doc):
        return json.dumps(doc, allow_nan=False)
    if _SCENARIO_TEXT is None or _SCENARIO_TEXT[0] is not section:
        _SCENARIO_TEXT = (section, json.dumps(section, allow_nan=False))

    def text(key: str, value: Any) -> str:
        if key == "scenario":
            return _SCENARIO_TEXT[1]  # type: ignore[index]
        if key == "rounds" and rounds_memo is not None and isinstance(value, list):
            return rounds_memo.text(value)
        return json.dumps(value, allow_nan=False)

    return "{" + ", ".join(f"{json.dumps(k)}: {text(k, v)}" for k, v in doc.items()) + "}"


def mark_interrupted(out_dir: str | Path) -> Path:
    """Set ``summary.status`` of ``out_dir/results.json`` to ``interrupted`` (atomically).

    A job interrupted before its first write gets a minimal document, so that
    every interrupted job leaves a ``results.json`` saying so.
    """
    path = Path(out_dir) / "results.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = {"version": RESULTS_VERSION, "summary": {"rounds": 0}, "rounds": [], "replans": []}
    if doc["summary"].get("status") in (None, "running"):
        doc["summary"]["status"] = "interrupted"
    return write_results(doc, out_dir, plot=False)


def mark_stopped(out_dir: str | Path, status: str, reason: str) -> Path | None:
    """Set the status of a job that stopped on an error (``infeasible`` or ``failed``).

    Only a job that already wrote ``results.json`` (it ran rounds, e.g. its
    exploration) is marked, with ``summary.error`` = ``reason``; a job refused
    before its first round leaves nothing behind.  Returns the path, or ``None``.
    """
    if status not in ("infeasible", "failed"):
        raise ValueError(f"status must be 'infeasible' or 'failed', got {status!r}")
    path = Path(out_dir) / "results.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if doc.get("summary", {}).get("status") not in (None, "running"):
        return path
    doc["summary"].update(status=status, error=reason)
    return write_results(doc, out_dir, plot=False)
