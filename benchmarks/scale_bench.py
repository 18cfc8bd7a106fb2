"""Server-side time per round and peak memory of DepL against Flower's FedAvg at 100-1,000 clients.

Synthetic(1, 1) clients (``dataset=synthetic model=synthetic_mlp``), one
in-process grid and ClientApp for both strategies: the grid times every
ClientApp call, so the server's own time is the process's time minus the time
spent inside the clients (their training, data loading and replies). CPU
seconds are the figure compared (the machine may be shared); wall seconds are
reported beside them. DepL's planning and central evaluation are also timed apart. DepL runs the
whole job: node queries, the plan over all clients, tracking with re-plans
(and the planner's check of the remaining plan that may defer one), the checks
of every reply, aggregation, central evaluation (validation, the stop margin
and test) and the per-round checkpoint. The one-time start-up before the
first training message (DepL: node queries, scenario, the initial plan, the
first evaluation; FedAvg: its first evaluation) is shown apart (``setup_cpu_s``,
DepL's initial plan also alone as ``initial_plan_cpu_s``) and left out of the
per-round figure; re-plans during training stay in it. FedAvg then trains the same
number of rounds with as many clients per round as DepL's rounds had on
average, with the same central evaluation (validation and test). The loss
profile both use is measured once, by a federated exploration on the smallest
federation (its cost is not in the figures). Each (strategy, clients) pair runs
in a fresh process, whose peak RSS is its peak memory; ``rss_start_mb`` is the
RSS after composing the job and loading the data, before the strategy starts.

Usage: ``python benchmarks/scale_bench.py [--clients 100 300 1000] [--out benchmarks/results/scale]
[--profile benchmarks/results/scale/profile.json]`` writes ``scale.json``, ``scale.md``, ``scale.png``
and the measured ``profile.json`` there (``--profile`` reuses one instead of measuring it).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

JOB = ["dataset=synthetic", "model=synthetic_mlp", "simulation=inprocess", "target.loss=1.6",
       "target.prob=0.9", "target.max_rounds=20", "output.plot=false", "seed=0", "dataset.seed=0"]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Clock:
    """Wall and CPU seconds accumulated by named parts of a run."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.started: tuple[float, float] | None = None

    def start(self) -> None:
        """The strategy starts now: the start-up runs until the first training message."""
        self.started = (time.perf_counter(), time.process_time())

    def mark_setup(self) -> None:
        """The first training message: the server's seconds since :meth:`start` are its start-up."""
        if self.started is None or "setup" in self.cpu:
            return
        self.wall["setup"] = time.perf_counter() - self.started[0] - self.wall.get("client", 0.0)
        self.cpu["setup"] = time.process_time() - self.started[1] - self.cpu.get("client", 0.0)

    def timed(self, part: str, fn):
        """``fn`` wrapped so that its calls add to ``part``."""
        def wrapper(*args, **kwargs):
            w0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall[part] = self.wall.get(part, 0.0) + time.perf_counter() - w0
                self.cpu[part] = self.cpu.get(part, 0.0) + time.process_time() - c0
        return wrapper


def _timed_grid(cfg: dict[str, Any], clock: Clock | None = None):
    """The in-process grid; with ``clock``, every ClientApp call adds to its part ``client``."""
    from flwr.app import MessageType

    from clients.client_app import make_client_app
    from strategies.inprocess_grid import InProcessGrid

    app = make_client_app(cfg)
    if clock is None:
        return InProcessGrid(app, int(cfg["num_clients"]))
    timed = clock.timed("client", app)

    def client(message, context):
        if message.metadata.message_type == MessageType.TRAIN:
            clock.mark_setup()
        return timed(message, context)

    return InProcessGrid(client, int(cfg["num_clients"]))


