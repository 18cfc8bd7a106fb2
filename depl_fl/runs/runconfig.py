"""The composed run configuration of a federated DepL job, as a plain dict.

Hydra composes ``conf/``; :func:`to_plain` turns the result into a plain,
picklable ``dict`` that is handed to the ServerApp and ClientApp by closure
(Ray pickles the ClientApp together with it). :func:`validate` checks the
user-facing keys and raises one-line :class:`~depl_fl.errors.ScenarioError`
messages. Pure Python: no flwr, no torch.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Mapping, Sequence

from depl_fl.errors import ScenarioError

METHODS = ("depl", "expectation", "full")
BACKENDS = ("ray", "inprocess")
AGGREGATION_RULES = ("fedavg", "trimmed_mean", "median")
FAULT_KINDS = ("nan", "huge", "scale", "num_examples", "dtype", "shape", "crash", "slow")


def to_plain(cfg: Any) -> dict[str, Any]:
    """Return ``cfg`` (an OmegaConf node or a mapping) as a resolved plain dict."""
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # pragma: no cover - hydra is an install requirement of the fl extra
        DictConfig = ()  # type: ignore[assignment]
    if DictConfig and isinstance(cfg, DictConfig):
        out = OmegaConf.to_container(cfg, resolve=True)
        out.pop("hydra", None)
        return out  # type: ignore[return-value]
    return json.loads(json.dumps(cfg))


def _get(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise ScenarioError(f"config: missing key {dotted!r}")
        node = node[part]
    return node


def _positive(cfg: Mapping[str, Any], dotted: str, *, integer: bool = False,
              allow_zero: bool = False) -> float:
    value = _get(cfg, dotted)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ScenarioError(f"config {dotted}: expected a finite number, got {value!r}")
    if integer and value != int(value):
        raise ScenarioError(f"config {dotted}: expected an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ScenarioError(f"config {dotted}: must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return value


def validate(cfg: Mapping[str, Any]) -> None:
    """Check the user-facing keys of a composed configuration.

    Raises
    ------
    ScenarioError
        With one line naming the key and the problem.
    """
    method = _get(cfg, "method")
    if method not in METHODS:
        raise ScenarioError(f"config method: must be one of {', '.join(METHODS)}, got {method!r}")
    seed = _get(cfg, "seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ScenarioError(f"config seed: expected an integer >= 0, got {seed!r}")
    num_clients = _positive(cfg, "num_clients", integer=True)
    if num_clients < 1:
        raise ScenarioError(f"config num_clients: must be >= 1, got {num_clients!r}")
    alpha = _get(cfg, "partition.alpha")
    if alpha is not None:
        _positive(cfg, "partition.alpha")
    prob = _get(cfg, "target.prob")
    if isinstance(prob, bool) or not isinstance(prob, (int, float)) or not 0.0 < prob < 1.0:
        raise ScenarioError(f"config target.prob: must be in (0, 1), got {prob!r}")
    _positive(cfg, "target.loss", allow_zero=True)
    _positive(cfg, "target.deadline_s")
    if _get(cfg, "target.max_rounds") is not None:
        _positive(cfg, "target.max_rounds", integer=True)
    _positive(cfg, "train.local_epochs", integer=True)
    _positive(cfg, "train.lr")
    _positive(cfg, "train.batch_size", integer=True)
    _positive(cfg, "profile.seeds", integer=True)
    _positive(cfg, "profile.rounds", integer=True)
    fractions = _get(cfg, "profile.subset_fractions")
    if fractions is None:
        fractions = []
    if not isinstance(fractions, Sequence) or isinstance(fractions, str) or not all(
            isinstance(f, (int, float)) and not isinstance(f, bool) and 0.0 < f < 1.0 for f in fractions):
        raise ScenarioError(f"config profile.subset_fractions: expected a list of numbers in (0, 1), "
                            f"got {fractions!r}")
    horizon = _get(cfg, "profile.spread_horizon")
    if horizon is not None:
        _positive(cfg, "profile.spread_horizon", integer=True)
        if not 2 <= int(horizon) <= int(_get(cfg, "profile.rounds")):
            raise ScenarioError(f"config profile.spread_horizon: must be null or an integer in "
                                f"[2, profile.rounds={_get(cfg, 'profile.rounds')}], got {horizon!r}")
    _positive(cfg, "tracking.margin", allow_zero=True)
    if _get(cfg, "tracking.ahead_margin") is not None:
        _positive(cfg, "tracking.ahead_margin", allow_zero=True)
    if _get(cfg, "tracking.every_rounds") is not None:
        _positive(cfg, "tracking.every_rounds", integer=True)
    backend = _get(cfg, "simulation.backend")
    if backend not in BACKENDS:
        raise ScenarioError(
            f"config simulation.backend: must be one of {', '.join(BACKENDS)}, got {backend!r}")
    clusters = _get(cfg, "clusters.classes")
    if not isinstance(clusters, Mapping) or not clusters:
        raise ScenarioError("config clusters.classes: must be a non-empty mapping of cluster id -> profile")
    cluster_assignment(int(num_clients), clusters)
    validate_robustness(cfg)


def validate_robustness(cfg: Mapping[str, Any]) -> None:
    """Check ``aggregation.*``, ``faults.*`` and ``tracking.spike_tail_prob`` (absent sections pass)."""
    agg = cfg.get("aggregation")
    if agg is not None:
        if _get(cfg, "aggregation.rule") not in AGGREGATION_RULES:
            raise ScenarioError(f"config aggregation.rule: must be one of {', '.join(AGGREGATION_RULES)}, "
                                f"got {agg.get('rule')!r}")
        trim = _positive(cfg, "aggregation.trim_fraction", allow_zero=True)
        if trim >= 0.5:
            raise ScenarioError(f"config aggregation.trim_fraction: must be in [0, 0.5), got {trim!r}")
        if _positive(cfg, "aggregation.norm_factor") <= 1:
            raise ScenarioError(f"config aggregation.norm_factor: must be > 1, got {agg['norm_factor']!r}")
        if _positive(cfg, "aggregation.weight_cap") < 1:
            raise ScenarioError(f"config aggregation.weight_cap: must be >= 1, got {agg['weight_cap']!r}")
        _positive(cfg, "aggregation.history", integer=True, allow_zero=True)
    tail = (cfg.get("tracking") or {}).get("spike_tail_prob")
    if tail is not None and not (isinstance(tail, (int, float)) and not isinstance(tail, bool)
                                 and 0.0 < tail < 0.5):
        raise ScenarioError(f"config tracking.spike_tail_prob: must be in (0, 0.5), got {tail!r}")
    if cfg.get("faults") is not None:
        _validate_faults(cfg)


def fault_kind(value: Any) -> str | None:
    """A fault kind as a string: YAML and Hydra read ``nan`` as a float NaN."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return None if value is None else str(value)


