"""Hydra entry point: one federated DepL job (``python -m depl_fl.main [overrides]``).

Composes ``conf/config.yaml`` and runs the Flower simulation (the loss
profile is measured by federated exploration rounds inside the job, see
:mod:`strategies.federated_profiling`; with ``profile.source=inprocess`` the
in-process pilots run before the simulation): ``flwr.simulation.run_simulation`` on Ray with
``client_resources.num_cpus = simulation.client_num_cpus`` and ``num_gpus =
simulation.client_num_gpus`` (default), or the
same ServerApp strategy and ClientApp code on the small in-process Grid
(``simulation=inprocess``). With ``simulation.ray_address`` the job joins a
running Ray cluster (``ray.init(address=...)``) instead of starting its own.
The configuration reaches both apps by closure.
Every job writes ``results.json`` and ``loss.png`` into its Hydra output
folder (one per job with ``-m``); the last line printed is the path of
``results.json``. User mistakes print one line (``depl-fl: ...``) and exit
with status 2 (3 when no dependable plan exists), among them a setting the
chosen mode does not read (:mod:`depl_fl.runs.mode_keys`), refused before
the job starts. A sweep runs every job even
when some fail, then exits non-zero with one line listing the failed jobs.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, Mapping

import hydra
from omegaconf import DictConfig

from depl_fl.console import log_to
from depl_fl.errors import DeplError, InfeasibleError, ScenarioError
from depl_fl.processes import descendants, hand_to_reaper
from depl_fl.runs.job_end import deferred_while_held, record_job_end, signals_held
from depl_fl.runs.mode_keys import HYDRA_JOB
from depl_fl.runs.results import mark_stopped
from depl_fl.runs.runconfig import conf_dir, prepare, to_plain
from depl_fl.sweep import SweepFailures, check_overrides, split_argv

LOG = logging.getLogger("depl_fl.main")
#: Failed jobs of the current sweep (Hydra's basic launcher runs the jobs in this process).
FAILURES = SweepFailures()


def _quiet_flower() -> None:
    os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import flwr.common.logger  # noqa: F401  (importing it sets Flower's logger to DEBUG: lower it after)

    log_to(sys.stdout, quiet_flower=True)


def run_job(cfg: Mapping[str, Any], out_dir: str | Path) -> Path:
    """Run one job of a validated plain config; returns the results.json path.

    ``train.device`` is resolved first (``auto`` recorded as what it became) and,
    with ``simulation.client_num_gpus``, checked against this machine
    (:func:`depl_fl.runs.device_choice.resolve_job_devices`); the network (a
    user's factory) is built and its forwards checked: before pilots or any
    simulation start.
    """
    from depl_fl.runs.device_choice import resolve_job_devices
    from depl_fl.task.losses import check_loss, loss_spec
    from depl_fl.task.partitions import geometry
    from depl_fl.task.subnets import check_network

    cfg = resolve_job_devices(cfg)
    geo = geometry(cfg)
    check_network(geo)  # a user's factory: one line before pilots or any simulation start
    check_loss(loss_spec(cfg), geo.num_classes, geo)
    joins = None
    if cfg["simulation"]["backend"] == "ray" and cfg["simulation"].get("ray_address"):
        from strategies.ray_cluster import find_cluster

        # ray.init would retry for minutes at an address where no cluster answers
        joins = find_cluster(str(cfg["simulation"]["ray_address"]))
        if joins != cfg["simulation"]["ray_address"]:
            LOG.info("simulation.ray_address=%s: joining the Ray cluster at %s",
                     cfg["simulation"]["ray_address"], joins)
    if cfg.get("resume"):  # no checkpoint, or another config's: one line before anything starts
        from depl_fl.runs.checkpoint import load_checkpoint

        load_checkpoint(out_dir, cfg)
    if str(cfg["profile"].get("source", "federated")) == "inprocess":
        from depl_fl.orchestration.profiling import ensure_profile

        # Before the simulation starts, so pilots never run inside Ray; the job then reads this file.
        ensure_profile(cfg, force=bool(cfg["profile"].get("force")))
    backend = cfg["simulation"]["backend"]
    if backend == "inprocess":
        from clients.client_app import make_client_app
        from strategies.inprocess_grid import InProcessGrid
        from strategies.server_app import run_server

        grid = InProcessGrid(make_client_app(cfg), int(cfg["num_clients"]))
        path = run_server(grid, cfg, out_dir)
        LOG.info("results: %s", path)  # the line the Ray backend's ServerApp logs
        return path

    from flwr.simulation import run_simulation

    from clients.client_app import make_client_app
    from strategies.server_app import make_server_app

    outcome: dict[str, Any] = {}
    sim = cfg["simulation"]
    init_args = ray_init_args(sim, joins)
    _start_ray(init_args)
    _check_room(sim, joins)
    _stop_on_signals(out_dir)  # again: ray.init replaced the SIGTERM handler with its own
    run_simulation(
        server_app=make_server_app(cfg, out_dir=out_dir, outcome=outcome),
        client_app=make_client_app(cfg),
        num_supernodes=int(cfg["num_clients"]),
        backend_config={"client_resources": client_resources(sim), "init_args": init_args},
    )
    if "error" in outcome:
        raise outcome["error"]
    if "results" not in outcome:
        raise RuntimeError("the Flower simulation ended without results (see the log above)")
    return Path(outcome["results"])


def client_resources(sim: Mapping[str, Any]) -> dict[str, float]:
    """Flower's ``client_resources`` of the ``simulation`` config: CPUs and GPU share of each client."""
    return {"num_cpus": float(sim["client_num_cpus"]), "num_gpus": float(sim.get("client_num_gpus") or 0.0)}


def ray_init_args(sim: Mapping[str, Any], joins: str | None = None) -> dict[str, Any]:
    """``ray.init`` arguments of the ``simulation`` config.

    With ``simulation.ray_address`` (``auto`` or ``HOST:PORT``) the job joins
    that running Ray cluster instead of starting Ray on this machine (``joins``:
    the ``HOST:PORT`` that :func:`strategies.ray_cluster.find_cluster` found for
    it, which ``auto`` stands for); the
    cluster's nodes then bring their own CPUs, so ``ray_num_cpus`` must be
    unset. Without it the job starts its own Ray (``address="local"``): a bare
    ``ray.init`` would join the cluster of the last ``ray start`` on this
    machine or ``RAY_ADDRESS`` unasked (and refuse ``num_cpus`` there). The
    client resources (``client_num_cpus``) apply either way: Flower places as
    many ClientApp actors on each node as its CPUs allow.
    """
    init_args: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
    if sim.get("ray_address"):
        init_args["address"] = joins or str(sim["ray_address"])
        return init_args
    init_args["address"] = "local"
    if sim.get("ray_num_cpus"):
        init_args["num_cpus"] = int(sim["ray_num_cpus"])
    return init_args


def _start_ray(init_args: Mapping[str, Any]) -> None:
    """Start Ray as Flower's ``RayBackend.init_ray`` would, before Flower does.

    ``ray.init`` installs its own SIGTERM handler in the driver (``sys.exit``,
    which unwinds through Flower's shutdown of actors that the same signal
    killed); starting Ray here lets the job install its own handler after it.
    Flower then finds Ray running and uses it.
    """
    import ray
    from flwr.supercore.constant import DEFAULT_SIMULATION_CONFIG

    if ray.is_initialized():
        return
    # What Flower does: Ray's workers inherit the environment, not this process's sys.path.
    pythonpath = os.pathsep.join(sys.path)
    if os.environ.get("PYTHONPATH"):
        pythonpath = f"{pythonpath}{os.pathsep}{os.environ['PYTHONPATH']}"
    os.environ["PYTHONPATH"] = pythonpath
    args = {"logging_level": DEFAULT_SIMULATION_CONFIG.init_args_logging_level, **init_args}
    try:
        ray.init(runtime_env={"env_vars": {"PYTHONPATH": pythonpath}}, **args)
    except ConnectionError as exc:  # the cluster went away since run_job found it
        if args.get("address", "local") == "local":
            raise
        raise ScenarioError(f"simulation.ray_address={args['address']}: could not join the Ray "
                            f"cluster: {' '.join(str(exc).split())}") from None


def _check_room(sim: Mapping[str, Any], joins: str | None = None) -> None:
    """Stop in one line if no Ray node holds one client; say so if other jobs hold the free CPUs."""
    from strategies.ray_cluster import check_room

    where = "this machine's Ray"
    if sim.get("ray_address"):
        address = str(sim["ray_address"])
        where = f"the Ray cluster at {joins or address}"
        if joins not in (None, address):  # auto: the cluster it found, then what was asked
            where += f" ({address})"
    warning = check_room(client_resources(sim), where)
    if warning:
        LOG.warning(warning)


#: Whether the signal handlers serve a job of a sweep (set by :func:`_stop_on_signals`).
_IN_SWEEP = [False]


def _stop_on_signals(out_dir: str | Path, sweeping: bool | None = None) -> None:
    """Ctrl-C (SIGINT, exit 130) and SIGTERM (exit 143) end the job at once (main thread only).

    The handler does not raise into whatever the main thread is doing (under
    Ray: waiting for Flower's message workers, which may wait for a ClientApp
    actor in mid-message): it marks results.json interrupted and exits
    (:func:`_interrupted`). Also when the job inherited SIGINT as ignored (a
    background job of a non-interactive shell): a job that was asked to stop
    always leaves its results.json saying so. A signal after the job finished
    (results.json final) interrupts nothing: the process exits with the job's
    own status, except between the jobs of a sweep (``sweeping``; ``None``: as the
    handlers installed last), which it stops.
    """
    if sweeping is not None:
        _IN_SWEEP[0] = sweeping
    in_sweep = _IN_SWEEP[0]
    _ignore_signals_at_exit()

    @deferred_while_held  # the final write and its recorded status land together, before the signal
    def handler(signum: int, frame: Any) -> None:
        _interrupted(out_dir, 128 + signum, in_sweep)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


@functools.cache
def _ignore_signals_at_exit() -> None:
    """Register :func:`_ignore_late_signals` once (before Ray's exit handler: it runs after Ray's)."""
    atexit.register(_ignore_late_signals)


def _ignore_late_signals() -> None:
    """Ignore Ctrl-C and SIGTERM once every other exit handler has run.

    Python then restores the default action of the signals it handled before
    it tears its modules down (torch's take a while): a signal in that window
    would end a process already leaving with its own status as killed, 130 or 143.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def _interrupted(out_dir: str | Path, status: int, sweeping: bool = False) -> None:
    """Mark the job's results.json interrupted, hand its child processes to a reaper and leave at once.

    Under Ray the ServerApp runs in a non-daemon thread that would wait out its
    round, so the process ends with :func:`os._exit`; Ray's processes are
    stopped by a reaper once this one has exited (:mod:`depl_fl.processes`:
    stopping them from here lets Ray's core worker end the job with status 1).
    A job that has finished keeps its results.json and, outside a sweep, its
    exit status (:mod:`depl_fl.runs.job_end`).
    """
    from depl_fl.runs.job_end import job_end_status
    from strategies.server_app import interrupt_job

    path = interrupt_job(out_dir)
    finished = job_end_status(out_dir)
    if path is not None:
        print(f"depl-fl: interrupted; {Path(path).resolve()} has summary.status interrupted", file=sys.stderr)
    elif sweeping:
        print(f"depl-fl: sweep interrupted after job {Path(out_dir).resolve()} finished", file=sys.stderr)
    else:
        status = int(finished if finished is not None else status)
    sys.stdout.flush()
    sys.stderr.flush()
    hand_to_reaper(descendants(os.getpid()))
    os._exit(status)


@hydra.main(config_path=None, config_name="config", version_base=None)
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    _quiet_flower()
    out_dir = HydraConfig.get().runtime.output_dir
    hydra_cfg = HydraConfig.get()
    sweeping = hydra_cfg.mode == RunMode.MULTIRUN
    _stop_on_signals(out_dir, sweeping)
    try:
        plain = to_plain(cfg)
        if plain.get("resume"):  # the exploration the checkpoint recorded, whatever auto stands for now
            from depl_fl.runs.checkpoint import recorded_config
            from depl_fl.runs.exploration_choice import keep_recorded

            plain = keep_recorded(plain, recorded_config(out_dir))
        plain = prepare(plain, entry=HYDRA_JOB)
        path = run_job(plain, out_dir)
    except KeyboardInterrupt:  # raised by code other than the handler (e.g. a library)
        _interrupted(out_dir, 128 + signal.SIGINT, sweeping)
    except Exception as exc:
        status = exc.exit_status if isinstance(exc, DeplError) else 1
        with signals_held():
            mark_stopped(out_dir, "infeasible" if isinstance(exc, InfeasibleError) else "failed",
                         " ".join(str(exc).split()))
            record_job_end(out_dir, status)
        if not sweeping:
            if isinstance(exc, DeplError):
                print(f"depl-fl: {' '.join(str(exc).split())}", file=sys.stderr)
                sys.exit(status)
            raise
        # A sweep runs every job: record this one and go on (traceback in the job's log).
        LOG.error("sweep job #%s failed", hydra_cfg.job.num, exc_info=not isinstance(exc, DeplError))
        print(f"depl-fl: job #{hydra_cfg.job.num}: {' '.join(str(exc).split())}", file=sys.stderr)
        FAILURES.add(hydra_cfg.job.num, hydra_cfg.job.override_dirname, status)
        return
    print(Path(path).resolve())


def main() -> None:
    """Console entry: ``python -m depl_fl.main [HYDRA_OVERRIDES...]``.

    Overrides Hydra cannot compose are one line on stderr and exit status 2
    (:func:`depl_fl.sweep.check_overrides`). A sweep (``-m``) runs every job;
    if some failed, it ends with one line naming them and the highest exit
    status of the failed jobs (2: bad value, 3: no dependable plan, 1: other).
    """
    overrides, multirun, hydra_only = split_argv(sys.argv[1:])
    if not hydra_only:
        try:
            check_overrides(overrides, multirun, conf_dir())
        except DeplError as exc:
            print(f"depl-fl: {' '.join(str(exc).split())}", file=sys.stderr)
            sys.exit(exc.exit_status)
    if not any(a.startswith(("--config-path", "-cp", "--config-dir", "-cd")) for a in sys.argv[1:]):
        sys.argv.insert(1, f"--config-dir={conf_dir()}")
    FAILURES.jobs.clear()
    FAILURES.status = 0
    _hydra_main()
    if FAILURES.jobs:
        print(f"depl-fl: {FAILURES.line()}", file=sys.stderr)
        sys.exit(FAILURES.status or 1)


if __name__ == "__main__":
    main()