def _split(clock: Clock, wall: float, cpu: float, rounds: int) -> dict[str, Any]:
    """Server-side seconds per round: all minus the clients' and the one-time start-up's.

    The start-up (``setup``: the server's seconds before the first training
    message; DepL's node queries, scenario, initial plan and first evaluation,
    FedAvg's first evaluation) is reported apart.
    """
    server_wall = wall - clock.wall.get("client", 0.0) - clock.wall.get("setup", 0.0)
    server_cpu = cpu - clock.cpu.get("client", 0.0) - clock.cpu.get("setup", 0.0)
    parts = {f"{k}_cpu_s": v for k, v in clock.cpu.items() if k != "client"}
    return {"wall_s": wall, "cpu_s": cpu, "client_wall_s": clock.wall.get("client", 0.0),
            "client_cpu_s": clock.cpu.get("client", 0.0), "server_wall_s_per_round": server_wall / rounds,
            "server_cpu_s_per_round": server_cpu / rounds, **parts}


def _config(clients: int, extra: list[str]) -> dict[str, Any]:
    from depl_fl.runs.runconfig import compose_config

    given = {o.split("=", 1)[0] for o in extra}
    return compose_config([*(o for o in JOB if o.split("=", 1)[0] not in given), f"num_clients={clients}",
                           *extra])


def _warm_data(cfg: dict[str, Any]) -> None:
    from depl_fl.task.partitions import test_split, validation_split

    validation_split(cfg)
    test_split(cfg)


def measure_profile(out: Path) -> str:
    """Run a federated exploration on 100 clients and return the path of the loss profile it wrote."""
    from depl_fl.errors import InfeasibleError
    from strategies.server_app import run_server

    cache = out / "cache"
    cfg = _config(100, ["profile.explore.rounds=4", "profile.explore.max_rounds=4",
                        "profile.explore.switch_rounds=[2,4]", "target.max_rounds=1",
                        f"profile.cache_dir={cache}"])
    try:  # the profile is written once the exploration ends; one planned round is enough
        run_server(_timed_grid(cfg), cfg, out / "explore")
    except InfeasibleError:
        pass
    fed = json.loads(next(cache.glob("profile-fed-*.json")).read_text())
    return str(_write_profile_file(cfg, fed["loss"], out / "profile.json"))


def _write_profile_file(cfg: dict[str, Any], loss: dict[str, Any], path: Path) -> Path:
    """A scenario file carrying ``loss`` (what ``profile.file`` reads), as ``depl-fl`` writes one."""
    from depl_fl.orchestration.scenario_builder import model_docs, scenario_doc
    from depl_fl.task.partitions import geometry

    geo = geometry(cfg)
    models = model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size)
    cluster = next(iter(cfg["clusters"]["classes"]))
    doc = scenario_doc(cfg, [{"id": "c0", "cluster": cluster, "num_samples": 1}], models, loss)
    path.write_text(json.dumps(doc))
    return path


def run_depl(clients: int, profile: str, out: Path) -> dict[str, Any]:
    """One DepL job: its server-side seconds (planning and evaluation apart), rounds, clients per round."""
    import depl_fl.planner
    import strategies.server_app as server_app

    cfg = _config(clients, ["profile.source=inprocess", f"profile.file={profile}"])
    _warm_data(cfg)
    clock = Clock()
    make_plan, calls = depl_fl.planner.make_plan, []

    def timed_plan(*args, **kwargs):  # the first call is the one-time plan, the others re-plans
        calls.append(1)
        return clock.timed("initial_plan" if len(calls) == 1 else "planning", make_plan)(*args, **kwargs)

    depl_fl.planner.make_plan = timed_plan
    depl_fl.planner.plan_holds = clock.timed("plan_check", depl_fl.planner.plan_holds)
    make_eval = server_app.make_evaluate_fn
    server_app.make_evaluate_fn = lambda c: clock.timed("evaluation", make_eval(c))
    grid = _timed_grid(cfg, clock)
    rss0 = _rss_mb()
    w0, c0 = time.perf_counter(), time.process_time()
    clock.start()
    path = server_app.run_server(grid, cfg, out / f"depl-{clients}")
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    doc = json.loads(Path(path).read_text())
    rounds = [r for r in doc["rounds"] if r.get("phase", "train") == "train"] or doc["rounds"]
    per_round = [len(r["clients"]) for r in rounds]
    kept = sum(1 for r in rounds if (r.get("plan_check") or {}).get("kept"))
    return {"strategy": "depl", "clients": clients, "rounds": len(rounds),
            "clients_per_round": statistics.mean(per_round), "replans": doc["summary"].get("replans"),
            "replans_deferred": kept, "final_test_loss": doc["summary"].get("final_test_loss"),
            **_split(clock, wall, cpu, len(rounds)), "rss_start_mb": rss0, "peak_rss_mb": _peak_mb(),
            "load_average": os.getloadavg()[0]}


