"""Time per round and peak memory of DepL against Flower's FedAvg at 100-1,000 clients.

Synthetic(1, 1) clients (``dataset=synthetic model=synthetic_mlp``), one
in-process grid and ClientApp for both strategies, in one process: the grid
runs every client's training inside the server's exchange of the round and
times every ClientApp call. Per training round it reports the *whole round*
(the server and the clients' training of that round), the clients' part, and
the *server* part (the round less the ClientApp calls), split by named parts
that leave out the parts timed inside them: ``configure`` (the round's
messages), ``exchange`` (the grid, without the clients), ``aggregation``
(reply checks and the combination), ``evaluation`` (central), and for DepL
``tracking`` (the controller's round record, without what follows),
``planning`` (re-plans), ``plan_check`` (the planner's check of the remaining
plan that may defer one) and ``checkpoint`` (checkpoint and results.json);
``other`` is what no part covers. CPU seconds are the figure compared (the
machine may be shared); wall seconds are reported beside them.

DepL runs the whole job: node queries, the plan over all clients, tracking
with re-plans, the checks of every reply, aggregation, central evaluation
(validation, the stop margin and test) and the per-round checkpoint. The
one-time start-up until the first round is configured (DepL: node queries,
scenario, the initial plan, the first evaluation; FedAvg: its first
evaluation) is shown apart (``setup_cpu_s``, DepL's initial plan also alone as
``initial_plan_cpu_s``) and left out of the per-round figures. FedAvg then
trains the same number of rounds with as many clients per round as DepL's
rounds had on average (Flower samples them; its ``random`` is seeded), with
the same central evaluation of the validation and test splits that DepL
makes. Which clients train is each strategy's own choice, so the clients'
part differs: ``samples_per_round`` says how much data the round's clients
hold. The loss profile both use is measured once, by a federated exploration
on the smallest federation (its cost is not in the figures). Each (strategy,
clients) pair runs in a fresh process, whose peak RSS is its peak memory;
``rss_start_mb`` is the RSS after composing the job and loading the data,
before the strategy starts.

Usage: ``python benchmarks/scale_bench.py [--clients 100 300 1000] [--out benchmarks/results/scale]
[--profile benchmarks/results/scale/profile.json]`` writes ``scale.json``, ``scale.md``, ``scale.png``
and the measured ``profile.json`` there (``--profile`` reuses one instead of measuring it).
"""

from __future__ import annotations

import argparse
import json
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

from benchmarks.lib.fresh_process import in_child  # noqa: E402

JOB = ["dataset=synthetic", "model=synthetic_mlp", "simulation=inprocess", "target.loss=1.6",
       "target.prob=0.9", "target.max_rounds=20", "output.plot=false", "seed=0", "dataset.seed=0",
       # the plan regime the committed figures were measured with (the digits CNN's constants, the
       # exploration's rate read at r = 1 only on the cheapest clusters)
       "++model.regime={power:1.080,floor:0.145,rate_exponent:0.310,noise_exponent:0.550,oscillation:0.160,"
       "judged_error_factor:0.754,oscillation_dof:3.40,explored_oscillation:0.073,anchor:trend}",
       "profile.plan_regime.rate_at_full=cheapest"]
