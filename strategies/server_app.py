"""The DepL Flower ServerApp: wires DepLStrategy to the config, the planner and the results.

The run configuration reaches the app by closure (:func:`make_server_app`,
used by ``depl_fl.main``) or, for ``flwr run .``, from the run config
(``overrides`` = Hydra overrides, see :func:`depl_fl.runs.runconfig.config_from_run_config`).
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from depl_fl.console import log_to
from depl_fl.contract.plan import Plan, Targets
from depl_fl.contract.scenario import Scenario
from depl_fl.errors import DeplError, InfeasibleError, ScenarioError
from depl_fl.runs.runconfig import config_from_run_config, job_network
from strategies.depl_strategy import DepLStrategy, arrays_to_state, state_to_arrays
from strategies.robust_aggregation import AggregationSettings

LOG = logging.getLogger("depl_fl.server")


def targets_of(cfg: Mapping[str, Any]) -> Targets:
    """The run's :class:`Targets` from ``cfg.target``."""
    t = cfg["target"]
    return Targets(float(t["loss"]), float(t["prob"]), float(t["deadline_s"]),
                   None if t.get("max_rounds") is None else int(t["max_rounds"]))


def make_plan_fn(cfg: Mapping[str, Any]) -> Callable[[Scenario, Targets, Any], Plan]:
    """``plan_fn(scenario, targets, start)`` calling :func:`depl_fl.planner.make_plan`.

    ``plan_fn.holds(scenario, targets, start, rounds)`` is the planner's
    acceptance test of a remaining plan (:func:`depl_fl.planner.plan_holds`,
    the same seed and trajectories), which tracking may run before a re-plan.
    """
    planner = cfg["planner"]

    def plan_fn(scenario: Scenario, targets: Targets, start: Any) -> Plan:
        from depl_fl.planner import make_plan

        return make_plan(scenario, targets, method=str(cfg["method"]), eta=float(planner["eta"]),
                         guarantee=str(planner["guarantee"]), seed=int(cfg["seed"]), start=start,
                         mc_trajectories=int(planner["mc_trajectories"]))

    def holds(scenario: Scenario, targets: Targets, start: Any, rounds: Any) -> tuple[bool, float]:
        from depl_fl.planner import plan_holds

        return plan_holds(scenario, targets, rounds, start, seed=int(cfg["seed"]),
                          mc_trajectories=int(planner["mc_trajectories"]))

    plan_fn.holds = holds  # type: ignore[attr-defined]
    return plan_fn