def run_fedavg(clients: int, rounds: int, per_round: float) -> dict[str, Any]:
    """Flower's FedAvg on the same grid: ``rounds`` rounds of ``per_round`` clients, central evaluation."""
    from flwr.app import ConfigRecord, MetricRecord
    from flwr.serverapp.strategy import FedAvg

    from depl_fl.task.local_update import initial_state, variant_model
    from depl_fl.task.partitions import geometry, test_split, validation_split
    from depl_fl.task.training import evaluate_model
    from strategies.depl_strategy import arrays_to_state, state_to_arrays

    cfg = _config(clients, [])
    _warm_data(cfg)
    geo = geometry(cfg)
    clock = Clock()

    def evaluate(server_round, arrays):
        import torch

        torch.set_num_threads(1)  # as DepL's central evaluation: one thread, no idle spinning
        model = variant_model(arrays_to_state(arrays), geo, 0.0)
        loss, acc = evaluate_model(model, *validation_split(cfg))
        test_loss, test_acc = evaluate_model(model, *test_split(cfg))
        return MetricRecord({"loss": loss, "accuracy": acc, "test-loss": test_loss,
                             "test-accuracy": test_acc})

    fraction = min(1.0, per_round / clients)
    strategy = FedAvg(fraction_train=fraction, fraction_evaluate=0.0, min_available_nodes=clients,
                      min_train_nodes=max(1, round(per_round)))
    grid = _timed_grid(cfg, clock)
    conf = ConfigRecord({"compression": 0.0, "local-epochs": 1, "lr": 0.05, "batch-size": 32, "seed": 0,
                         "model-id": "full", "level": 0})
    rss0 = _rss_mb()
    w0, c0 = time.perf_counter(), time.process_time()
    clock.start()
    strategy.start(grid, state_to_arrays(initial_state(geo, 0)), num_rounds=rounds, train_config=conf,
                   evaluate_fn=clock.timed("evaluation", evaluate))
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return {"strategy": "fedavg", "clients": clients, "rounds": rounds, "clients_per_round": per_round,
            **_split(clock, wall, cpu, rounds), "rss_start_mb": rss0, "peak_rss_mb": _peak_mb(),
            "load_average": os.getloadavg()[0]}