#: Overrides a job with a profile read from a file (``profile.source=inprocess``) refuses: only an exploration
#: reads them.
EXPLORATION_ONLY = ("profile.plan_regime.rate_at_full",)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Clock:
    """Wall and CPU seconds of named parts of a run, each without the timed parts called inside it.

    Parts timed before :meth:`mark_setup` (the first round's configuration)
    belong to the one-time start-up and are kept apart (``setup_wall``,
    ``setup_cpu``); those after it to the training rounds (``wall``, ``cpu``).
    The part ``client`` is every ClientApp call: a client's training, data
    loading and reply, which the in-process grid runs inside the server's
    exchange of the round.
    """

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.setup_wall: dict[str, float] = {}
        self.setup_cpu: dict[str, float] = {}
        self.started: tuple[float, float] | None = None
        self.setup: tuple[float, float] | None = None
        self._open: list[list[float]] = []

    def start(self) -> None:
        """The strategy starts now: the start-up runs until the first round is configured."""
        self.started = (time.perf_counter(), time.process_time())

    def mark_setup(self) -> None:
        """The first round is configured now: the seconds since :meth:`start` are the start-up."""
        if self.started is None or self.setup is not None:
            return
        self.setup = (time.perf_counter() - self.started[0], time.process_time() - self.started[1])

    def timed(self, part: str, fn):
        """``fn`` wrapped so that its calls add to ``part`` (less the timed parts inside them)."""
        def wrapper(*args, **kwargs):
            w0, c0 = time.perf_counter(), time.process_time()
            self._open.append([0.0, 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                inner_w, inner_c = self._open.pop()
                w, c = time.perf_counter() - w0, time.process_time() - c0
                wall, cpu = (self.wall, self.cpu) if self.setup is not None else (self.setup_wall,
                                                                                   self.setup_cpu)
                wall[part] = wall.get(part, 0.0) + w - inner_w
                cpu[part] = cpu.get(part, 0.0) + c - inner_c
                if self._open:
                    self._open[-1][0] += w
                    self._open[-1][1] += c
        return wrapper


def _timed_grid(cfg: dict[str, Any], clock: Clock | None = None):
    """The in-process grid; with ``clock``, ClientApp calls add to ``client``, exchanges to ``exchange``."""
    from clients.client_app import make_client_app
    from strategies.inprocess_grid import InProcessGrid

    app = make_client_app(cfg)
    if clock is None:
        return InProcessGrid(app, int(cfg["num_clients"]))
    grid = InProcessGrid(clock.timed("client", app), int(cfg["num_clients"]))
    grid.send_and_receive = clock.timed("exchange", grid.send_and_receive)
    return grid


def _first_round(clock: Clock, fn):
    """``configure_train`` timed as ``configure``; its first call ends the start-up."""
    timed = clock.timed("configure", fn)

    def configure(*args, **kwargs):
        clock.mark_setup()
        return timed(*args, **kwargs)
    return configure


def _split(clock: Clock, wall: float, cpu: float, rounds: int) -> dict[str, Any]:
    """Seconds per training round: the whole round, the clients' part, the server's and its parts.

    The start-up (until the first round is configured: DepL's node queries,
    scenario, initial plan and first evaluation, FedAvg's first evaluation) is
    reported apart, the server's part of it as ``setup_cpu_s`` (without the
    clients' answers to the queries). A training round's server part is the
    round less the ClientApp calls; ``server_parts`` splits it by the timed
    parts (``other``: what no part covers, e.g. building the messages' records
    and the strategy's own loop).
    """
    setup_w, setup_c = clock.setup if clock.setup is not None else (wall, cpu)
    train_w, train_c = wall - setup_w, cpu - setup_c
    client_w, client_c = clock.wall.get("client", 0.0), clock.cpu.get("client", 0.0)
    server_c = train_c - client_c
    parts = {k: v / rounds for k, v in sorted(clock.cpu.items()) if k != "client"}
    parts["other"] = server_c / rounds - sum(parts.values())
    return {"wall_s": wall, "cpu_s": cpu,
            "setup_cpu_s": setup_c - clock.setup_cpu.get("client", 0.0),
            "setup_wall_s": setup_w - clock.setup_wall.get("client", 0.0),
            "initial_plan_cpu_s": clock.setup_cpu.get("planning", 0.0),
            "round_cpu_s_per_round": train_c / rounds, "round_wall_s_per_round": train_w / rounds,
            "client_cpu_s_per_round": client_c / rounds, "client_wall_s_per_round": client_w / rounds,
            "server_cpu_s_per_round": server_c / rounds,
            "server_wall_s_per_round": (train_w - client_w) / rounds,
            "server_parts": parts}


def _config(clients: int, extra: list[str], leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    from depl_fl.runs.runconfig import compose_config

    given = {o.split("=", 1)[0] for o in extra} | set(leave_out)
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
    # profile=thorough: the exploration the committed figures were measured with
    # (the default explores frugally with tracking)
    cfg = _config(100, ["profile=thorough", "profile.explore.rounds=4", "profile.explore.max_rounds=4",
                        "profile.explore.switch_rounds=[2,4]", "target.max_rounds=1",
                        # the digits CNN's plan-regime constants as they are, as the committed profile
                        "profile.plan_regime.anchor=last", "profile.plan_regime.explored_oscillation=null",
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


def _instrument_depl(clock: Clock) -> None:
    """Time DepL's parts (this process only): every part of the server's round has its name."""
    import depl_fl.planner
    import strategies.server_app as server_app
    from depl_fl.orchestration.controller import RunController

    depl_fl.planner.make_plan = clock.timed("planning", depl_fl.planner.make_plan)
    depl_fl.planner.plan_holds = clock.timed("plan_check", depl_fl.planner.plan_holds)
    RunController.record = clock.timed("tracking", RunController.record)
    make_eval = server_app.make_evaluate_fn

    def timed_eval(cfg):
        evaluate = make_eval(cfg)
        timed = clock.timed("evaluation", evaluate)
        timed.validation_loss = evaluate.validation_loss
        return timed

    server_app.make_evaluate_fn = timed_eval
    build = server_app.build_strategy

    def timed_build(*args, **kwargs):
        if kwargs.get("on_round") is not None:
            kwargs["on_round"] = clock.timed("checkpoint", kwargs["on_round"])
        strategy = build(*args, **kwargs)
        strategy.configure_train = _first_round(clock, strategy.configure_train)
        strategy.aggregate_train = clock.timed("aggregation", strategy.aggregate_train)
        return strategy

    server_app.build_strategy = timed_build


def run_depl(clients: int, profile: str, out: Path, clock: Clock | None = None) -> dict[str, Any]:
    """One DepL job: its seconds per training round (the server's by part), rounds, clients per round.

    ``clock`` (default a new :class:`Clock`) times the parts; a subclass may do more at its marks.
    """
    import strategies.server_app as server_app

    cfg = _config(clients, ["profile.source=inprocess", f"profile.file={profile}"],
                  leave_out=EXPLORATION_ONLY)
    _warm_data(cfg)
    clock = Clock() if clock is None else clock
    _instrument_depl(clock)
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
    skipped = sum(1 for r in rounds if r.get("replan_skipped"))
    replans = doc["replans"]
    return {"strategy": "depl", "clients": clients, "rounds": len(rounds),
            "clients_per_round": statistics.mean(per_round),
            "samples_per_round": statistics.mean(sum(doc_samples(doc, r["clients"])) for r in rounds),
            "replans": doc["summary"].get("replans"), "replans_deferred": kept,
            "replans_skipped": skipped,
            "replans_infeasible": sum(1 for r in replans if not r.get("feasible", True)),
            "replan_reasons": [r.get("reason") for r in replans],
            "final_test_loss": doc["summary"].get("final_test_loss"),
            **_split(clock, wall, cpu, len(rounds)), "rss_start_mb": rss0, "peak_rss_mb": _peak_mb(),
            "load_average": os.getloadavg()[0]}


def doc_samples(doc: dict[str, Any], clients: list[str]) -> list[int]:
    """Training samples of ``clients`` as the results' scenario lists them."""
    counts = {c["id"]: int(c["num_samples"]) for c in doc["scenario"]["clients"]}
    return [counts[c] for c in clients]


def run_fedavg(clients: int, rounds: int, per_round: float) -> dict[str, Any]:
    """Flower's FedAvg on the same grid: ``rounds`` rounds of ``per_round`` clients, central evaluation.

    Flower samples the round's nodes with Python's ``random``; it is seeded here, so a rerun trains
    the same clients.
    """
    import random

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
    strategy.configure_train = _first_round(clock, strategy.configure_train)
    strategy.aggregate_train = clock.timed("aggregation", strategy.aggregate_train)
    grid = _timed_grid(cfg, clock)
    trained: list[int] = []
    deliver = grid.deliver

    def counted(msg):
        if msg.metadata.message_type == "train":
            trained.append(int(grid.contexts[msg.metadata.dst_node_id].node_config["partition-id"]))
        return deliver(msg)

    grid.deliver = counted
    train = cfg["train"]  # the local training DepL's clients get
    conf = ConfigRecord({"compression": 0.0, "local-epochs": int(train["local_epochs"]),
                         "lr": float(train["lr"]), "batch-size": int(train["batch_size"]),
                         "seed": int(cfg["seed"]), "model-id": "full", "level": 0})
    random.seed(0)
    rss0 = _rss_mb()
    w0, c0 = time.perf_counter(), time.process_time()
    clock.start()
    strategy.start(grid, state_to_arrays(initial_state(geo, 0)), num_rounds=rounds, train_config=conf,
                   evaluate_fn=clock.timed("evaluation", evaluate))
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    from depl_fl.task.partitions import synthetic_spec
    from depl_fl.task.synthetic import sample_counts

    counts = sample_counts(synthetic_spec(cfg), clients)
    return {"strategy": "fedavg", "clients": clients, "rounds": rounds, "clients_per_round": per_round,
            "samples_per_round": sum(counts[p] for p in trained) / rounds,
            **_split(clock, wall, cpu, rounds), "rss_start_mb": rss0, "peak_rss_mb": _peak_mb(),
            "load_average": os.getloadavg()[0]}


#: The server's parts in the components table, in the order of a round.
DEPL_PARTS = ("configure", "exchange", "aggregation", "evaluation", "tracking", "planning", "plan_check",
              "checkpoint", "other")
FEDAVG_PARTS = ("configure", "exchange", "aggregation", "evaluation", "other")


def _ms(value: float) -> str:
    return f"{1000 * value:.1f}"


def write_outputs(rows: list[dict[str, Any]], out: Path) -> None:
    """``scale.json``, ``scale.md`` and ``scale.png`` from the measured rows."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale.json").write_text(json.dumps({"machine": platform.platform(), "rows": rows}, indent=1))
    by = {(r["strategy"], r["clients"]): r for r in rows}
    sizes = sorted({r["clients"] for r in rows})
    lines = ["# Cost per round at scale: DepL vs FedAvg (synthetic clients, in-process grid)", "",
             "Regenerate: `python benchmarks/scale_bench.py --profile benchmarks/results/scale/profile.json` "
             "(its docstring says what is timed). CPU seconds per training round of one process that "
             "runs the server and every client: the *server* part is the round less the ClientApp calls, "
             "the *whole round* adds the clients' training of that round. The one-time start-up before "
             "the first round (DepL: node queries, scenario, initial plan, first evaluation) is its own "
             "column and not in the per-round figures (re-plans and plan checks during training are). "
             "The 1-minute load average of the (shared, 2-core) machine at the end of each run.", "",
             "| clients | rounds | clients/round (samples) DepL / FedAvg | server CPU s/round DepL / FedAvg "
             "| server ratio | whole-round CPU s/round DepL / FedAvg | whole-round ratio "
             "| start-up CPU s DepL (initial plan) / FedAvg | server wall s/round DepL / FedAvg "
             "| peak RSS MB DepL / FedAvg | DepL re-plans (infeasible; deferred; skipped) | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in sizes:
        d, f = by[("depl", n)], by[("fedavg", n)]
        lines.append(
            f"| {n} | {d['rounds']} | {d['clients_per_round']:.1f} ({d.get('samples_per_round', 0):.0f}) / "
            f"{f['clients_per_round']:.1f} ({f.get('samples_per_round', 0):.0f}) "
            f"| {d['server_cpu_s_per_round']:.4f} / {f['server_cpu_s_per_round']:.4f} "
            f"| {d['server_cpu_s_per_round'] / f['server_cpu_s_per_round']:.2f} "
            f"| {d['round_cpu_s_per_round']:.3f} / {f['round_cpu_s_per_round']:.3f} "
            f"| {d['round_cpu_s_per_round'] / f['round_cpu_s_per_round']:.2f} "
            f"| {d['setup_cpu_s']:.2f} ({d['initial_plan_cpu_s']:.2f}) / {f['setup_cpu_s']:.2f} "
            f"| {d['server_wall_s_per_round']:.3f} / {f['server_wall_s_per_round']:.3f} "
            f"| {d['peak_rss_mb']:.0f} / {f['peak_rss_mb']:.0f} "
            f"| {d['replans']} ({d.get('replans_infeasible', 0)}; {d.get('replans_deferred', 0)}; "
            f"{d.get('replans_skipped', 0)}) "
            f"| {d['load_average']:.1f} / {f['load_average']:.1f} |")
    lines += ["", "Server CPU milliseconds per training round by part (`other`: what no part covers: the "
              "strategy's own loop, building the messages' records, logging):", "",
              "| clients | strategy | " + " | ".join(DEPL_PARTS) + " | server |",
              "|---|---|" + "---|" * (len(DEPL_PARTS) + 1)]
    for n in sizes:
        for name, parts in (("depl", DEPL_PARTS), ("fedavg", FEDAVG_PARTS)):
            row = by[(name, n)]
            cells = [_ms(row["server_parts"].get(k, 0.0)) if k in parts else "-" for k in DEPL_PARTS]
            total = _ms(row["server_cpu_s_per_round"])
            lines.append(f"| {n} | {name} | " + " | ".join(cells) + f" | {total} |")
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

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(12, 3.6))
    for name, style in (("depl", "o-"), ("fedavg", "s--")):
        ax1.plot(sizes, [by[(name, n)]["server_cpu_s_per_round"] for n in sizes], style, label=name)
        ax2.plot(sizes, [by[(name, n)]["round_cpu_s_per_round"] for n in sizes], style, label=name)
        ax3.plot(sizes, [by[(name, n)]["peak_rss_mb"] for n in sizes], style, label=name)
    ax1.set(xlabel="clients", ylabel="server CPU seconds per round", ylim=(0, None))
    ax2.set(xlabel="clients", ylabel="whole-round CPU seconds per round", ylim=(0, None))
    ax3.set(xlabel="clients", ylabel="peak RSS (MB)", ylim=(0, None))
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
        profile = str(args.profile) if args.profile else in_child(measure_profile, work)
        if not args.profile:
            args.out.mkdir(parents=True, exist_ok=True)
            Path(args.out / "profile.json").write_text(Path(profile).read_text())
        for n in args.clients:
            depl = in_child(run_depl, n, profile, work)
            fedavg = in_child(run_fedavg, n, depl["rounds"], depl["clients_per_round"])
            rows += [depl, fedavg]
            print(json.dumps(depl), json.dumps(fedavg), sep="\n", flush=True)
    write_outputs(rows, args.out)
    print(args.out / "scale.md")


if __name__ == "__main__":
    main()
