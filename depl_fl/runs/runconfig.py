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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from depl_fl.errors import ScenarioError
from depl_fl.runs.exploration_choice import resolve_exploration
from depl_fl.task.geometry import model_id


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


def validate(cfg: Mapping[str, Any], entry: str | None = None) -> None:
    """Check a composed configuration before anything starts.

    The exploration options that follow tracking are resolved first
    (:func:`depl_fl.runs.exploration_choice.resolve_exploration`, which refuses
    a word they do not take), then
    :func:`depl_fl.runs.config_schema.validate_config` (imported only when
    called: pydantic), then :func:`depl_fl.runs.mode_keys.check_mode_keys`:
    a key set away from its ``conf/`` value that the chosen mode does not read
    is refused (``auto`` in ``conf/`` counts as the value it resolves to).
    ``entry`` is the entry point (``mode_keys.HYDRA_JOB``, ``mode_keys.USER_APP`` or
    ``mode_keys.FLWR_RUN``; ``None`` skips the rules that depend on it).
    """
    from depl_fl.runs.config_schema import check_fault_clients, validate_config
    from depl_fl.runs.mode_keys import HYDRA_JOB, check_mode_keys

    resolved = resolve_exploration(cfg)
    validate_config(resolved)
    check_mode_keys(resolved, default_config(), entry)
    if entry == HYDRA_JOB:  # a simulation: the federation is exactly num_clients clients
        check_fault_clients(resolved)


def prepare(cfg: Mapping[str, Any], entry: str | None = None) -> dict[str, Any]:
    """The configuration a job runs and records: ``cfg`` resolved (``auto`` replaced) and validated."""
    resolved = resolve_exploration(cfg)
    validate(resolved, entry)
    return resolved


_DEFAULTS: dict[str, dict[str, Any]] = {}


def default_config() -> dict[str, Any]:
    """The configuration ``conf/`` composes without overrides (composed once per process).

    Inside a running Hydra application (a job of ``depl_fl/main.py``) it is
    composed by that application's own Hydra; elsewhere in a short-lived one.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    root = conf_dir()
    if root not in _DEFAULTS:
        if GlobalHydra.instance().is_initialized():
            _DEFAULTS[root] = to_plain(compose(config_name="config"))
        else:
            with initialize_config_dir(config_dir=root, version_base=None):
                _DEFAULTS[root] = to_plain(compose(config_name="config"))
    return _DEFAULTS[root]


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
    for cid, size in zip(ids, sizes, strict=True):
        out.extend([cid] * size)
    return out


def variant_list(cfg: Mapping[str, Any]) -> list[tuple[str, float]]:
    """The configured model variants as ``[(model_id, compression), ...]``.

    ``model.compressions`` (a list of compression factors), when set, names
    the variants ``full``, ``p50``, ``p75``... and replaces ``model.variants``.
    """
    model = _get(cfg, "model")
    if isinstance(model, Mapping) and model.get("compressions") is not None:
        return _compression_variants(model["compressions"])
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


def job_network(cfg: Mapping[str, Any], network: Any) -> Any:
    """``network`` (a task geometry or a user's network) cut to the job's compressions (its variants').

    The groups kept whole depend on them (:func:`depl_fl.task.subnets.kept_whole`):
    the server and every node derive the variants from the network so cut.
    """
    from depl_fl.task.geometry import with_compressions

    return with_compressions(network, [c for _, c in variant_list(cfg)])


def _compression_variants(raw: Any) -> list[tuple[str, float]]:
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence) or not raw:
        raise ScenarioError(f"config model.compressions: must be a non-empty list of numbers in [0, 1), "
                            f"got {raw!r}")
    out: list[tuple[str, float]] = []
    for i, value in enumerate(raw):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) < 1.0:
            raise ScenarioError(f"config model.compressions[{i}]: must be a number in [0, 1), got {value!r}")
        name = model_id(float(value))
        if name in {m for m, _ in out}:
            raise ScenarioError(f"config model.compressions[{i}]: {value!r} repeats variant {name}")
        out.append((name, float(value)))
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
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "conf", package.parent / "conf"):  # installed wheel, checkout
        if (candidate / "config.yaml").is_file():
            return str(candidate)
    raise ScenarioError(f"config: no conf/config.yaml in {package.parent} or {package} "
                        "(a broken install: the wheel ships conf/ as depl_fl/conf)")


def compose_config(overrides: Sequence[str] = (), entry: str | None = None) -> dict[str, Any]:
    """Compose ``conf/config.yaml`` with Hydra overrides and return a validated plain dict.

    The exploration options that follow tracking come resolved (:func:`prepare`).
    Used where Hydra's command line is not in charge (``flwr run .``, tests,
    benchmarks). Raises :class:`ScenarioError` for bad overrides or values,
    and for a setting the chosen mode does not read (see :func:`validate`).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from depl_fl.runs.override_keys import check_override_keys

    check_override_keys(conf_dir(), overrides, added_only=True)  # composes only for a +key outside model.
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=conf_dir(), version_base=None):
            cfg = to_plain(compose(config_name="config", overrides=list(overrides)))
    except (HydraException, OmegaConfBaseException) as exc:
        check_override_keys(conf_dir(), overrides)  # an unknown key: one line with the closest ones
        raise ScenarioError(f"config: {' '.join(str(exc).split())}") from None
    return prepare(cfg, entry)


_RUN_CONFIG_CACHE: dict[str, dict[str, Any]] = {}
CONFIG_CACHE_FORMAT = 3


def conf_digest(directory: str | None = None) -> str:
    """Hash of every ``*.yaml`` file (relative path and bytes) under the Hydra config folder."""
    from pathlib import Path

    root = Path(directory or conf_dir())
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.yaml")):
        digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


def config_from_run_config(run_config: Mapping[str, Any], cache_dir: Any = None) -> dict[str, Any]:
    """The run configuration for ``flwr run .``.

    ``run_config["overrides"]`` (from ``[tool.flwr.app.config]`` or
    ``flwr run . --run-config 'overrides="seed=3 method=full"'``) is a
    space-separated list of Hydra overrides applied to ``conf/config.yaml``.

    Composed once per process; with ``cache_dir`` (a node cache folder,
    :func:`depl_fl.diskcache.node_cache_dir`) also once per node: the
    validated result is stored under a hash of the overrides and of the
    config files, so later ClientApp processes neither import nor run Hydra.
    """
    text = str(run_config.get("overrides", "") or "")
    if text in _RUN_CONFIG_CACHE:
        return _RUN_CONFIG_CACHE[text]
    path = None
    if cache_dir is not None:
        from pathlib import Path

        from depl_fl.diskcache import content_key, read_json

        key = content_key({"config": CONFIG_CACHE_FORMAT, "overrides": text, "conf": conf_digest()})
        path = Path(cache_dir) / "config" / f"{key}.json"
        cached = read_json(path)
        if isinstance(cached, dict):
            _RUN_CONFIG_CACHE[text] = cached
            return cached
    from depl_fl.runs.mode_keys import FLWR_RUN

    cfg = compose_config(text.split(), entry=FLWR_RUN)
    if path is not None:
        from depl_fl.diskcache import write_json

        write_json(path, cfg)
    _RUN_CONFIG_CACHE[text] = cfg
    return cfg
