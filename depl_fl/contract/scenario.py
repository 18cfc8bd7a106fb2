"""Scenario model (DESIGN.md section 3, contract version 1): load, validate, save.

A scenario describes the clusters (with their resource levels), the clients
(data holders), the model variants (full and compressed) and the loss-evolution
profile used by the planner. Every validation failure raises
:class:`ScenarioError` with one line naming the field and the problem.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from depl_fl.errors import ScenarioError

SCENARIO_VERSION = 1


@dataclass(frozen=True)
class Level:
    """One resource level of a cluster (speed/energy trade-off)."""

    flops_per_s: float
    joules_per_flop: float


@dataclass(frozen=True)
class Cluster:
    """A group of nodes sharing a hardware/network profile."""

    id: str
    levels: tuple[Level, ...]
    bytes_per_s: float
    joules_per_byte: float
    activation_joules: float
    max_clients: int


@dataclass(frozen=True)
class Client:
    """A data holder (a Flower SuperNode and its partition)."""

    id: str
    cluster: str
    num_samples: int


@dataclass(frozen=True)
class ModelVariant:
    """The full model (compression 0) or a structurally pruned version of it."""

    id: str
    compression: float
    flops_per_sample: float
    size_bytes: float


@dataclass(frozen=True)
class RunProfile:
    """Per-round loss decrease X of one model, as a function of the current loss.

    ``mean`` and ``std`` are interpolated linearly over ``levels`` (ascending
    loss values) and clamped at the ends.

    ``spread_factor`` (optional extra field, one value per level) records the
    calibration that turned the observed per-round spread into ``std`` (see
    :func:`depl_fl.tracking.estimation.fit_spread_factors`); the semantics and the
    planner ignore it, the online estimator applies it to the residuals it
    observes. ``None`` means 1 everywhere.
    """

    levels: tuple[float, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    spread_factor: tuple[float, ...] | None = None

    def mean_at(self, loss: np.ndarray | float) -> np.ndarray:
        """Interpolated mean decrease at ``loss`` (clamped outside ``levels``)."""
        return np.interp(loss, self.levels, self.mean)

    def std_at(self, loss: np.ndarray | float) -> np.ndarray:
        """Interpolated standard deviation of the decrease at ``loss``."""
        return np.interp(loss, self.levels, self.std)


@dataclass(frozen=True)
class SwitchProfile:
    """Loss jump Y ~ Normal(mean, std) when switching ``source`` -> ``target``."""

    source: str
    target: str
    mean: float
    std: float


@dataclass(frozen=True)
class LossModel:
    """The loss-evolution parameters l_run and l_sw of the contract."""

    initial: float
    reference_samples: float
    data_exponent_mean: float
    data_exponent_std: float
    run: dict[str, RunProfile]
    switch: dict[tuple[str, str], SwitchProfile]


@dataclass(frozen=True)
class Scenario:
    """A validated scenario; see DESIGN.md section 3 for the semantics."""

    clusters: tuple[Cluster, ...]
    clients: tuple[Client, ...]
    models: tuple[ModelVariant, ...]
    loss: LossModel
    local_epochs: float = 1.0
    version: int = SCENARIO_VERSION
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    # Lookup helpers -------------------------------------------------------
    def cluster(self, cluster_id: str) -> Cluster:
        """Return the cluster with id ``cluster_id`` (KeyError if unknown)."""
        return self._index("clusters")[cluster_id]

    def client(self, client_id: str) -> Client:
        """Return the client with id ``client_id`` (KeyError if unknown)."""
        return self._index("clients")[client_id]

    def model(self, model_id: str) -> ModelVariant:
        """Return the model variant with id ``model_id`` (KeyError if unknown)."""
        return self._index("models")[model_id]

    def _index(self, attr: str) -> dict[str, Any]:
        cache = self.__dict__.setdefault("_indices", {})
        if attr not in cache:
            cache[attr] = {item.id: item for item in getattr(self, attr)}
        return cache[attr]


# ---------------------------------------------------------------------------
# Parsing and validation
# ---------------------------------------------------------------------------
def _require(mapping: Any, key: str, where: str) -> Any:
    if not isinstance(mapping, dict):
        raise ScenarioError(f"{where}: expected an object, got {type(mapping).__name__}")
    if key not in mapping:
        raise ScenarioError(f"{where}.{key}: missing required field")
    return mapping[key]


def _number(value: Any, where: str, *, minimum: float | None = 0.0,
            strict: bool = False, allow_negative: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScenarioError(f"{where}: expected a number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        raise ScenarioError(f"{where}: must be finite, got an integer too large for a float") from None
    if not math.isfinite(number):
        raise ScenarioError(f"{where}: must be finite, got {value!r}")
    if not allow_negative and minimum is not None:
        if strict and number <= minimum:
            raise ScenarioError(f"{where}: must be > {minimum:g}, got {value!r}")
        if not strict and number < minimum:
            raise ScenarioError(f"{where}: must be >= {minimum:g}, got {value!r}")
    return number


def _integer(value: Any, where: str, *, minimum: int) -> int:
    number = _number(value, where, minimum=minimum)
    if number != int(number):
        raise ScenarioError(f"{where}: expected an integer, got {value!r}")
    return int(number)


def _identifier(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ScenarioError(f"{where}: expected a non-empty string id, got {value!r}")
    return value


def _list(value: Any, where: str, *, non_empty: bool = True) -> list[Any]:
    if not isinstance(value, list):
        raise ScenarioError(f"{where}: expected a list, got {type(value).__name__}")
    if non_empty and not value:
        raise ScenarioError(f"{where}: must not be empty")
    return value


def _unique(ids: list[str], where: str) -> None:
    seen: set[str] = set()
    for ident in ids:
        if ident in seen:
            raise ScenarioError(f"{where}: duplicate id {ident!r}")
        seen.add(ident)


def _parse_run_profile(raw: Any, where: str) -> RunProfile:
    levels = [_number(v, f"{where}.levels[{i}]", allow_negative=True)
              for i, v in enumerate(_list(_require(raw, "levels", where), f"{where}.levels"))]
    mean = [_number(v, f"{where}.mean[{i}]", allow_negative=True)
            for i, v in enumerate(_list(_require(raw, "mean", where), f"{where}.mean"))]
    std = [_number(v, f"{where}.std[{i}]")
           for i, v in enumerate(_list(_require(raw, "std", where), f"{where}.std"))]
    if len(mean) != len(levels) or len(std) != len(levels):
        raise ScenarioError(
            f"{where}: levels, mean and std must have the same length "
            f"(got {len(levels)}, {len(mean)}, {len(std)})")
    if any(b <= a for a, b in zip(levels, levels[1:])):
        raise ScenarioError(f"{where}.levels: must be strictly ascending, got {levels}")
    factor = None
    if raw.get("spread_factor") is not None:
        factor = [_number(v, f"{where}.spread_factor[{i}]")
                  for i, v in enumerate(_list(raw["spread_factor"], f"{where}.spread_factor"))]
        if len(factor) != len(levels) or not all(v > 0.0 for v in factor):
            raise ScenarioError(f"{where}.spread_factor: expected {len(levels)} numbers > 0 (one per level), "
                                f"got {factor}")
    return RunProfile(tuple(levels), tuple(mean), tuple(std),
                      tuple(factor) if factor is not None else None)


def scenario_from_dict(raw: Any) -> Scenario:
    """Validate a decoded scenario document and build a :class:`Scenario`.

    Parameters
    ----------
    raw : dict
        The decoded JSON document (contract version 1).

    Returns
    -------
    Scenario
        The validated scenario.

    Raises
    ------
    ScenarioError
        On the first problem found, with a one-line message naming the field.
    """
    if not isinstance(raw, dict):
        raise ScenarioError(f"scenario: expected a JSON object, got {type(raw).__name__}")
    version = raw.get("version", SCENARIO_VERSION)
    if version != SCENARIO_VERSION:
        raise ScenarioError(f"version: unsupported scenario version {version!r} (expected 1)")
    local_epochs = _number(raw.get("local_epochs", 1), "local_epochs", strict=True)

    clusters: list[Cluster] = []
    for ci, craw in enumerate(_list(_require(raw, "clusters", "scenario"), "clusters")):
        where = f"clusters[{ci}]"
        cid = _identifier(_require(craw, "id", where), f"{where}.id")
        levels = []
        for li, lraw in enumerate(_list(_require(craw, "levels", where), f"{where}.levels")):
            lw = f"{where}.levels[{li}]"
            levels.append(Level(
                flops_per_s=_number(_require(lraw, "flops_per_s", lw), f"{lw}.flops_per_s", strict=True),
                joules_per_flop=_number(_require(lraw, "joules_per_flop", lw), f"{lw}.joules_per_flop"),
            ))
        clusters.append(Cluster(
            id=cid,
            levels=tuple(levels),
            bytes_per_s=_number(_require(craw, "bytes_per_s", where), f"{where}.bytes_per_s", strict=True),
            joules_per_byte=_number(craw.get("joules_per_byte", 0.0), f"{where}.joules_per_byte"),
            activation_joules=_number(craw.get("activation_joules", 0.0), f"{where}.activation_joules"),
            max_clients=_integer(craw.get("max_clients", 10**9), f"{where}.max_clients", minimum=1),
        ))
    _unique([c.id for c in clusters], "clusters")
    cluster_ids = {c.id for c in clusters}

    clients: list[Client] = []
    for ki, kraw in enumerate(_list(_require(raw, "clients", "scenario"), "clients")):
        where = f"clients[{ki}]"
        kid = _identifier(_require(kraw, "id", where), f"{where}.id")
        cluster = _identifier(_require(kraw, "cluster", where), f"{where}.cluster")
        if cluster not in cluster_ids:
            raise ScenarioError(f"{where}.cluster: unknown cluster {cluster!r} for client {kid!r}")
        clients.append(Client(kid, cluster, _integer(_require(kraw, "num_samples", where),
                                                     f"{where}.num_samples", minimum=1)))
    _unique([c.id for c in clients], "clients")

    models: list[ModelVariant] = []
    for mi, mraw in enumerate(_list(_require(raw, "models", "scenario"), "models")):
        where = f"models[{mi}]"
        model_id = _identifier(_require(mraw, "id", where), f"{where}.id")
        compression = _number(mraw.get("compression", 0.0), f"{where}.compression")
        if compression >= 1.0:
            raise ScenarioError(f"{where}.compression: must be in [0, 1), got {compression!r}")
        models.append(ModelVariant(
            id=model_id,
            compression=compression,
            flops_per_sample=_number(_require(mraw, "flops_per_sample", where),
                                     f"{where}.flops_per_sample", strict=True),
            size_bytes=_number(_require(mraw, "size_bytes", where), f"{where}.size_bytes"),
        ))
    _unique([m.id for m in models], "models")
    model_ids = {m.id for m in models}

    lraw = _require(raw, "loss", "scenario")
    run_raw = _require(lraw, "run", "loss")
    if not isinstance(run_raw, dict):
        raise ScenarioError(f"loss.run: expected an object keyed by model id, got {type(run_raw).__name__}")
    for key in run_raw:
        if key not in model_ids:
            raise ScenarioError(f"loss.run.{key}: unknown model id {key!r}")
    run: dict[str, RunProfile] = {}
    for model in models:
        if model.id not in run_raw:
            raise ScenarioError(f"loss.run: model {model.id!r} has no loss profile")
        run[model.id] = _parse_run_profile(run_raw[model.id], f"loss.run.{model.id}")

    switch: dict[tuple[str, str], SwitchProfile] = {}
    for si, sraw in enumerate(_list(lraw.get("switch", []), "loss.switch", non_empty=False)):
        where = f"loss.switch[{si}]"
        source = _identifier(_require(sraw, "from", where), f"{where}.from")
        target = _identifier(_require(sraw, "to", where), f"{where}.to")
        for name, ident in (("from", source), ("to", target)):
            if ident not in model_ids:
                raise ScenarioError(f"{where}.{name}: unknown model id {ident!r}")
        if source == target:
            raise ScenarioError(f"{where}: a switch from {source!r} to itself is not a switch")
        if (source, target) in switch:
            raise ScenarioError(f"{where}: duplicate switch {source!r} -> {target!r}")
        switch[(source, target)] = SwitchProfile(
            source, target,
            _number(_require(sraw, "mean", where), f"{where}.mean", allow_negative=True),
            _number(_require(sraw, "std", where), f"{where}.std"),
        )

    total_samples = float(sum(c.num_samples for c in clients))
    loss = LossModel(
        initial=_number(_require(lraw, "initial", "loss"), "loss.initial"),
        reference_samples=_number(lraw.get("reference_samples", total_samples),
                                  "loss.reference_samples", strict=True),
        data_exponent_mean=_number(lraw.get("data_exponent_mean", 0.0), "loss.data_exponent_mean",
                                   allow_negative=True),
        data_exponent_std=_number(lraw.get("data_exponent_std", 0.0), "loss.data_exponent_std",
                                  allow_negative=True),
        run=run,
        switch=switch,
    )
    known = {"version", "local_epochs", "clusters", "clients", "models", "loss"}
    extra = {k: v for k, v in raw.items() if k not in known}
    return Scenario(tuple(clusters), tuple(clients), tuple(models), loss,
                    local_epochs=local_epochs, extra=extra)


def _run_doc(profile: RunProfile) -> dict[str, Any]:
    doc: dict[str, Any] = {"levels": list(profile.levels), "mean": list(profile.mean),
                           "std": list(profile.std)}
    if profile.spread_factor is not None:
        doc["spread_factor"] = list(profile.spread_factor)
    return doc


def scenario_to_dict(scenario: Scenario) -> dict[str, Any]:
    """Serialise a scenario to the contract's JSON structure."""
    doc: dict[str, Any] = dict(scenario.extra)
    doc.update({
        "version": scenario.version,
        "local_epochs": scenario.local_epochs,
        "clusters": [{
            "id": c.id,
            "levels": [{"flops_per_s": lv.flops_per_s, "joules_per_flop": lv.joules_per_flop}
                       for lv in c.levels],
            "bytes_per_s": c.bytes_per_s, "joules_per_byte": c.joules_per_byte,
            "activation_joules": c.activation_joules, "max_clients": c.max_clients,
        } for c in scenario.clusters],
        "clients": [{"id": c.id, "cluster": c.cluster, "num_samples": c.num_samples}
                    for c in scenario.clients],
        "models": [{"id": m.id, "compression": m.compression,
                    "flops_per_sample": m.flops_per_sample, "size_bytes": m.size_bytes}
                   for m in scenario.models],
        "loss": {
            "initial": scenario.loss.initial,
            "reference_samples": scenario.loss.reference_samples,
            "data_exponent_mean": scenario.loss.data_exponent_mean,
            "data_exponent_std": scenario.loss.data_exponent_std,
            "run": {mid: _run_doc(p)
                    for mid, p in scenario.loss.run.items()},
            "switch": [{"from": s.source, "to": s.target, "mean": s.mean, "std": s.std}
                       for s in scenario.loss.switch.values()],
        },
    })
    return doc


def read_json(path: str | Path, what: str) -> Any:
    """Read a JSON file, turning I/O and syntax problems into one-line errors."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{what} {path}: cannot read file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{what} {path}: not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(
            f"{what} {path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        # e.g. integers beyond Python's digit limit, absurdly deep nesting
        reason = str(exc).split(";")[0]
        raise ScenarioError(f"{what} {path}: malformed JSON: {reason}") from None


def load_scenario(path: str | Path) -> Scenario:
    """Load and validate a scenario file (see :func:`scenario_from_dict`)."""
    return scenario_from_dict(read_json(path, "scenario"))


def save_scenario(scenario: Scenario, path: str | Path) -> None:
    """Write ``scenario`` as contract-version-1 JSON."""
    Path(path).write_text(json.dumps(scenario_to_dict(scenario), indent=2) + "\n", encoding="utf-8")