def _child(queue: Any, fn: str, args: tuple) -> None:
    logging.getLogger("flwr").setLevel(logging.ERROR)
    try:
        queue.put(globals()[fn](*args))
    except BaseException as exc:  # the parent reports it
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def in_child(fn: str, *args: Any) -> Any:
    """``fn(*args)`` in a fresh process (its own peak RSS); raises on the child's error."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, fn, args))
    proc.start()
    result = queue.get()
    proc.join()
    if isinstance(result, dict) and "error" in result:
        raise RuntimeError(f"{fn}{args}: {result['error']}")
    return result


def write_outputs(rows: list[dict[str, Any]], out: Path) -> None:
    """``scale.json``, ``scale.md`` and ``scale.png`` from the measured rows."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale.json").write_text(json.dumps({"machine": platform.platform(), "rows": rows}, indent=1))
    by = {(r["strategy"], r["clients"]): r for r in rows}
    sizes = sorted({r["clients"] for r in rows})
    lines = ["# Server-side cost at scale: DepL vs FedAvg (synthetic clients, in-process grid)", "",
             "Regenerate: `python benchmarks/scale_bench.py` (its docstring says what is timed). "
             "CPU seconds of the server process minus those spent inside the ClientApp, per training "
             "round; the one-time start-up before the first training message (DepL: node queries, "
             "scenario, initial plan, first evaluation) is its own column and not in the per-round "
             "figure (re-plans and the plan checks during training are). Wall seconds beside "
             "them; the 1-minute load average of the (shared, 2-core) machine at the end of each run.", "",
             "| clients | rounds | clients/round | start-up CPU s DepL (initial plan) / FedAvg "
             "| DepL server CPU s/round (re-planning, plan checks, evaluation) "
             "| FedAvg server CPU s/round (evaluation) | ratio | DepL / FedAvg server wall s/round "
             "| DepL / FedAvg peak RSS MB | DepL re-plans (deferred) | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in sizes:
        d, f = by[("depl", n)], by[("fedavg", n)]
        ratio = d["server_cpu_s_per_round"] / f["server_cpu_s_per_round"]
        per = d["rounds"]
        lines.append(
            f"| {n} | {per} | {d['clients_per_round']:.1f} | {d.get('setup_cpu_s', 0):.2f} "
            f"({d.get('initial_plan_cpu_s', 0):.2f}) / {f.get('setup_cpu_s', 0):.2f} "
            f"| {d['server_cpu_s_per_round']:.3f} ({d.get('planning_cpu_s', 0) / per:.3f}, "
            f"{d.get('plan_check_cpu_s', 0) / per:.3f}, {d.get('evaluation_cpu_s', 0) / per:.3f}) "
            f"| {f['server_cpu_s_per_round']:.3f} ({f.get('evaluation_cpu_s', 0) / f['rounds']:.3f}) "
            f"| {ratio:.2f} | {d['server_wall_s_per_round']:.2f} / {f['server_wall_s_per_round']:.2f} "
            f"| {d['peak_rss_mb']:.0f} / {f['peak_rss_mb']:.0f} "
            f"| {d['replans']} ({d.get('replans_deferred', 0)}) "
            f"| {d.get('load_average', float('nan')):.1f} / {f.get('load_average', float('nan')):.1f} |")
    lines += ["", memory_growth(by, sizes)]
    (out / "scale.md").write_text("\n".join(lines) + "\n")
    _plot(by, sizes, out / "scale.png")


def memory_growth(by: dict, sizes: list[int]) -> str:
    """Peak RSS added per added client between consecutive sizes (constant or falling: at most linear)."""
    parts = []
    for name in ("depl", "fedavg"):
        steps = [f"{(by[(name, b)]['peak_rss_mb'] - by[(name, a)]['peak_rss_mb']) / (b - a):.3f} ({a}->{b})"
                 for a, b in zip(sizes, sizes[1:], strict=False)]
        parts.append(f"{name} " + ", ".join(steps))
    return "Peak RSS added per added client, MB: " + "; ".join(parts) + "."


def _plot(by: dict, sizes: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    for name, style in (("depl", "o-"), ("fedavg", "s--")):
        ax1.plot(sizes, [by[(name, n)]["server_cpu_s_per_round"] for n in sizes], style, label=name)
        ax2.plot(sizes, [by[(name, n)]["peak_rss_mb"] for n in sizes], style, label=name)
    ax1.set(xlabel="clients", ylabel="server CPU seconds per round", ylim=(0, None))
    ax2.set(xlabel="clients", ylabel="peak RSS (MB)", ylim=(0, None))
    ax1.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scale")
    parser.add_argument("--profile", type=Path, default=None,
                        help="an earlier run's profile.json instead of measuring one")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        work = Path(tmp)
        profile = str(args.profile) if args.profile else in_child("measure_profile", work)
        if not args.profile:
            args.out.mkdir(parents=True, exist_ok=True)
            Path(args.out / "profile.json").write_text(Path(profile).read_text())
        for n in args.clients:
            depl = in_child("run_depl", n, profile, work)
            fedavg = in_child("run_fedavg", n, depl["rounds"], depl["clients_per_round"])
            rows += [depl, fedavg]
            print(json.dumps(depl), json.dumps(fedavg), sep="\n", flush=True)
    write_outputs(rows, args.out)
    print(args.out / "scale.md")


if __name__ == "__main__":
    main()
