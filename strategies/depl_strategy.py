"""DepLStrategy: a Flower (Message API) strategy that executes a DepL plan.

Flower glue only; the algorithmic parts live elsewhere:
:mod:`depl_fl.orchestration.controller` (plan execution, cost records, tracking and
re-planning), :mod:`depl_fl.orchestration.reply_checks` (reply validation),
:func:`depl_fl.task.pruning.aggregate_pruned` (scatter-back aggregation) and the
planner behind the ``plan_fn`` callable.

Only the sub-network travels: a train message carries the planned variant's
entries sliced from the global state (:func:`depl_fl.task.pruning.extract`),
the client rebuilds the sub-network from the network and the compression,
and its reply carries the same entries back. Which channel groups every
variant keeps whole depends on the job's compressions
(:func:`depl_fl.task.subnets.kept_whole`), so a train message also carries
them (``compressions``, a node of a user's own app learns them there) and
the groups' roots the server keeps whole (``kept-whole``), which a node
checks against its own derivation (:func:`depl_fl.task.subnets.check_kept_whole`).
Every round record says how many array bytes went down and up (``bytes_down``,
``bytes_up``) beside what the cost model charges for them (``modelled_bytes_down``, ``modelled_bytes_up``:
the variant's ``size_bytes`` per planned client).

Flow of :meth:`DepLStrategy.start`: wait for the nodes (with a timeout), query
their properties (cluster, num-samples, partition-id), build the scenario and
the plan through the injected callables, then for every planned round send the
global weights plus the planned model and resource level to exactly the
planned clients, aggregate the valid pruned replies into the full model,
evaluate the global model centrally and hand the loss to the controller.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result

from depl_fl.console import SLOW_STEP_S, notice_if_slow
from depl_fl.contract.plan import (
    Plan,
    RoundDecision,
    Targets,
    relaxed_targets,
    relief_text,
    shortfall_text,
)
from depl_fl.contract.scenario import Scenario
from depl_fl.errors import DeplError, InfeasibleError, ScenarioError
from depl_fl.orchestration.controller import Planner, RunController
from depl_fl.orchestration.npy_arrays import array_of
from depl_fl.orchestration.reply_checks import WEIGHT_KEY, check_reply
from depl_fl.runs.client_listing import client_listing
from depl_fl.runs.step_clock import StepClock
from depl_fl.task.pruning import (
    SubnetIndex,
    SubnetLayout,
    aggregate_pruned,
    compute_structure,
    extract,
    scatter,
    silence_to_variant,
)
from strategies.exchange import send_and_receive
from strategies.robust_aggregation import (
    AggregationSettings,
    aggregate_problem,
    bounded_weight,
    combine,
    norm_rejection,
    norm_threshold,
    update_norm,
    weight_problem,
)

LOG = logging.getLogger("depl_fl.server")
#: A checkpoint key that is not there (a checkpoint written before the key was kept).
ABSENT = object()

#: ``scenario_fn(properties) -> Scenario``; properties maps client id -> node properties.
ScenarioFn = Callable[[Mapping[str, Mapping[str, Any]]], Scenario]
#: ``plan_fn(scenario, targets, start) -> Plan`` (start is None for the initial plan).
PlanFn = Planner
#: ``on_round(strategy, arrays, loss)``: called after every completed round.
RoundHook = Callable[["DepLStrategy", ArrayRecord, float], None]
#: ``evaluate_fn(server_round, arrays, compression) -> MetricRecord`` with ``loss``/``accuracy``
#: of the variant ``compression`` pruned from the global weights (DepL tracks the loss of
#: the model being trained; switching models makes it jump) on the validation split, and
#: optionally ``test-loss``/``test-accuracy`` on a test split no decision reads.
EvaluateFn = Callable[[int, ArrayRecord, float], MetricRecord | None]


class NodesUnavailableError(DeplError):
    """Not enough clients connected or answered in time (one-line message)."""


def client_id_of(partition_id: int) -> str:
    """Scenario client id of a partition: ``c<partition-id>``."""
    return f"c{int(partition_id)}"


def partition_order(cid: str, properties: Mapping[str, Mapping[str, Any]]) -> tuple[int, int, str]:
    """Sort key putting a client in its partition's place: known partitions first, by partition id.

    Replies reach the server in arrival order: on Ray the order in which the
    ClientApp actors finish, which changes from run to run; in a deployment
    the order of the nodes' networks. Summing the replies (the aggregate, the
    weighted train loss, the round's energy) in that order changes the last
    bits of the sums, and a job whose loss is unstable (non-IID clients)
    grows such a bit into a different run. Taken in partition order, every
    backend sums alike; the in-process grid already delivers in this order
    (node id = first node id + partition id).
    """
    pid = (properties.get(cid) or {}).get("partition-id")
    return (0, int(pid), cid) if isinstance(pid, (int, float)) else (1, 0, cid)


def arrays_to_state(record: ArrayRecord) -> dict[str, np.ndarray]:
    """An ArrayRecord as a dict of numpy arrays (each equal to ``Array.numpy()``'s)."""
    return {k: array_of(v) for k, v in record.items()}


def state_to_arrays(state: Mapping[str, np.ndarray]) -> ArrayRecord:
    """A dict of numpy arrays as an ArrayRecord (insertion order and 0-d shapes kept)."""
    return ArrayRecord({k: Array(np.require(v, requirements="C")) for k, v in state.items()})


def payload_bytes(record: ArrayRecord) -> int:
    """Bytes of an ArrayRecord's arrays as they travel (``np.save`` header + data per array)."""
    return int(sum(len(arr.data) for arr in record.values()))


def _finite(value: Any) -> float | None:
    """``value`` as a float, ``None`` when it is missing or not finite."""
    return float(value) if value is not None and math.isfinite(float(value)) else None


def _metric(record: MetricRecord | None, key: str) -> float | None:
    """``record[key]`` as a float, or None when there is no such metric."""
    return float(record[key]) if record is not None and key in record else None


def _reply_bytes(reply: Message) -> int:
    """Array bytes a reply carried (0 for an error reply or one without arrays)."""
    try:
        if reply.has_error() or not reply.has_content():
            return 0
        records = reply.content.array_records  # a new view on every access: taken once
        return payload_bytes(records["arrays"]) if "arrays" in records else 0
    except Exception:  # a malformed reply carries nothing usable; it is rejected later
        return 0


@dataclass(frozen=True)
class Accepted:
    """A reply that passed the checks: client id, kept weights, bounded weight, metrics, update norm."""

    cid: str
    state: dict[str, np.ndarray]
    weight: float
    metrics: dict[str, Any]
    norm: float


def train_metrics(accepted: list[Accepted]) -> MetricRecord:
    """Weighted mean train loss, slowest train time and number of aggregated replies."""
    losses = [(float(c.metrics["train-loss"]), c.weight) for c in accepted
              if isinstance(c.metrics.get("train-loss"), (int, float))]
    times = [float(c.metrics["train-time-s"]) for c in accepted
             if isinstance(c.metrics.get("train-time-s"), (int, float))]
    total = sum(w for _, w in losses) or 1.0
    return MetricRecord({
        "train-loss": sum(v * w for v, w in losses) / total if losses else float("nan"),
        "train-time-s": max(times) if times else 0.0,
        "num-replies": len(accepted),
    })


class DepLStrategy(FedAvg):
    """Run a DepL plan in Flower: planned clients, model variant and resource level per round.

    Parameters
    ----------
    network : SubnetLayout
        Layout of the global network's state (:func:`depl_fl.task.subnets.network_layout`):
        how the server slices a variant out of it and scatters replies back.
    targets : Targets
        Target loss, probability, deadline and max rounds.
    scenario_fn : callable
        Builds the scenario from the queried node properties.
    plan_fn : callable
        ``plan_fn(scenario, targets, start)`` -> Plan; also used for re-planning.
    num_clients : int
        Number of nodes to wait for.
    train_settings : mapping
        ``local-epochs``, ``lr``, ``batch-size`` and ``seed`` sent to the clients.
    guarantee : str
        Quantile rule for the predicted quantile (``gaussian`` or ``cantelli``).
    tracking : bool
        Online loss tracking and re-planning.
    node_wait_timeout_s : float
        How long to wait for ``num_clients`` nodes before giving up.
    plan : Plan, optional
        Use this plan instead of calling ``plan_fn`` for the initial plan.
    replan_policy : object, optional
        A :class:`depl_fl.tracking.online.ReplanPolicy`.
    track_mean : bool
        Track the predicted mean of the final loss instead of its pi-quantile
        (the mean-based ``expectation`` baseline).
    aggregation : AggregationSettings, optional
        Combination rule and the bounds of :mod:`strategies.robust_aggregation`.
    spike_tail_prob : float
        Tail probability of the loss spike test (:mod:`depl_fl.tracking.plausibility`).
    timeout_factor, timeout_slack_s : float
        Reply timeout of a round: ``timeout_slack_s + timeout_factor *`` its
        modelled round time, capped by the ``timeout`` given to :meth:`start`.
    on_round : callable, optional
        ``on_round(strategy, arrays, loss)`` after every completed round (checkpointing).
    resume : mapping, optional
        A checkpoint (:mod:`depl_fl.orchestration.checkpointing`) to continue from instead of planning.
    profiler : object, optional
        ``profiler.run(strategy, grid, arrays, evaluate_fn, timeout, train_config)``
        runs the profile rounds after the properties query and before the scenario
        is built, and returns the arrays the job continues from
        (:class:`strategies.federated_profiling.FederatedProfiler`). A profiler whose
        ``met_round`` is set met the target during its exploration: the job then
        plans no training round.
    method : str
        The planning method (``cfg.method``), the name of that empty plan.
    clock : str
        ``model`` or ``wall``: what the deadline counts (:class:`strategies.controller.RunController`);
        with ``wall`` the time from the end of the profile rounds to the first
        training round (planning) counts too.
    drift : object, optional
        The round-time drift test (:class:`depl_fl.tracking.device_costs.DriftTest`).
    arch : str
        The network's name in logs.
    assign_clusters : callable, optional
        ``assign_clusters(properties) -> properties``: gives the clients whose node
        reported no cluster one, marked ``"cluster-source": "assigned"``
        (:func:`depl_fl.orchestration.scenario_builder.fill_clusters`); applied
        to the queried properties, so that the log, the scenario, the profile
        cache and the checkpoint all see the cluster decided.
    diverge_rounds : int, optional
        With tracking on, stop once the validation loss of each of the last
        this many training rounds is above the fresh model's
        (:mod:`depl_fl.tracking.divergence`); ``None``: never.
    stall_rounds : int, optional
        With tracking on, stop once the lowest validation loss of the training so
        far (the exploration's last measured loss counting as the first) was
        reached at least this many training rounds ago
        (:mod:`depl_fl.tracking.stall`); ``None``: never.
    plan_end : str
        ``plan`` or ``stop_rule``: whether a used-up plan ends the job
        (:class:`depl_fl.orchestration.controller.RunController`).
    job_network : TaskGeometry or UserNetwork, optional
        The network ``network`` was derived from, cut to the job's compressions
        (:func:`depl_fl.runs.runconfig.job_network`): what a central evaluation
        builds the same variants from (:func:`strategies.user_app.evaluate_fn`).
    early_stop_model : str
        ``best`` or ``last``: the model a job that the divergence or the patience
        stop ended returns (:meth:`RunController.final_model_round
        <depl_fl.orchestration.controller.RunController.final_model_round>`).
        With ``best`` (and tracking with either stop on) the server holds one
        extra copy of the model arrays: the best candidate's, while it is not
        the last round's; a checkpoint holds it too.
    learning_rate_at : str
        Where the clients' learning rate is set, named by the no-plan error of a
        network that barely learned: ``train.lr`` when DepL's own clients train,
        the user's ``train`` function in a user's own app (DepL passes it no
        learning rate there).
    """

    def __init__(self, *, network: SubnetLayout | None, targets: Targets, scenario_fn: ScenarioFn,
                 plan_fn: PlanFn | None, num_clients: int, train_settings: Mapping[str, Any],
                 guarantee: str = "gaussian", tracking: bool = False,
                 node_wait_timeout_s: float = 120.0, plan: Plan | None = None,
                 replan_policy: Any = None, track_mean: bool = False,
                 aggregation: AggregationSettings | None = None, spike_tail_prob: float = 1e-3,
                 timeout_factor: float = 3.0, timeout_slack_s: float = 60.0,
                 on_round: RoundHook | None = None, resume: Mapping[str, Any] | None = None,
                 profiler: Any = None, clock: str = "model", drift: Any = None,
                 arch: str = "network", method: str = "depl",
                 assign_clusters: Callable[[Mapping[str, Mapping[str, Any]]],
                                           dict[str, dict[str, Any]]] | None = None,
                 diverge_rounds: int | None = None, stall_rounds: int | None = None,
                 plan_end: str = "plan", early_stop_model: str = "best",
                 job_network: Any = None, learning_rate_at: str = "train.lr") -> None:
        super().__init__(fraction_train=1.0, min_available_nodes=num_clients)
        # No federated evaluation (the server evaluates centrally). Set after FedAvg's
        # constructor, which logs a spurious warning when given fraction_evaluate=0.0.
        self.fraction_evaluate, self.min_evaluate_nodes = 0.0, 0
        self.arch = arch
        self.network = network
        self.job_network = job_network
        self.learning_rate_at = learning_rate_at
        self.targets = targets
        self.scenario_fn = scenario_fn
        self.plan_fn = plan_fn
        self.num_clients = int(num_clients)
        self.train_settings = dict(train_settings)
        self.guarantee = guarantee
        self.tracking = tracking
        self.node_wait_timeout_s = float(node_wait_timeout_s)
        self.given_plan = plan
        self.replan_policy = replan_policy
        self.track_mean = bool(track_mean)
        self.aggregation = aggregation if aggregation is not None else AggregationSettings()
        self.spike_tail_prob = float(spike_tail_prob)
        self.diverge_rounds = diverge_rounds
        self.stall_rounds = stall_rounds
        self.plan_end = plan_end
        self.early_stop_model = early_stop_model
        self.timeout_factor = float(timeout_factor)
        self.timeout_slack_s = float(timeout_slack_s)
        self.on_round = on_round
        self.resume = resume
        #: Runs the profile rounds before planning (strategies.federated_profiling), or None.
        self.profiler = profiler
        self.clock = clock
        self.drift = drift
        #: The planning method (``cfg.method``): the name of the empty plan of a job met during exploration.
        self.method = str(method)
        self.assign_clusters = assign_clusters
        # Run state, filled by start().
        #: Client id -> what its accepted reply of the last aggregated round measured.
        self.reply_measured: dict[str, dict[str, Any]] = {}
        #: Reply message id -> seconds from the round's push to its arrival (strategies.exchange).
        self.arrivals: dict[str, float] = {}
        self._profile_end = time.monotonic()
        self.node_of: dict[str, int] = {}
        self.client_of: dict[int, str] = {}
        self.properties: dict[str, dict[str, Any]] = {}
        self.scenario: Scenario | None = None
        self.plan: Plan | None = None
        self.controller: RunController | None = None
        self.initial_loss: float | None = None
        self.initial_test_loss: float | None = None
        self._decision: RoundDecision | None = None
        self._structure: SubnetIndex | None = None
        self._bytes = {"down": 0, "up": 0}
        self._global_state: dict[str, np.ndarray] | None = None
        self._last_round_clients: tuple[list[str], list[dict[str, str]]] = ([], [])
        self._sent: list[tuple[Message, str]] = []
        #: ``(the sent list, message id -> client id, its length)`` for :meth:`sender_of`.
        self._sent_index: tuple[Any, dict[str, str], int] = (None, {}, 0)
        self.resumed_from: int | None = None
        #: ``(round, arrays)`` of the controller's best model so far (``keeps_best``), else ``None``.
        self.best_arrays: tuple[int, ArrayRecord] | None = None
        self._rejected: list[dict[str, str]] = []
        self._aggregate_problem: str | None = None
        self._threshold = math.inf
        self._norm_history: deque[float] = deque(maxlen=self.aggregation.history)
        #: The weight cap's median of the queried counts, and which properties it was taken from.
        self._median: list[float] = []
        self._median_of: tuple[int, int] | None = None

    def summary(self) -> None:
        """Log the strategy configuration."""
        LOG.info("DepLStrategy: arch=%s, %d clients, target P[loss <= %.4g] >= %.3g within %.4g s, "
                 "guarantee=%s, tracking=%s", self.arch, self.num_clients, self.targets.target_loss,
                 self.targets.target_prob, self.targets.deadline_s, self.guarantee, self.tracking)

    # ------------------------------------------------------------------ setup
    def wait_for_nodes(self, grid: Grid) -> list[int]:
        """Node ids once at least ``num_clients`` nodes are connected (all connected nodes).

        Raises
        ------
        NodesUnavailableError
            When they do not appear within ``node_wait_timeout_s``.
        """
        deadline = time.monotonic() + self.node_wait_timeout_s
        while True:
            nodes = sorted(grid.get_node_ids())
            if len(nodes) >= self.num_clients:
                return nodes
            if time.monotonic() >= deadline:
                # Flower's simulation runs 2 SuperNodes unless told otherwise: name the setting.
                raise NodesUnavailableError(
                    f"only {len(nodes)} of {self.num_clients} clients connected within "
                    f"{self.node_wait_timeout_s:g} s (server.node_wait_timeout_s): start more SuperNodes "
                    f"(a Flower simulation: flwr federation simulation-config ... --num-supernodes "
                    f"{self.num_clients}) or plan for fewer clients (num_clients)")
            time.sleep(0.2)

    def query_properties(self, grid: Grid, nodes: Iterable[int], timeout: float,
                         required: bool = True) -> dict[str, dict[str, Any]]:
        """Ask every node for its properties; returns client id -> properties.

        With ``required``, no answer at all raises :class:`NodesUnavailableError`.
        """
        messages = [Message(RecordDict({"config": ConfigRecord({"server-round": 0})}),
                            dst_node_id=node, message_type=MessageType.QUERY) for node in nodes]
        props: dict[str, dict[str, Any]] = {}
        for reply in send_and_receive(grid, messages, timeout):
            node = reply.metadata.src_node_id
            if reply.has_error():
                LOG.warning("query: node %s answered with an error, left out: %s", node, reply.error.reason)
                continue
            try:
                record = dict(reply.content["properties"])
                cid = client_id_of(int(record["partition-id"]))
                record["num-samples"] = int(record["num-samples"])
                record["cluster"] = str(record["cluster"])
            except Exception as exc:  # a malformed answer leaves out that node only
                LOG.warning("query: node %s sent malformed properties, left out: %s", node, exc)
                continue
            if cid in props or cid in self.properties:
                LOG.warning("query: node %s duplicates partition %s, left out", node, cid)
                continue
            props[cid] = record
            self.node_of[cid] = node
            self.client_of[node] = cid
        if not props and required:
            raise NodesUnavailableError("no client answered the properties query")
        return dict(sorted(props.items(), key=lambda item: partition_order(item[0], props)))

    def _fill_clusters(self) -> None:
        """Give the clients whose node reported no cluster one (``assign_clusters``), and log which."""
        from depl_fl.orchestration.scenario_builder import assigned_clusters_note

        if self.assign_clusters is None or all(str(p.get("cluster") or "") for p in self.properties.values()):
            return
        before = {cid for cid, p in self.properties.items() if p.get("cluster-source") == "assigned"}
        self.properties = self.assign_clusters(self.properties)
        note = assigned_clusters_note({cid: p for cid, p in self.properties.items() if cid not in before})
        if note:
            LOG.info("%s", note)

    def make_initial_plan(self) -> Plan:
        """The initial plan (given, or from ``plan_fn``); infeasible -> InfeasibleError."""
        assert self.scenario is not None
        plan = self.given_plan
        met_round = getattr(self.profiler, "met_round", None)
        if plan is None and met_round is not None:
            return self._met_plan(int(met_round))
        if plan is None:
            if self.plan_fn is None:
                raise ScenarioError("DepLStrategy needs a plan or a plan_fn")
            with notice_if_slow(LOG.info, f"planning: still searching for a dependable plan of "
                                f"{len(self.scenario.clients)} clients after {SLOW_STEP_S:g} s"):
                plan = self.plan_fn(self.scenario, self.targets, self._initial_start())
        # A feasible empty plan: the target is already met (e.g. by the exploration rounds).
        if not plan.feasible or (not plan.rounds and self.profiler is None):
            knobs = ("target.loss, target.prob, target.deadline_s or target.max_rounds"
                     if self.targets.max_rounds is not None
                     else "target.loss, target.prob or target.deadline_s")
            relief = relief_text(plan, self._relaxed_plan(plan), self.targets)
            raise InfeasibleError(
                f"no dependable plan: P[loss <= {self.targets.target_loss:g}] >= "
                f"{self.targets.target_prob:g} {self.targets.limits_text()} is not reachable"
                f" from loss {self.scenario.loss.initial:.4g}"
                f" ({shortfall_text(plan, self.targets.target_prob)}{relief}); relax {knobs}"
                f"{self._plateau_hint()}")
        unknown = sorted({c for r in plan.rounds for c in r.clients} - set(self.node_of))
        if unknown:
            raise ScenarioError(f"plan uses clients that are not connected: {', '.join(unknown)}")
        return plan

    def _plateau_hint(self) -> str:
        """A clause for the no-plan error when the exploration never left the fresh model's loss.

        A reused profile is judged on the exploration rounds its cache file
        records, the rounds that made it (this job explored none).
        """
        from depl_fl.tracking.plateau import BARELY_LEARNED_SHARE, barely_learned

        records = getattr(self.profiler, "records", None) or []
        fresh, rounds = self._fresh_loss(), f"in its {len(records)} exploration rounds"
        if not records:
            records = getattr(self.profiler, "cached_records", None) or []
            fresh = _finite(records[0].get("loss_before")) if records else None
            rounds = f"in the {len(records)} exploration rounds of its cached profile"
        losses = [r.get("loss") for r in records]
        if not barely_learned(fresh, losses):
            return ""
        lowest = min(float(v) for v in losses if v is not None and math.isfinite(float(v)))
        return (f"; but first: the network barely learned {rounds} "
                f"(validation loss {fresh:.4g} fresh, {lowest:.4g} at best, less than "
                f"{BARELY_LEARNED_SHARE:.0%} lower): a larger learning rate ({self.learning_rate_at}) or "
                "more exploration rounds (profile.explore.max_rounds) may take it off its starting plateau")

    def _relaxed_plan(self, plan: Plan) -> Plan | None:
        """The plan at a longer deadline, to say whether more deadline makes one (None: not asked)."""
        longer = relaxed_targets(plan, self.targets)
        if self.plan_fn is None or longer is None:
            return None
        LOG.info("planning: no dependable plan %s (%s); planning again within %g s to say whether a "
                 "longer deadline helps", self.targets.limits_text(),
                 shortfall_text(plan, self.targets.target_prob), longer.deadline_s)
        return self.plan_fn(self.scenario, longer, self._initial_start())

    def _met_plan(self, met_round: int) -> Plan:
        """The empty plan of a job whose exploration met the target (the stop rule after ``met_round``)."""
        LOG.info("target met during the exploration (round %d): no training round", met_round)
        judged = getattr(self.profiler, "met_model", None)
        return Plan(method=self.method, feasible=True, rounds=[],
                    predicted={"cost_joules": 0.0, "time_s": 0.0},
                    extra={"met_during_exploration": met_round, "judged_model": judged})

    # ------------------------------------------------------------------ rounds
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """Messages for exactly the planned clients of the current decision."""
        decision = self._decision
        if decision is None or self.scenario is None:
            return []
        if self.network is None:
            raise ScenarioError("DepLStrategy needs the network's layout (network=...) to train")
        model = self.scenario.model(decision.model)
        self._global_state = arrays_to_state(arrays)
        if model.compression > 0:
            # Function-preserving: the global model becomes the variant it trains, so a later
            # switch to more channels starts from this variant's loss (slicing.silence).
            self._global_state = silence_to_variant(self.network, self._global_state, model.compression)
        self._structure = compute_structure(self.network, self._global_state, model.compression)
        # Only the sub-network travels: the same sliced record goes to every planned client.
        arrays = state_to_arrays(extract(self._global_state, self._structure))
        self._bytes = {"down": payload_bytes(arrays) * len(decision.clients), "up": 0}
        messages = []
        self._sent = []
        # One content per resource level: the planned clients of a cluster get the same record.
        contents: dict[int, RecordDict] = {}
        for cid in decision.clients:
            level = int(decision.levels.get(self.scenario.client(cid).cluster, 0))
            if level not in contents:
                conf = ConfigRecord(dict(config))
                conf.update({
                    "model-id": decision.model, "compression": float(model.compression), "level": level,
                    "local-epochs": int(self.train_settings["local-epochs"]),
                    "lr": float(self.train_settings["lr"]),
                    "batch-size": int(self.train_settings["batch-size"]),
                    "server-round": int(server_round), "seed": int(self.train_settings["seed"]),
                    "compressions": sorted({float(m.compression) for m in self.scenario.models
                                            if m.compression > 0}),
                    "kept-whole": list(self.network.kept),
                })
                contents[level] = RecordDict({"arrays": arrays, "config": conf})
            messages.append(Message(contents[level], dst_node_id=self.node_of[cid],
                                    message_type=MessageType.TRAIN, group_id=str(server_round)))
            self._sent.append((messages[-1], cid))
        return messages

    def sender_of(self, reply: Message) -> str:
        """Client id a reply belongs to.

        Error replies made by the SuperLink (e.g. for a node that died) carry the
        SuperLink's node id as sender, so the message they answer decides.
        """
        sent = self._sent
        if self._sent_index[0] is not sent or self._sent_index[2] != len(sent):
            # One pass per round: looking every reply up in the sent list is quadratic in the clients.
            index: dict[str, str] = {}
            for message, cid in sent:
                if message.metadata.message_id:
                    index.setdefault(message.metadata.message_id, cid)
            self._sent_index = (sent, index, len(sent))
        cid = self._sent_index[1].get(reply.metadata.reply_to_message_id)
        if cid is not None:
            return cid
        node = reply.metadata.src_node_id
        return self.client_of.get(node, f"unknown node {node}")

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Screen the replies and combine the survivors into the full model.

        Rejected (logged with the client id and reason, recorded in the round's
        ``rejected``): error replies, wrong names/shapes/dtypes, NaN/inf, a
        ``num-examples`` above the queried ``num-samples``, an update norm above
        ``norm_factor`` times the reference (:mod:`strategies.robust_aggregation`).
        When nothing survives, or the aggregate fails its sanity check, the
        global model is unchanged (``None`` is returned). The replies are
        taken in partition order (:func:`partition_order`), whatever order
        they arrived in, so every backend sums them alike.
        """
        assert self._structure is not None and self._global_state is not None
        from depl_fl.tracking.device_costs import reply_measurement

        self._rejected = []
        self._aggregate_problem = None
        replies = sorted(replies, key=lambda reply: partition_order(self.sender_of(reply), self.properties))
        self._bytes["up"] = sum(_reply_bytes(r) for r in replies)
        accepted = self._screen(server_round, replies)
        arrived = {self.sender_of(r): self.arrivals[r.metadata.reply_to_message_id] for r in replies
                   if r.metadata.reply_to_message_id in self.arrivals}
        self.reply_measured = {c.cid: {**reply_measurement(c.metrics),
                                       **({"arrival_s": arrived[c.cid]} if c.cid in arrived else {})}
                               for c in accepted}
        replied = [c.cid for c in accepted]
        planned = list(self._decision.clients) if self._decision else []
        answered = replied + [r["client"] for r in self._rejected]
        for cid in planned:
            if cid not in answered:
                self._reject(server_round, cid, "no reply")
        self._last_round_clients = (replied, list(self._rejected))
        if not accepted:
            LOG.warning("round %d: no valid reply, global model unchanged", server_round)
            return None, None
        new_state = self._combine(accepted)
        if new_state is None:
            return None, None
        return state_to_arrays(new_state), train_metrics(accepted)

    def _reject(self, server_round: int, cid: str, reason: str) -> None:
        LOG.warning("round %d: rejected reply from %s: %s", server_round, cid, reason)
        self._rejected.append({"client": cid, "reason": reason})

    def _screen(self, server_round: int, replies: Iterable[Message]) -> list[Accepted]:
        """Replies passing the reply checks, the weight bound and the norm check."""
        assert self._structure is not None and self._global_state is not None
        expected = self._structure.sub_shapes()
        assert self.network is not None
        integers = {name: dtype for name, dtype in self.network.dtypes.items()
                    if not np.issubdtype(np.dtype(dtype), np.floating)}
        reference = extract(self._global_state, self._structure)
        queried = self._queried_median()
        candidates: list[Accepted] = []
        for reply in replies:
            cid = self.sender_of(reply)
            state, metrics, problems = check_reply(reply, expected, integers)
            if not problems:
                assert metrics is not None and state is not None
                known = self.properties.get(cid, {}).get("num-samples")
                problem = weight_problem(float(metrics[WEIGHT_KEY]), known)
                if problem is None:
                    weight = bounded_weight(float(metrics[WEIGHT_KEY]), int(known), queried,
                                            self.aggregation.weight_cap)
                    candidates.append(Accepted(cid, state, weight, metrics,
                                               update_norm(state, reference)))
                    continue
                problems = [problem]
            self._reject(server_round, cid, "; ".join(problems))
        zero = {k: np.zeros_like(v) for k, v in reference.items()}
        threshold = norm_threshold([c.norm for c in candidates], self._norm_history,
                                   self.aggregation.norm_factor, update_norm(reference, zero))
        self._threshold = threshold
        accepted = []
        for cand in candidates:
            if cand.norm > threshold:
                self._reject(server_round, cand.cid,
                             norm_rejection(cand.norm, threshold, self.aggregation.norm_factor))
            else:
                accepted.append(cand)
        return accepted

    def _queried_median(self) -> list[float]:
        """The median of every queried sample count, as the weight cap reads it (``[]``: none queried).

        Taken once per set of queried clients, not per round: the properties only
        gain clients (late nodes), so their number says when it is stale.
        """
        key = (id(self.properties), len(self.properties))
        if self._median_of != key:
            counts = np.asarray([int(p["num-samples"]) for p in self.properties.values()], dtype=np.float64)
            self._median = [float(np.median(counts))] if self.properties else []
            self._median_of = key
        return self._median

    def _combine(self, accepted: list[Accepted]) -> dict[str, np.ndarray] | None:
        """The new full model from the accepted replies, or ``None`` (rolled back)."""
        assert self._structure is not None and self._global_state is not None
        if self.aggregation.rule == "fedavg":
            new_state = aggregate_pruned(self._global_state, [(c.state, c.weight) for c in accepted],
                                         self._structure)
        else:
            combined = combine([c.state for c in accepted], [c.weight for c in accepted], self.aggregation)
            new_state = scatter(self._global_state, combined, self._structure)
        problem = aggregate_problem(extract(new_state, self._structure),
                                    extract(self._global_state, self._structure), self._threshold)
        if problem is not None:
            LOG.warning("aggregate rolled back, global model unchanged: %s", problem)
            self._aggregate_problem = problem
            return None
        self._norm_history.extend(c.norm for c in accepted)
        return new_state

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """No federated evaluation: the global model is evaluated centrally."""
        return []

    # ------------------------------------------------------------------ main loop
    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int | None = None,
              timeout: float = 3600, train_config: ConfigRecord | None = None,
              evaluate_config: ConfigRecord | None = None,
              evaluate_fn: EvaluateFn | None = None) -> Result:
        """Set up (nodes, properties, scenario, plan) and run the planned rounds.

        ``num_rounds`` only caps the number of rounds; the plan decides.
        ``evaluate_fn(server_round, arrays, compression)`` (central evaluation
        of the trained variant, returning ``loss`` and ``accuracy``) is
        required: the loss drives tracking and results.
        """
        if evaluate_fn is None:
            raise ScenarioError("DepLStrategy needs a central evaluate_fn (loss drives the plan)")
        self.summary()
        nodes = self.wait_for_nodes(grid)
        self.properties = self.query_properties(grid, nodes, timeout)
        self._fill_clusters()
        LOG.info("clients: %s", client_listing(self.properties))
        result = Result()
        train_config = ConfigRecord() if train_config is None else train_config
        if self.resume is not None and self.resume.get("phase", "train") == "train":
            arrays, loss = self._resume_state(self.resume)
        else:
            if self.resume is not None:  # killed during the exploration: it goes on from there
                initial_arrays = self._resume_exploration(self.resume)
            if self.profiler is not None:  # profile rounds first; the job continues from their model
                initial_arrays = self.profiler.run(self, grid, initial_arrays, evaluate_fn, timeout,
                                                   train_config)
                if getattr(self.profiler, "stop_reason", None):  # the exploration diverged: no plan
                    return self._diverged_in_exploration(initial_arrays, result)
            self._profile_end = time.monotonic()
            arrays, loss = self._plan_and_evaluate(initial_arrays, evaluate_fn, result)
        result.arrays = arrays
        while (decision := self.controller.next_decision()) is not None:
            server_round = self.controller.rounds_done + 1
            if num_rounds is not None and server_round > num_rounds:
                break
            arrays, loss = self._run_round(grid, decision, server_round, arrays, loss, train_config,
                                           timeout, evaluate_fn, result)
            result.arrays = arrays
            self._keep_if_best(arrays)
            clock = StepClock()
            if self.on_round is not None:
                self.on_round(self, arrays, loss)
            clock.mark("write")
            # Announced once written: a stop right after the line never loses this round.
            self._announce(decision)
            self._admit_late_nodes(grid, timeout)
            clock.mark("admit")
            self.controller.records[-1].setdefault("steps_s", {}).update(clock.steps())
        self._decision = None
        result.arrays = self._final_arrays(result.arrays)
        return result

    def _keep_if_best(self, arrays: ArrayRecord) -> None:
        """Hold ``arrays`` (the model after the last recorded round) when it is the best candidate."""
        assert self.controller is not None
        best = self.controller.best_model() if self.controller.keeps_best() else None
        if best is not None and best[0] == self.controller.rounds_done:
            self.best_arrays = (best[0], arrays)

    def _final_arrays(self, last: ArrayRecord) -> ArrayRecord:
        """The arrays the job ends with: the last, or the best model's after a divergence or patience stop."""
        assert self.controller is not None
        final = self.controller.final_model_round()
        if final == self.controller.rounds_done or self.best_arrays is None or self.best_arrays[0] != final:
            return last
        LOG.info("%s", self.controller.final_model_note())
        return self.best_arrays[1]

    def _diverged_in_exploration(self, arrays: ArrayRecord, result: Result) -> Result:
        """The job the exploration's divergence stop ended: no plan, its model's losses as the final ones."""
        last = self.profiler.records[-1]
        self.initial_loss = float(last["loss"])
        self.initial_test_loss = last.get("test_loss")
        result.arrays = arrays
        return result

    def _log_plan(self) -> None:
        """One line: the initial plan's rounds and what it predicts."""
        LOG.info("plan (%s): %d rounds, predicted cost %.4g J, time %.4g s, quantile %.4g, "
                 "probability %.4g", self.plan.method, len(self.plan.rounds),
                 self.plan.predicted.get("cost_joules", float("nan")),
                 self.plan.predicted.get("time_s", float("nan")),
                 self.plan.predicted.get("loss_quantile", float("nan")),
                 self.plan.predicted.get("probability", float("nan")))

    def _plan_and_evaluate(self, initial_arrays: ArrayRecord, evaluate_fn: EvaluateFn,
                           result: Result) -> tuple[ArrayRecord, float]:
        """Scenario, initial plan, controller and the evaluation of the initial model."""
        self.scenario = self.scenario_fn(self.properties)
        self.plan = self.make_initial_plan()
        if self.plan.rounds:
            self._log_plan()
        elif getattr(self.profiler, "met_round", None) is None:  # else the met line said it already
            LOG.info("plan (%s): no training round needed", self.plan.method)
        self.controller = self._make_controller()
        if self.clock == "wall":  # planning after the profile rounds is deadline time too
            self.controller.elapsed_s = time.monotonic() - self._profile_end
        # A feasible empty plan (the target already met, e.g. by the exploration rounds): no round.
        # Met during the exploration: the variant the stop rule judged (its worst).
        name = self.plan.rounds[0].model if self.plan.rounds else self.plan.extra.get("judged_model")
        first_model = self.scenario.model(name) if name else None
        first = evaluate_fn(0, initial_arrays, float(first_model.compression) if first_model else 0.0)
        if first is not None:
            result.evaluate_metrics_serverapp[0] = first
        self.initial_loss = float(first["loss"]) if first is not None else float("nan")
        self.initial_test_loss = _metric(first, "test-loss")
        self.controller.fresh_loss = self._fresh_loss()
        self.controller.start_loss = self.initial_loss if math.isfinite(self.initial_loss) else None
        self._keep_if_best(initial_arrays)
        if self.on_round is not None:
            self.on_round(self, initial_arrays, self.initial_loss)
        return initial_arrays, self.initial_loss

    def _fresh_loss(self) -> float | None:
        """The fresh model's validation loss: before the first exploration round, else the initial model's.

        The exploration's first record holds the worst variant's (the highest, the
        divergence stop's most conservative bar).
        """
        records = getattr(self.profiler, "records", None) or []
        return _finite(records[0].get("loss_before") if records else self.initial_loss)

    def _initial_sem(self) -> float | None:
        """Standard error of the measured initial loss (the exploration's last evaluation), if any."""
        sem = getattr(self.profiler, "loss_sem", None)
        return float(sem) if sem is not None and math.isfinite(float(sem)) else None

    def _initial_start(self) -> Any:
        """The initial plan's start: None, or the measured initial loss with its evaluation error."""
        from depl_fl.planner import PlanStart

        assert self.scenario is not None
        trend = getattr(self.profiler, "start_trend", None)
        if trend is not None:  # the exploration's trend: a fitted level with the fit's uncertainty
            return PlanStart(loss_mean=self.scenario.loss.initial, loss_std=float(trend["std"]))
        sem = self._initial_sem()
        if sem is None or self.scenario.loss.judged_error:  # the judged loss carries the offset
            return None
        return PlanStart(loss_mean=self.scenario.loss.initial, loss_std=math.sqrt(2.0) * sem)

    def _make_controller(self) -> RunController:
        assert self.scenario is not None and self.plan is not None
        return RunController(self.scenario, self.targets, self.plan, guarantee=self.guarantee,
                             planner=self.plan_fn, tracking=self.tracking,
                             replan_policy=self.replan_policy, track_mean=self.track_mean,
                             spike_tail_prob=self.spike_tail_prob,
                             loss_sem=self._initial_sem(), clock=self.clock, drift=self.drift,
                             start_trend=getattr(self.profiler, "start_trend", None),
                             diverge_rounds=self.diverge_rounds, stall_rounds=self.stall_rounds,
                             plan_end=self.plan_end, early_stop_model=self.early_stop_model)

    def _resume_exploration(self, doc: Mapping[str, Any]) -> ArrayRecord:
        """Profiler and aggregation state of a checkpoint taken during the exploration; its model."""
        from depl_fl.orchestration.checkpointing import restore_strategy_state, resume_point, rounds_completed

        restore_strategy_state(self, doc)
        if doc.get("profiler") and hasattr(self.profiler, "restore"):
            self.profiler.restore(doc["profiler"])
        self.resumed_from = rounds_completed(doc)
        absent = sorted(set(doc.get("properties") or ()) - set(self.properties))
        LOG.info("resuming after %s%s", resume_point(self.resumed_from, self.resumed_from),
                 f"; absent now: {', '.join(absent)}" if absent else "")
        return state_to_arrays(doc["global_state"])

    def _resume_state(self, doc: Mapping[str, Any]) -> tuple[ArrayRecord, float]:
        """Scenario, plan, controller, model and loss from a checkpoint; absent clients are dropped."""
        from depl_fl.orchestration.checkpointing import (
            restore_controller,
            restore_strategy_state,
            resume_point,
            rounds_completed,
        )

        self.scenario, self.plan = doc["scenario"], doc["plan"]
        self.initial_loss = doc["initial_loss"]
        self.initial_test_loss = doc.get("initial_test_loss")
        self.controller = self._make_controller()
        restore_controller(self.controller, doc["controller"])
        if self.controller.start_loss is None and math.isfinite(float(self.initial_loss)):
            self.controller.start_loss = float(self.initial_loss)  # checkpointed before the patience stop
        restore_strategy_state(self, doc)
        if doc.get("profiler") and hasattr(self.profiler, "restore"):
            self.profiler.restore(doc["profiler"])
        self.resumed_from = rounds_completed(doc)
        absent = sorted({c.id for c in self.scenario.clients} - set(self.node_of)
                        - self.controller.dropped_clients)
        trained = self.controller.rounds_done
        LOG.info("resuming after %s%s", resume_point(self.resumed_from, self.resumed_from - trained,
                                                      finished=self.controller.next_decision() is None),
                 f"; absent now: {', '.join(absent)}" if absent else "")
        self.controller.drop(absent)
        arrays = state_to_arrays(doc["global_state"])
        self._restore_best(doc.get("best_model", ABSENT))
        self._keep_if_best(arrays)
        return arrays, float(doc["loss"])

    def _restore_best(self, saved: Any) -> None:
        """The checkpoint's best model (:func:`depl_fl.orchestration.checkpointing.best_model_payload`).

        A checkpoint written before it was kept: the resumed job's candidates
        are its loaded model and the rounds after it.
        """
        assert self.controller is not None
        if saved is ABSENT:
            self.controller.best_since = self.controller.rounds_done
        elif saved is not None and saved.get("state") is not None:
            self.best_arrays = (int(saved["round"]), state_to_arrays(saved["state"]))

    def round_timeout(self, decision: RoundDecision, cap_s: float) -> float:
        """Reply timeout of a round from its modelled round time (:mod:`depl_fl.orchestration.membership`)."""
        from depl_fl.orchestration.membership import round_timeout_s

        assert self.controller is not None
        return round_timeout_s(self.controller.scenario, decision, factor=self.timeout_factor,
                               slack_s=self.timeout_slack_s, cap_s=cap_s)

    def _run_round(self, grid: Grid, decision: RoundDecision, server_round: int, arrays: ArrayRecord,
                   loss: float, train_config: ConfigRecord, timeout: float, evaluate_fn: EvaluateFn,
                   result: Result) -> tuple[ArrayRecord, float]:
        """Train, aggregate, evaluate (rolling back a model whose loss is not finite) and record."""
        assert self.scenario is not None and self.controller is not None
        clock = StepClock()
        self._decision = decision
        compression = float(self.scenario.model(decision.model).compression)
        messages = self.configure_train(server_round, arrays, train_config, grid)
        clock.mark("configure")
        self.arrivals = {}
        replies = send_and_receive(grid, messages, self.round_timeout(decision, timeout),
                                   arrivals=self.arrivals)
        clock.mark("exchange")
        agg_arrays, agg_metrics = self.aggregate_train(server_round, replies)
        clock.mark("aggregate")
        res = evaluate_fn(server_round, agg_arrays if agg_arrays is not None else arrays, compression)
        if agg_arrays is not None and (res is None or not math.isfinite(float(res["loss"]))):
            # The sanity check of last resort: a model whose loss is not finite is never kept.
            self._aggregate_problem = "evaluation loss of the aggregate is not finite"
            LOG.warning("round %d: aggregate rolled back, global model unchanged: %s", server_round,
                        self._aggregate_problem)
            agg_arrays, agg_metrics = None, None
            res = evaluate_fn(server_round, arrays, compression)
        clock.mark("evaluate")
        if agg_arrays is not None:
            arrays = agg_arrays
            result.arrays = arrays
        if agg_metrics is not None:
            result.train_metrics_clientapp[server_round] = agg_metrics
        if res is not None:
            result.evaluate_metrics_serverapp[server_round] = res
        new_loss = float(res["loss"]) if res is not None else float("nan")
        replied, rejected = self._last_round_clients
        train_loss = float(agg_metrics["train-loss"]) if agg_metrics is not None else None
        rec = self.controller.record(decision, loss, new_loss, accuracy=_metric(res, "accuracy"),
                                     wall_s=clock.elapsed, replied=replied,
                                     rejected=rejected, train_loss=train_loss,
                                     test_loss=_metric(res, "test-loss"), loss_sem=_metric(res, "loss-sem"),
                                     loss_margin=_metric(res, "loss-margin"),
                                     test_accuracy=_metric(res, "test-accuracy"),
                                     measured=self.reply_measured)
        rec["rolled_back"] = self._aggregate_problem
        rec.update(self.round_bytes(decision))
        clock.mark("record")
        rec["steps_s"] = clock.steps()
        return arrays, new_loss

    def _announce(self, decision: RoundDecision) -> None:
        """Log the last recorded round's progress line, then the controller's notes on it."""
        assert self.controller is not None
        rec = self.controller.records[-1]
        LOG.info("round %d: model %s, %d/%d clients, loss %.4f, predicted %s %.4f vs target %.4g%s%s",
                 rec["round"], rec["model"], len(rec["replied"]), len(decision.clients), rec["loss"],
                 "mean" if self.track_mean else f"q{100 * self.targets.target_prob:.0f}",
                 rec["predicted_quantile"], self.targets.target_loss,
                 " (re-planned)" if rec["replanned"] else "", " AT RISK" if rec.get("at_risk") else "")
        for line in self.controller.take_notes():
            LOG.info("%s", line)

    def round_bytes(self, decision: RoundDecision) -> dict[str, int]:
        """Array bytes of the last round's messages, measured and as the cost model charges them."""
        assert self.scenario is not None
        size = float(self.scenario.model(decision.model).size_bytes)
        planned = len(decision.clients)
        return {"bytes_down": int(self._bytes["down"]), "bytes_up": int(self._bytes["up"]),
                "modelled_bytes_down": int(round(size * planned)),
                "modelled_bytes_up": int(round(size * planned))}

    def _admit_late_nodes(self, grid: Grid, timeout: float) -> None:
        """Query nodes that connected after the start; their clients may be used from the next re-plan."""
        from depl_fl.orchestration.membership import admit_clients

        assert self.controller is not None and self.scenario is not None
        new_nodes = sorted(set(grid.get_node_ids()) - set(self.client_of))
        if not new_nodes:
            return
        props = self.query_properties(grid, new_nodes, min(timeout, self.timeout_slack_s), required=False)
        if not props:
            return
        self.properties.update(props)
        self._fill_clusters()
        built = self.scenario_fn(self.properties)
        scenario, admitted = admit_clients(self.controller.scenario,
                                           [c for c in built.clients if c.id in props])
        self.controller.scenario = self.scenario = scenario
        if admitted:
            LOG.info("joined: %s (usable from the next re-plan)", ", ".join(admitted))
