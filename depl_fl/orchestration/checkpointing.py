"""What a DepLStrategy checkpoint holds, and how a run controller is restored from one.

The file format and the atomic write live in :mod:`depl_fl.runs.checkpoint`;
this module only knows the strategy: the global model, the current loss, the
scenario and plan, and the whole state of the
:class:`~depl_fl.orchestration.controller.RunController` (round records, remaining
rounds, re-plans, failed and dropped clients, elapsed modelled time, the
online estimator and the re-planning policy), and the cost report (which
costs the plans used: with ``cost.source=measured`` the fit from the
exploration rounds, made once when the scenario is built and so not remade by
a job resumed after its plan). The planner callable is not saved: the resumed
job builds its own from the same configuration.
"""

from __future__ import annotations

from typing import Any, Mapping

#: Controller attributes that are rebuilt, not restored (notes are logged once the round is saved,
#: the re-planning scenario is a cache, and the last infeasible re-plan holds that cache's scenario
#: object: it is saved apart, :data:`INFEASIBLE_KEY`, and bound to the restored run's scenario).
_NOT_SAVED = ("planner", "notes", "_replanning", "_infeasible")
#: The controller's last infeasible re-plan (round and start), while a skip may rest on it.
INFEASIBLE_KEY = "infeasible_replan"
#: Strategy attributes carried across a restart (the robust aggregation's norm reference).
STRATEGY_STATE = ("_threshold", "_norm_history")


def controller_state(controller: Any) -> dict[str, Any]:
    """The controller's attributes minus the planner callable and caches, plus its last infeasible re-plan."""
    state = {k: v for k, v in vars(controller).items() if k not in _NOT_SAVED}
    state[INFEASIBLE_KEY] = controller.infeasible_state()
    return state


def restore_controller(controller: Any, state: Mapping[str, Any]) -> None:
    """Overwrite a freshly built controller's state with a saved one (a checkpoint without the
    infeasible re-plan, written before it was kept, re-plans once more where the run had skipped)."""
    for key, value in state.items():
        if key not in _NOT_SAVED and key != INFEASIBLE_KEY:
            setattr(controller, key, value)
    controller.restore_infeasible(state.get(INFEASIBLE_KEY))


def strategy_payload(strategy: Any, global_state: Mapping[str, Any], loss: float, *,
                     wall_s: float) -> dict[str, Any]:
    """Checkpoint payload of ``strategy`` after its last completed round.

    ``global_state`` is the global model as a name -> numpy array mapping.

    ``phase`` is ``profile`` during the federated exploration (no plan and no
    controller yet; the profiler's state says where the exploration stands),
    ``train`` once the job has its plan.
    """
    ctrl = strategy.controller
    payload = {
        "phase": "profile" if ctrl is None else "train",
        "rounds_done": 0 if ctrl is None else ctrl.rounds_done,
        "global_state": dict(global_state),
        "loss": float(loss),
        "properties": dict(strategy.properties),
        "wall_s": float(wall_s),
        "resumed_from": strategy.resumed_from,
        "strategy": {k: getattr(strategy, k) for k in STRATEGY_STATE if hasattr(strategy, k)},
        "profiler": _profiler_state(getattr(strategy, "profiler", None)),
        "cost_report": _cost_report(strategy),
    }
    if ctrl is not None:
        payload.update(initial_loss=strategy.initial_loss,
                       initial_test_loss=getattr(strategy, "initial_test_loss", None),
                       scenario=ctrl.scenario, plan=strategy.plan, controller=controller_state(ctrl),
                       best_model=best_model_payload(getattr(strategy, "best_arrays", None),
                                                     ctrl.rounds_done))
    return payload


def best_model_payload(best: Any, rounds_done: int) -> dict[str, Any] | None:
    """The strategy's best model so far as a checkpoint keeps it: ``{"round", "state"}`` or ``None``.

    ``best`` is ``(round, arrays)`` (:attr:`strategies.depl_strategy.DepLStrategy.best_arrays`);
    ``state`` is ``None`` while that round is the last one (the checkpoint's
    ``global_state`` is that model), else its arrays: one extra model in the
    checkpoint while the best is an earlier round's. A resumed job so ends
    with the same model as the uninterrupted one.
    """
    if best is None:
        return None
    round_no, arrays = best
    if int(round_no) == int(rounds_done):
        return {"round": int(round_no), "state": None}
    from depl_fl.orchestration.npy_arrays import array_of

    return {"round": int(round_no), "state": {k: array_of(v) for k, v in arrays.items()}}


def restore_strategy_state(strategy: Any, doc: Mapping[str, Any]) -> None:
    """Put a checkpoint's strategy state (:data:`STRATEGY_STATE`, the cost report) back into ``strategy``.

    The cost report is filled in place: the scenario function that wrote it
    (:func:`strategies.server_app.measured_scenario_fn`) keeps writing into the
    same object. A checkpoint without one (written before it was kept) leaves
    the report as the strategy was built.
    """
    for key, value in (doc.get("strategy") or {}).items():
        setattr(strategy, key, value)
    report, saved = getattr(strategy, "cost_report", None), doc.get("cost_report")
    if isinstance(report, dict) and saved:
        report.clear()
        report.update(saved)


def rounds_completed(doc: Mapping[str, Any]) -> int:
    """The job's last completed round in a checkpoint, numbered as in results.json.

    Exploration rounds come first, so a training-phase checkpoint's round is the
    number of exploration rounds plus its training rounds.
    """
    profiler = doc.get("profiler") or {}
    return len(profiler.get("records") or ()) + int(doc.get("rounds_done") or 0)


def resume_point(completed: int, explored: int, finished: bool = False) -> str:
    """Where a resumed job goes on, as its summary counts: ``round 21 (8 exploration + 13 training rounds)``.

    ``completed`` is the last completed round as numbered in results.json
    (:func:`rounds_completed`, exploration rounds first); ``explored`` how many
    of them were exploration rounds, the rest are training rounds (what the
    summary's ``rounds`` counts). ``finished``: no round was left to run.
    """
    explored = max(0, min(int(explored), int(completed)))
    trained = int(completed) - explored
    parts = ([f"{explored} exploration"] if explored else []) + ([f"{trained} training"] if trained or
                                                                  not explored else [])
    return (f"round {completed} ({' + '.join(parts)} rounds)"
            + ("; the job had already finished: no round left to run" if finished else ""))


def _cost_report(strategy: Any) -> dict[str, Any] | None:
    """A copy of the strategy's cost report (None without one)."""
    report = getattr(strategy, "cost_report", None)
    return dict(report) if isinstance(report, dict) else None


def _profiler_state(profiler: Any) -> dict[str, Any] | None:
    """What the federated profiler paid and fitted (in-process pilots keep nothing per job)."""
    state = getattr(profiler, "checkpoint_state", None)
    return state() if callable(state) else None