def make_evaluate_fn(cfg: Mapping[str, Any]) -> Callable[..., MetricRecord]:
    """Central evaluation on the server's validation and test splits.

    ``evaluate_fn(server_round, arrays, compression=0.0)`` evaluates the model
    variant ``compression`` pruned from the global weights (the variant
    trained in that round; the full model for FedAvg), returning ``loss`` and
    ``accuracy`` on the validation split (what decisions read) and
    ``test-loss`` and ``test-accuracy`` on the test split (only reported).
    Two figures say how far the test loss that judges a run may lie from the
    validation loss that decides it, both from the per-sample validation
    losses and the test split's size only: ``loss-sem``, the standard error
    of a mean over as many samples as the test split holds, and
    ``loss-margin``, the ``target.prob``-quantile of ``test - validation``
    (bootstrap-t, :func:`depl_fl.tracking.split_margin.stop_margin`; seeded by
    the run seed and the round), on which tracking stops. The margin is
    computed only where a stop test can read it: when ``loss`` is at most
    ``target.loss`` (or ``target.prob <= 0.5``, where a margin may be
    negative); above the target no margin lets ``loss + margin <= target.loss``
    pass, and ``loss-margin`` is NaN (not measured). A round whose loss is
    flagged as a spike and imputed below the target then reads the last
    measured margin.
    With ``tracking.stop_looks=joint`` the margin holds for every evaluation
    so far that measured one, not for this one alone
    (:func:`depl_fl.tracking.split_margin.joint_stop_margin`): the stop rule
    checks every round and stops at the first that passes. Those evaluations'
    per-sample validation losses are kept in this process (a resumed job
    starts its looks afresh).
    ``evaluate_fn.validation_loss(arrays, compression)`` computes the
    validation loss alone (the same figure as ``loss``), for the exploration's
    group observations, which read nothing else. Every loss here is
    ``model.loss`` (cross-entropy by default, :mod:`depl_fl.task.losses`),
    computed on ``train.device``.
    """
    from depl_fl.task.devices import resolve_device
    from depl_fl.task.local_update import loaded_variant
    from depl_fl.task.losses import load_loss, loss_spec
    from depl_fl.task.partitions import geometry, test_split, validation_split
    from depl_fl.task.training import evaluate_model, evaluate_with_losses
    from depl_fl.tracking.split_margin import joint_stop_margin, stop_margin

    prob, seed, target = float(cfg["target"]["prob"]), int(cfg["seed"]), float(cfg["target"]["loss"])
    loss_fn = load_loss(loss_spec(cfg))
    device = resolve_device(cfg["train"].get("device", "cpu"))
    joint = (cfg.get("tracking") or {}).get("stop_looks", "one") == "joint"
    looks: list[Any] = []  # per-sample validation losses of the evaluations that measured a margin

    def margin_of(losses: Any, test_size: int, server_round: int) -> float:
        margin_seed = seed * 100_003 + int(server_round)
        if not joint:
            return stop_margin(losses, test_size, prob, seed=margin_seed)
        import numpy as np

        looks.append(np.asarray(losses, dtype=float))
        return joint_stop_margin(np.vstack(looks), test_size, prob, seed=margin_seed)

    def validation_loss(arrays: ArrayRecord, compression: float = 0.0) -> float:
        """The validation loss alone (what a decision reads), without the figures for the record."""
        import torch

        torch.set_num_threads(1)
        model = loaded_variant(arrays_to_state(arrays), job_network(cfg, geometry(cfg)), float(compression),
                               device)
        return float(evaluate_model(model, *validation_split(cfg), loss_fn=loss_fn)[0])

    def evaluate_fn(server_round: int, arrays: ArrayRecord, compression: float = 0.0) -> MetricRecord:
        import numpy as np
        import torch

        torch.set_num_threads(1)
        model = loaded_variant(arrays_to_state(arrays), job_network(cfg, geometry(cfg)), float(compression),
                               device)
        val, test = validation_split(cfg), test_split(cfg)
        loss, acc, losses = evaluate_with_losses(model, *val, loss_fn=loss_fn)
        test_size = len(test[1])
        sem = float(np.std(losses, ddof=1)) / math.sqrt(test_size)
        readable = loss <= target or prob <= 0.5
        margin = (margin_of(losses, test_size, server_round)
                  if readable and np.all(np.isfinite(losses)) else float("nan"))
        test_loss, test_acc = evaluate_model(model, *test, loss_fn=loss_fn)
        return MetricRecord({"loss": float(loss), "accuracy": float(acc), "loss-sem": sem,
                             "loss-margin": margin, "test-loss": float(test_loss),
                             "test-accuracy": float(test_acc)})

    evaluate_fn.validation_loss = validation_loss  # type: ignore[attr-defined]
    return evaluate_fn