def _validate_faults(cfg: Mapping[str, Any]) -> None:
    kind = fault_kind(_get(cfg, "faults.kind"))
    if kind is not None and kind not in FAULT_KINDS:
        raise ScenarioError(f"config faults.kind: must be null or one of {', '.join(FAULT_KINDS)}, "
                            f"got {kind!r}")
    clients = _get(cfg, "faults.clients")
    if not isinstance(clients, Sequence) or isinstance(clients, str) or not all(
            isinstance(c, str) and c[:1] == "c" and c[1:].isdigit() for c in clients):
        raise ScenarioError(f"config faults.clients: expected a list of client ids like [c0, c3], "
                            f"got {clients!r}")
    _positive(cfg, "faults.from_round", integer=True)
    _positive(cfg, "faults.scale")
    _positive(cfg, "faults.slow_s", allow_zero=True)


def cluster_assignment(num_partitions: int, classes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Assign partition ids to clusters by the configured ``fraction`` of each class.

    Partition ids ``0..n-1`` are split into consecutive blocks, in the order the
    classes are listed, with block sizes proportional to ``fraction``
    (largest-remainder rounding, so the sizes add up to ``n``).

    Parameters
    ----------
    num_partitions : int
        Number of clients (``num-partitions`` in the simulation node config).
    classes : mapping
        Cluster id -> profile with a ``fraction`` entry (> 0).

    Returns
    -------
    list of str
        ``result[partition_id]`` is the cluster of that partition.
    """
    ids = list(classes)
    fractions = []
    for cid in ids:
        frac = classes[cid].get("fraction", 1.0)
        if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not frac > 0:
            raise ScenarioError(f"config clusters.classes.{cid}.fraction: must be > 0, got {frac!r}")
        fractions.append(float(frac))
    total = sum(fractions)
    exact = [num_partitions * f / total for f in fractions]
    sizes = [int(math.floor(e)) for e in exact]
    order = sorted(range(len(ids)), key=lambda i: (-(exact[i] - sizes[i]), i))
    for i in order[: num_partitions - sum(sizes)]:
        sizes[i] += 1
    out: list[str] = []
    for cid, size in zip(ids, sizes):
        out.extend([cid] * size)
    return out


def variant_list(cfg: Mapping[str, Any]) -> list[tuple[str, float]]:
    """The configured model variants as ``[(model_id, compression), ...]``."""
    raw = _get(cfg, "model.variants")
    if not isinstance(raw, Sequence) or not raw:
        raise ScenarioError("config model.variants: must be a non-empty list of {id, compression}")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or "id" not in item:
            raise ScenarioError(f"config model.variants[{i}]: expected {{id, compression}}")
        comp = float(item.get("compression", 0.0))
        if not 0.0 <= comp < 1.0:
            raise ScenarioError(f"config model.variants[{i}].compression: must be in [0, 1), got {comp!r}")
        out.append((str(item["id"]), comp))
    return out


def stable_hash(obj: Any, length: int = 16) -> str:
    """A short, order-independent hash of a JSON-serialisable object."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def client_seed(run_seed: int, server_round: int, partition_id: int) -> int:
    """Seed of one client's local training in one round (independent of message order)."""
    return (int(run_seed) * 1_000_003 + int(server_round) * 10_007 + int(partition_id)) % (2**31 - 1)


def conf_dir() -> str:
    """Absolute path of the project's Hydra config directory ``conf/``.

    In a checkout (or an editable install) that is the top-level ``conf/``;
    an installed wheel ships the same files as the package data
    ``depl_fl.conf``, so the entry points and the Flower apps run from any
    directory.
    """
    from pathlib import Path

    checkout = Path(__file__).resolve().parents[2] / "conf"
    if (checkout / "config.yaml").is_file():
        return str(checkout)
    from importlib.resources import files

    return str(files("depl_fl.conf"))


def compose_config(overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Compose ``conf/config.yaml`` with Hydra overrides and return a validated plain dict.

    Used where Hydra's command line is not in charge (``flwr run .``, tests,
    benchmarks). Raises :class:`ScenarioError` for bad overrides or values.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=conf_dir(), version_base=None):
            cfg = to_plain(compose(config_name="config", overrides=list(overrides)))
    except (HydraException, OmegaConfBaseException) as exc:
        raise ScenarioError(f"config: {' '.join(str(exc).split())}") from None
    validate(cfg)
    return cfg


_RUN_CONFIG_CACHE: dict[str, dict[str, Any]] = {}


def config_from_run_config(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """The run configuration for ``flwr run .``.

    ``run_config["overrides"]`` (from ``[tool.flwr.app.config]`` or
    ``flwr run . --run-config 'overrides="seed=3 method=full"'``) is a
    space-separated list of Hydra overrides applied to ``conf/config.yaml``.
    """
    text = str(run_config.get("overrides", "") or "")
    if text not in _RUN_CONFIG_CACHE:
        _RUN_CONFIG_CACHE[text] = compose_config(text.split())
    return _RUN_CONFIG_CACHE[text]