def placeholder_loss(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A valid ``loss`` section that only lets the cost model run (never used for planning)."""
    from depl_fl.runs.runconfig import variant_list

    flat = {"levels": [0.0, 1.0], "mean": [0.0, 0.0], "std": [1.0, 1.0]}
    return {"initial": 1.0, "switch": [], "run": {m: dict(flat) for m, _ in variant_list(cfg)}}


def make_profiler(cfg: Mapping[str, Any], scenario_of: Callable[..., Scenario]) -> Any:
    """The profile source of ``cfg``: federated exploration rounds (default) or in-process pilots."""
    if str(cfg["profile"].get("source", "federated")) == "inprocess":
        from depl_fl.orchestration.profiling import InProcessProfile

        return InProcessProfile(cfg)
    from depl_fl.orchestration.profile_prior import load_prior
    from strategies.federated_profiling import FederatedProfiler

    path = cfg["profile"].get("prior")
    prior = load_prior(path, cfg) if path else None
    return FederatedProfiler(cfg, lambda props: scenario_of(props, placeholder_loss(cfg)), scenario_of,
                             prior=prior)


def cost_settings(cfg: Mapping[str, Any], deployment: bool) -> tuple[str, str]:
    """``(cost source, clock)`` of ``cfg``: ``cost.clock=auto`` is ``wall`` in a deployment, else ``model``.

    ``cost.source=measured`` applies in a deployment (or with the wall clock); in
    simulation the replies time an emulation, so the table stays.
    """
    cost = cfg.get("cost") or {}
    clock = str(cost.get("clock", "auto"))
    if clock == "auto":
        clock = "wall" if deployment else "model"
    source = str(cost.get("source", "table"))
    return (source if (deployment or clock == "wall") else "table"), clock


def measured_scenario_fn(base: Callable[[Mapping[str, Mapping[str, Any]]], Scenario], profiler: Any,
                         report: dict[str, Any]) -> Callable[[Mapping[str, Mapping[str, Any]]], Scenario]:
    """``base`` with the costs fitted from the exploration rounds' measurements written in.

    Without measured rounds (a reused profile) the declared table stays, and ``report`` says so.
    """
    from depl_fl.tracking.device_costs import fit_costs, fitted_scenario

    def scenario_fn(properties: Mapping[str, Mapping[str, Any]]) -> Scenario:
        scenario = base(properties)
        rounds = list(getattr(profiler, "round_costs", None) or [])
        if not rounds:
            report.update(used="table", why="no exploration round of this job measured the devices")
            return scenario
        fit = fit_costs(rounds, scenario)
        fitted, quality = fitted_scenario(scenario, fit)
        report.update(used="measured", fit=fit.to_dict(), **quality)
        return fitted

    return scenario_fn


def warn_loss_units(cfg: Mapping[str, Any]) -> None:
    """Log that the plan regime's task constants are in the units they were fitted in (a user's loss)."""
    from depl_fl.task.losses import loss_spec

    regime = (cfg["profile"].get("plan_regime") or {})
    federated = str(cfg["profile"].get("source", "federated")) == "federated"
    if loss_spec(cfg) is not None and federated and regime.get("enabled", True):
        LOG.warning("model.loss %s: profile.plan_regime's constants (floor %s, oscillation %s) are in the "
                    "units of the loss they were fitted with (cross-entropy of the digits CNN); fit them "
                    "for this loss or set profile.plan_regime.enabled=false", loss_spec(cfg),
                    regime.get("floor"), regime.get("oscillation"))


def profile_config(cfg: Mapping[str, Any], network: Any) -> Mapping[str, Any]:
    """``cfg`` as the profiler sees it: with a user's network, its digest in ``model.network``.

    A :class:`depl_fl.task.subnets.UserNetwork` is no part of the configuration,
    so the cached loss profile keys on its digest
    (:func:`depl_fl.task.network_identity.network_digest`): a ``task.py`` with
    another network explores again instead of reusing the old network's profile.
    DepL's own networks are named by the configuration and key as before.
    """
    from depl_fl.task.subnets import UserNetwork

    if not isinstance(network, UserNetwork):
        return cfg
    from depl_fl.task.network_identity import network_digest

    return {**cfg, "model": {**cfg["model"], "network": network_digest(network)}}


def build_strategy(cfg: Mapping[str, Any], plan: Plan | None = None, *, on_round: Any = None,
                   resume: Mapping[str, Any] | None = None, deployment: bool = False,
                   network: Any = None) -> DepLStrategy:
    """DepLStrategy for ``cfg``: the profiler measures the loss profile, the scenario uses it.

    ``on_round`` and ``resume`` are passed on (checkpointing, see :func:`run_server`);
    ``deployment`` picks the clock and cost source of ``cost.*`` (:func:`cost_settings`).
    ``network`` (a :class:`depl_fl.task.subnets.UserNetwork`) replaces the
    configured model and dataset geometry (a user's own Flower app); without it
    ``model.loss`` is checked here (:func:`depl_fl.task.losses.check_loss`), before any round.
    """
    from depl_fl.orchestration.scenario_builder import build_scenario, fill_clusters, model_docs_for
    from depl_fl.tracking.device_costs import DriftTest

    # DepL's clients train with train.lr; a user's own app trains with its train function's
    learning_rate_at = "train.lr" if network is None else "in your train function"
    if network is None:
        from depl_fl.task.losses import check_loss, loss_spec
        from depl_fl.task.partitions import geometry

        network = geometry(cfg)
        check_loss(loss_spec(cfg), network.num_classes, network)
        warn_loss_units(cfg)
    network = job_network(cfg, network)  # the groups kept whole depend on the job's compressions
    models = model_docs_for(cfg, network)

    def scenario_of(properties: Mapping[str, Mapping[str, Any]], loss: Mapping[str, Any]) -> Scenario:
        return build_scenario(cfg, fill_clusters(cfg, properties), models, loss)

    profiler = make_profiler(profile_config(cfg, network), scenario_of)

    def table_scenario_fn(properties: Mapping[str, Mapping[str, Any]]) -> Scenario:
        return scenario_of(properties, profiler.loss_doc)

    source, clock = cost_settings(cfg, deployment)
    profiler.clock = clock
    profiler.measure_levels = source == "measured"
    cost_report: dict[str, Any] = {"source": source, "clock": clock, "used": "table"}
    scenario_fn = (measured_scenario_fn(table_scenario_fn, profiler, cost_report) if source == "measured"
                   else table_scenario_fn)
    cost_cfg = cfg.get("cost") or {}

    train = cfg["train"]
    server = cfg["server"]
    replan_policy = None
    tracking_cfg = cfg.get("tracking") or {}
    if tracking_cfg.get("enabled"):
        from depl_fl.tracking.online import ReplanPolicy

        replan_policy = ReplanPolicy(every_rounds=tracking_cfg.get("every_rounds"),
                                     margin=float(tracking_cfg.get("margin", 0.0)),
                                     ahead_margin=tracking_cfg.get("ahead_margin"),
                                     keep_dependable_plan=bool(tracking_cfg.get("keep_dependable_plan",
                                                                                False)))
    from depl_fl.task.subnets import network_layout, network_name

    strategy = DepLStrategy(
        network=network_layout(network), arch=network_name(network), targets=targets_of(cfg),
        scenario_fn=scenario_fn, plan_fn=make_plan_fn(cfg),
        num_clients=int(cfg["num_clients"]),
        train_settings={"local-epochs": int(train["local_epochs"]), "lr": float(train["lr"]),
                        "batch-size": int(train["batch_size"]), "seed": int(cfg["seed"])},
        guarantee=str(cfg["planner"]["guarantee"]), tracking=bool(tracking_cfg.get("enabled")),
        node_wait_timeout_s=float(server["node_wait_timeout_s"]), plan=plan,
        replan_policy=replan_policy, on_round=on_round, resume=resume,
        timeout_factor=float(server.get("round_timeout_factor", 3.0)),
        timeout_slack_s=float(server.get("round_timeout_slack_s", 60.0)),
        # The mean-based baseline tracks its own criterion (the predicted mean), so
        # that online re-planning does not turn it into a quantile method.
        track_mean=cfg["method"] == "expectation",
        aggregation=aggregation_settings(cfg),
        spike_tail_prob=float(tracking_cfg.get("spike_tail_prob", 1e-3)), profiler=profiler,
        clock=clock, drift=DriftTest(float(cost_cfg.get("drift_tolerance", 0.25)),
                                     int(cost_cfg.get("drift_rounds", 2))),
        method=str(cfg["method"]), assign_clusters=lambda properties: fill_clusters(cfg, properties),
        diverge_rounds=tracking_cfg.get("diverge_rounds"), stall_rounds=tracking_cfg.get("stall_rounds"),
        plan_end=str(tracking_cfg.get("plan_end", "plan")),
        early_stop_model=str(tracking_cfg.get("early_stop_model", "best")), job_network=network,
        learning_rate_at=learning_rate_at)
    strategy.cost_report = cost_report
    return strategy


def aggregation_settings(cfg: Mapping[str, Any]) -> AggregationSettings:
    """The ``aggregation`` section as settings (one-line ScenarioError when invalid)."""
    try:
        return AggregationSettings.from_config(cfg.get("aggregation"))
    except (TypeError, ValueError) as exc:
        raise ScenarioError(f"config {exc}") from None


def summary_line(summary: Mapping[str, Any]) -> str:
    """One human-readable line of a job's ``results.json`` summary (missing figures as n/a)."""
    def num(key: str, fmt: str) -> str:
        value = summary.get(key)
        return format(value, fmt) if isinstance(value, (int, float)) else "n/a"

    verdict = "met" if summary.get("met") else "NOT met"
    return (f"summary: {summary.get('method')} seed {summary.get('seed')}: final test loss "
            f"{num('final_test_loss', '.4f')} (validation {num('final_loss', '.4f')}) vs target "
            f"{num('target_loss', 'g')} ({verdict}; "
            f"pi={num('target_prob', 'g')}), energy {num('total_energy_j', '.4g')} J (training "
            f"{num('cost_j', '.4g')} J + profiling {num('profile_energy_j', '.4g')} J), modeled time "
            f"{num('time_s', '.4g')} s, {summary.get('rounds')} rounds, "
            f"{summary.get('replans', 0)} re-plans"
            + (f", resumed after {resumed_point(summary)}" if summary.get("resumed_from") else "")
            + (", AT RISK" if summary.get("at_risk") else "")
            + (f", stopped: {summary['stop_reason']}" if summary.get("stop_reason") else ""))


def resumed_point(summary: Mapping[str, Any]) -> str:
    """Where a resumed job went on, from its summary: ``round 21 (8 exploration + 13 training rounds)``.

    ``resumed_from`` numbers exploration rounds first; the exploration rounds
    before it are at most ``profile_rounds``, the rest are training rounds. A
    job whose every round came before the restart had already finished.
    """
    from depl_fl.orchestration.checkpointing import resume_point

    completed = int(summary["resumed_from"])
    profile_rounds = int(summary.get("profile_rounds") or 0)
    return resume_point(completed, min(completed, profile_rounds),
                        finished=completed == profile_rounds + int(summary.get("rounds") or 0))


T = TypeVar("T")

#: Set when the job is being interrupted (Ctrl-C/SIGTERM): no more "running" writes.
STOPPING = threading.Event()
#: Held while a round's checkpoint and results.json are written, so that an interrupt
#: (from the signal handler in the main thread) never lands between them and a later
#: "running" write never replaces "interrupted". Re-entrant: in-process jobs run the
#: ServerApp in the main thread, where the handler may interrupt that very write.
RESULTS_LOCK = threading.RLock()


def interrupt_job(out_dir: str | Path, wait_s: float = 30.0) -> Path | None:
    """Stop checkpointing and mark ``out_dir/results.json`` interrupted; returns its path.

    Waits up to ``wait_s`` for a write in progress in another thread to finish.
    A job that has finished (:func:`depl_fl.runs.job_end.job_end_status`) is
    left as it is: ``None``.
    """
    from depl_fl.runs.job_end import job_end_status
    from depl_fl.runs.results import mark_interrupted

    STOPPING.set()
    locked = RESULTS_LOCK.acquire(timeout=wait_s)
    try:
        return None if job_end_status(out_dir) is not None else mark_interrupted(out_dir)
    finally:
        if locked:
            RESULTS_LOCK.release()


def end_job(out_dir: str | Path, status: int, write: Callable[[], T]) -> T:
    """``write()`` the job's final results.json and record its exit ``status``, as one step for a
    Ctrl-C or SIGTERM (which then ends the process with ``status``, :mod:`depl_fl.runs.job_end`)."""
    from depl_fl.runs.job_end import record_job_end, signals_held

    with RESULTS_LOCK, signals_held():
        written = write()
        record_job_end(out_dir, status)
    return written


def _checkpointer(cfg: Mapping[str, Any], out_dir: Path, clock: Callable[[], float]) -> Callable[..., None]:
    """``on_round(strategy, arrays, loss)``: checkpoint, then results.json with status running."""
    from depl_fl.orchestration.checkpointing import strategy_payload
    from depl_fl.runs.checkpoint import FlushPacer, save_checkpoint
    from depl_fl.runs.results import RoundsMemo, build_results, write_results

    memo = RoundsMemo()
    pacer = FlushPacer()  # atomic every round, on the disk every FLUSH_EVERY_S (checkpoint's durability)

    def on_round(strategy: DepLStrategy, arrays: ArrayRecord, loss: float) -> None:
        with RESULTS_LOCK:
            if STOPPING.is_set():
                return
            wall = clock()
            durable = pacer.due()
            payload = strategy_payload(strategy, arrays_to_state(arrays), loss, wall_s=wall)
            save_checkpoint(out_dir, cfg, payload, durable=durable)
            write_results(build_results(strategy, cfg, wall_s=wall, status="running",
                                        resumed_from=strategy.resumed_from, rounds_memo=memo), out_dir,
                          plot=False, compact=True, rounds_memo=memo, durable=durable)

    return on_round


#: Threads of numpy's and scipy's BLAS while the server runs the job (the in-process clients share it).
SERVER_BLAS_THREADS = 1


def server_blas_threads() -> Any:
    """A context in which numpy's and scipy's OpenBLAS use ``SERVER_BLAS_THREADS`` threads.

    The server's numpy work (aggregation, Monte Carlo planning, the stop
    margin) is on arrays too small to gain from a BLAS thread pool, while
    OpenBLAS's idle pool threads keep spinning after every call it makes:
    at 1,000 clients that spinning was as much CPU time as the server's own
    work on a 2-core machine (docs/SCALE.md, "Re-planning cost"). The
    same results: the decisions and losses of the scale benchmark's job are
    bit for bit those with the default pool. Torch's threads (local training,
    evaluation) are not BLAS pools this touches.
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=SERVER_BLAS_THREADS, user_api="blas")


def run_server(grid: Grid, cfg: Mapping[str, Any], out_dir: str | Path,
               plan: Plan | None = None, deployment: bool = False) -> Path:
    """Run the whole DepL job on ``grid`` and write ``results.json`` (+ plot) into ``out_dir``.

    After every round the job is checkpointed into ``out_dir`` and
    ``results.json`` is rewritten with ``summary.status: running``; with
    ``resume=true`` the job continues from the checkpoint of ``out_dir``.
    Ctrl-C leaves ``results.json`` with ``summary.status: interrupted``.
    The exploration options that follow tracking are resolved first (a no-op on
    a config from :func:`depl_fl.runs.runconfig.prepare`), and ``train.device``
    on this machine (:func:`depl_fl.runs.device_choice.resolve_job_devices`,
    where the server evaluates): the job runs and records values, never ``auto``.

    Returns
    -------
    Path
        The path of ``results.json``.
    """
    from depl_fl.runs.checkpoint import CHECKPOINT_FILE, flush_file, load_checkpoint, set_random_state
    from depl_fl.runs.device_choice import resolve_job_devices
    from depl_fl.runs.exploration_choice import resolve_exploration
    from depl_fl.runs.results import build_results, write_results
    from depl_fl.task.local_update import initial_state
    from depl_fl.task.partitions import geometry

    cfg = resolve_job_devices(resolve_exploration(cfg), simulation=not deployment)
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    resume = load_checkpoint(out_dir, cfg) if cfg.get("resume") else None
    if resume is not None:
        set_random_state(resume["random"])
    wall0 = float(resume["wall_s"]) if resume is not None else 0.0

    def clock() -> float:
        return wall0 + time.perf_counter() - t0

    strategy = build_strategy(cfg, plan=plan, on_round=_checkpointer(cfg, out_dir, clock), resume=resume,
                              deployment=deployment)
    initial = state_to_arrays(initial_state(geometry(cfg), int(cfg["seed"])))
    evaluate = make_evaluate_fn(cfg)
    try:
        with server_blas_threads():
            strategy.start(grid, initial, timeout=float(cfg["server"]["round_timeout_s"]),
                           evaluate_fn=evaluate)
    except KeyboardInterrupt:
        interrupt_job(out_dir)
        raise
    except DeplError as exc:  # e.g. no dependable plan after the exploration rounds
        from depl_fl.runs.results import mark_stopped

        stopped = "infeasible" if isinstance(exc, InfeasibleError) else "failed"
        reason = " ".join(str(exc).split())
        end_job(out_dir, exc.exit_status, lambda: mark_stopped(out_dir, stopped, reason))
        raise
    finally:  # the last rounds' checkpoint on the disk too, however the job ends
        flush_file(out_dir / CHECKPOINT_FILE)
    doc = build_results(strategy, cfg, wall_s=clock(), resumed_from=strategy.resumed_from)
    LOG.info("%s", summary_line(doc["summary"]))
    return end_job(out_dir, 0, lambda: write_results(doc, out_dir,
                                                     plot=bool(cfg.get("output", {}).get("plot", True))))


def _log_to_stdout() -> None:
    """Send the ``depl_fl`` INFO lines to stdout, which ``flwr run --stream`` shows.

    In a deployment nothing else configures the ``depl_fl`` loggers, so the
    plan and per-round lines would be dropped.
    """
    log_to(sys.stdout)


def make_server_app(cfg: Mapping[str, Any] | None = None, out_dir: str | Path | None = None,
                    outcome: dict[str, Any] | None = None) -> ServerApp:
    """Build the ServerApp.

    Parameters
    ----------
    cfg : mapping, optional
        The composed run configuration; ``None`` reads it from ``context.run_config``.
    out_dir : path, optional
        Output folder (default: ``run_config["output-dir"]``, else the config's
        ``output.dir``, else ``outputs/flwr-<time>`` under the ServerApp's working directory).
    outcome : dict, optional
        Filled with ``results`` (the results.json path) or ``error`` (a
        :class:`DeplError`), so the caller can report user mistakes in one line
        instead of the simulation runtime's traceback.
    """
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        if cfg is None:
            _log_to_stdout()
        run_cfg = cfg if cfg is not None else config_from_run_config(context.run_config)
        # A deployment (flwr run) can only pass run config keys declared in
        # pyproject.toml, so the folder also comes from the override output.dir.
        target = out_dir or context.run_config.get("output-dir") or \
            (run_cfg.get("output") or {}).get("dir") or \
            Path("outputs") / time.strftime("flwr-%Y-%m-%d_%H-%M-%S")
        try:
            path = run_server(grid, run_cfg, target, deployment=cfg is None)
        except DeplError as exc:
            if outcome is None:
                raise
            outcome["error"] = exc
            return
        if outcome is not None:
            outcome["results"] = path
        LOG.info("results: %s", path)

    return app


#: ServerApp for ``flwr run .`` (configuration from the run config).
app = make_server_app()
