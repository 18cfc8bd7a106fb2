"""Scenario model (docs/FORMATS.md, contract versions 1 and 2): load, validate, save.

A scenario describes the clusters (with their resource levels), the clients
(data holders), the model variants (full and compressed) and the loss-evolution
profile used by the planner. Every validation failure raises
:class:`ScenarioError` with one line naming the field and the problem.

Version 2 (docs/CONTRACT_V2.md) adds optional fields: the clients' label
histograms, the loss's label-coverage fields (``label_shares``,
``coverage_threshold``, ``coverage_floor_loss``, ``min_coverage``,
``max_uncovered``, ``set_shift``), the judged loss's ``judged_error`` and ``eval_dof``
and each run profile's ``eval_std``. A version-1 file ignores them (they are extras there), so it
keeps exactly its meaning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from depl_fl.contract.coverage import DEFAULT_COVERAGE_THRESHOLD, pooled_histogram
from depl_fl.contract.schema import (
    Count,
    Finite,
    Ident,
    NonNegative,
    OpenSchema,
    Positive,
    Schema,
    field_path,
    invalid,
    parse,
)
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
    label_histogram: tuple[float, ...] | None = None


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

    ``eval_std`` (version 2, one value per level, ``None`` = 0 everywhere) is
    the part of ``std`` that does not accumulate over rounds (the round-to-round
    oscillation of the trained model around its trend): the walk's per-round
    spread is ``sqrt(std**2 - 2 eval_std**2)`` and the final loss adds one draw
    of it, both scaled by ``r**-b`` like ``std`` (docs/CONTRACT_V2.md).
    """

    levels: tuple[float, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    spread_factor: tuple[float, ...] | None = None
    eval_std: tuple[float, ...] | None = None

    def mean_at(self, loss: np.ndarray | float) -> np.ndarray:
        """Interpolated mean decrease at ``loss`` (clamped outside ``levels``)."""
        return np.interp(loss, self.levels, self.mean)

    def std_at(self, loss: np.ndarray | float) -> np.ndarray:
        """Interpolated standard deviation of the decrease at ``loss``."""
        return np.interp(loss, self.levels, self.std)

    def eval_std_at(self, loss: np.ndarray | float) -> np.ndarray:
        """Interpolated evaluation-noise std at ``loss`` (0 without ``eval_std``)."""
        if self.eval_std is None:
            return np.zeros_like(np.asarray(loss, dtype=float))
        return np.interp(loss, self.levels, self.eval_std)

    def walk_std_at(self, loss: np.ndarray | float) -> np.ndarray:
        """Per-round spread of the random walk: ``sqrt(std**2 - 2 eval_std**2)`` at ``loss``."""
        std = self.std_at(loss)
        if self.eval_std is None:
            return std
        return np.sqrt(np.maximum(std * std - 2.0 * self.eval_std_at(loss) ** 2, 0.0))


@dataclass(frozen=True)
class SwitchProfile:
    """Loss jump Y ~ Normal(mean, std) when switching ``source`` -> ``target``."""

    source: str
    target: str
    mean: float
    std: float


@dataclass(frozen=True)
class SetShift:
    """Loss jump when a round's client set differs from the one the model last trained on (version 2).

    ``Y = (1 - c_S) * Normal(mean, std)``: per unit of the new set's label
    coverage gap, so a set with the reference label shares (``c_S = 1``)
    pays nothing (docs/CONTRACT_V2.md).
    """

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
    # Version 2 (label coverage); the defaults are the version-1 meaning.
    label_shares: tuple[float, ...] | None = None
    coverage_threshold: float = DEFAULT_COVERAGE_THRESHOLD
    coverage_floor_loss: float | None = None
    min_coverage: float | None = None
    max_uncovered: float | None = None
    set_shift: SetShift | None = None
    #: Version 2: the judged loss adds ``Normal(0, judged_error * L_K)`` (None: nothing).
    judged_error: float | None = None
    #: Version 2: the final ``eval_std`` draw is Student-t with these degrees of freedom (None: normal).
    eval_dof: float | None = None


@dataclass(frozen=True)
class Scenario:
    """A validated scenario; see docs/FORMATS.md for the semantics."""

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
# Parsing and validation: the pydantic schema of contract version 1
# ---------------------------------------------------------------------------
class _LevelDoc(Schema):
    flops_per_s: Positive
    joules_per_flop: NonNegative


class _ClusterDoc(Schema):
    id: Ident
    levels: Annotated[list[_LevelDoc], Field(min_length=1)]
    bytes_per_s: Positive
    joules_per_byte: NonNegative = 0.0
    activation_joules: NonNegative = 0.0
    max_clients: Count = 10**9


class _ClientDoc(Schema):
    id: Ident
    cluster: Ident
    num_samples: Count


class _ModelDoc(Schema):
    id: Ident
    compression: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, lt=1)] = 0.0
    flops_per_sample: Positive
    size_bytes: NonNegative


#: Largest round time (s) or energy (J) of one client: sums over rounds stay finite.
MAGNITUDE_LIMIT = 1e200
#: Largest magnitude of a loss value (initial loss, levels, mean and std of a change).
LOSS_LIMIT = 1e6
#: Largest factor ``(samples / reference_samples) ** exponent`` over the possible sets.
SCALE_LIMIT = 1e100

_LossValue = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-LOSS_LIMIT, le=LOSS_LIMIT)]
_LossSpread = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=LOSS_LIMIT)]


class _RunDoc(Schema):
    levels: Annotated[list[_LossValue], Field(min_length=1)]
    mean: Annotated[list[_LossValue], Field(min_length=1)]
    std: Annotated[list[_LossSpread], Field(min_length=1)]
    spread_factor: list[Positive] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> _RunDoc:
        n = len(self.levels)
        if len(self.mean) != n or len(self.std) != n:
            raise invalid(f"levels, mean and std must have the same length "
                          f"(got {n}, {len(self.mean)}, {len(self.std)})")
        if any(b <= a for a, b in zip(self.levels, self.levels[1:], strict=False)):
            raise invalid(f"must be strictly ascending, got {self.levels}", "levels")
        if self.spread_factor is not None and len(self.spread_factor) != n:
            raise invalid(f"expected {n} numbers > 0 (one per level), got {len(self.spread_factor)}",
                          "spread_factor")
        return self


class _SwitchDoc(Schema):
    source: Annotated[Ident, Field(alias="from")]
    target: Annotated[Ident, Field(alias="to")]
    mean: _LossValue
    std: _LossSpread

    @model_validator(mode="after")
    def _not_to_itself(self) -> _SwitchDoc:
        if self.source == self.target:
            raise invalid(f"a switch from {self.source!r} to itself is not a switch")
        return self


class _LossDoc(Schema):
    initial: _LossSpread
    reference_samples: Positive | None = None
    data_exponent_mean: Finite = 0.0
    data_exponent_std: Finite = 0.0
    run: dict[str, _RunDoc]
    switch: list[_SwitchDoc] = []


class _ScenarioDoc(OpenSchema):
    version: Literal[1, 2] = SCENARIO_VERSION
    local_epochs: Positive = 1.0
    clusters: Annotated[list[_ClusterDoc], Field(min_length=1)]
    clients: Annotated[list[_ClientDoc], Field(min_length=1)]
    models: Annotated[list[_ModelDoc], Field(min_length=1)]
    loss: _LossDoc

    @model_validator(mode="after")
    def _references(self) -> _ScenarioDoc:
        self._check_all()
        return self

    def _check_all(self) -> None:
        for name in ("clusters", "clients", "models"):
            _check_unique([item.id for item in getattr(self, name)], name)
        cluster_ids = {c.id for c in self.clusters}
        for i, client in enumerate(self.clients):
            if client.cluster not in cluster_ids:
                raise invalid(f"unknown cluster {client.cluster!r} for client {client.id!r}",
                              "clients", i, "cluster")
        _check_loss_ids(self.loss, [m.id for m in self.models])
        _check_magnitudes(self)
        _check_data_scale(self)


# ---------------------------------------------------------------------------
# Version 2: label coverage and evaluation noise (docs/CONTRACT_V2.md)
# ---------------------------------------------------------------------------
_Counts = Annotated[list[NonNegative], Field(min_length=1)]
_Fraction = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=1)]


def _not_all_zero(values: list[float] | None, name: str) -> None:
    if values is not None and sum(values) <= 0:
        raise invalid("counts must not all be 0", name)


class _ClientDocV2(_ClientDoc):
    label_histogram: _Counts | None = None

    @model_validator(mode="after")
    def _some_samples(self) -> _ClientDocV2:
        _not_all_zero(self.label_histogram, "label_histogram")
        return self


class _RunDocV2(_RunDoc):
    eval_std: list[_LossSpread] | None = None

    @model_validator(mode="after")
    def _eval_within_std(self) -> _RunDocV2:
        if self.eval_std is None:
            return self
        n = len(self.levels)
        if len(self.eval_std) != n:
            raise invalid(f"expected {n} numbers >= 0 (one per level), got {len(self.eval_std)}",
                          "eval_std")
        for i, (ev, sd) in enumerate(zip(self.eval_std, self.std, strict=True)):
            if 2.0 * ev * ev > sd * sd * (1.0 + 1e-12):
                raise invalid(f"2 * eval_std**2 must be <= std**2 at every level, got eval_std "
                              f"{ev:g} with std {sd:g} at level {i}", "eval_std")
        return self

    def eval_values(self) -> tuple[float, ...] | None:
        """``eval_std`` as a tuple (None when absent)."""
        return None if self.eval_std is None else tuple(self.eval_std)


class _SetShiftDoc(Schema):
    mean: _LossValue
    std: _LossSpread


class _LossDocV2(_LossDoc):
    run: dict[str, _RunDocV2]
    set_shift: _SetShiftDoc | None = None
    label_shares: _Counts | None = None
    coverage_threshold: _Fraction = DEFAULT_COVERAGE_THRESHOLD
    coverage_floor_loss: _LossSpread | None = None
    min_coverage: _Fraction | None = None
    max_uncovered: _Fraction | None = None
    judged_error: _LossSpread | None = None
    eval_dof: Annotated[float, Field(strict=True, allow_inf_nan=False, gt=2, le=1e6)] | None = None

    @model_validator(mode="after")
    def _some_share(self) -> _LossDocV2:
        _not_all_zero(self.label_shares, "label_shares")
        return self


class _ScenarioDocV2(_ScenarioDoc):
    version: Literal[2]
    clients: Annotated[list[_ClientDocV2], Field(min_length=1)]
    loss: _LossDocV2

    def _check_all(self) -> None:
        self._same_classes()
        super()._check_all()

    def _same_classes(self) -> None:
        sizes = [(("clients", i, "label_histogram"), len(c.label_histogram))
                 for i, c in enumerate(self.clients) if c.label_histogram is not None]
        if self.loss.label_shares is not None:
            sizes.insert(0, (("loss", "label_shares"), len(self.loss.label_shares)))
        for where, size in sizes[1:]:
            if size != sizes[0][1]:
                first = field_path(sizes[0][0])
                raise invalid(f"has {size} classes, {first} has {sizes[0][1]}", *where)


def _check_unique(ids: list[str], where: str) -> None:
    seen: set[str] = set()
    for ident in ids:
        if ident in seen:
            raise invalid(f"duplicate id {ident!r}", where)
        seen.add(ident)


def _check_loss_ids(loss: _LossDoc, model_ids: list[str]) -> None:
    for key in loss.run:
        if key not in model_ids:
            raise invalid(f"unknown model id {key!r}", "loss", "run", key)
    for model_id in model_ids:
        if model_id not in loss.run:
            raise invalid(f"model {model_id!r} has no loss profile", "loss", "run")
    pairs: set[tuple[str, str]] = set()
    for i, sw in enumerate(loss.switch):
        for name, ident in (("from", sw.source), ("to", sw.target)):
            if ident not in model_ids:
                raise invalid(f"unknown model id {ident!r}", "loss", "switch", i, name)
        if (sw.source, sw.target) in pairs:
            raise invalid(f"duplicate switch {sw.source!r} -> {sw.target!r}", "loss", "switch", i)
        pairs.add((sw.source, sw.target))


def _check_magnitudes(doc: _ScenarioDoc) -> None:
    """Every client's round time and energy must stay below :data:`MAGNITUDE_LIMIT`.

    The fields are finite one by one; their products (work = epochs x samples x
    FLOPs per sample, then time and energy) may still overflow, e.g. with
    ``flops_per_s: 1e-308``, and sums over rounds need headroom. Such a
    scenario has no meaning, so it is refused naming the field where it happens.
    """
    work = doc.local_epochs * max(m.flops_per_sample for m in doc.models)
    size = 2.0 * max(m.size_bytes for m in doc.models)
    for ci, cluster in enumerate(doc.clusters):
        samples = max((k.num_samples for k in doc.clients if k.cluster == cluster.id), default=0)
        w = work * samples
        checks = [((size / cluster.bytes_per_s, size * cluster.joules_per_byte), ("bytes_per_s",)),
                  ((cluster.activation_joules,), ("activation_joules",))]
        checks += [((w, w / lv.flops_per_s, w * lv.joules_per_flop), ("levels", li))
                   for li, lv in enumerate(cluster.levels)]
        for figures, where in checks:
            if not all(abs(f) <= MAGNITUDE_LIMIT for f in figures):
                raise invalid(f"out of range: a client's round time or energy exceeds {MAGNITUDE_LIMIT:g} "
                              "(seconds or joules)", "clusters", ci, *where)


def _check_data_scale(doc: _ScenarioDoc) -> None:
    """``r ** a`` and ``r ** -b`` must stay within [1/SCALE_LIMIT, SCALE_LIMIT] for every set.

    ``r`` ranges from the smallest client's share to all clients' share of
    ``reference_samples``; beyond that range of factors the loss semantics only
    produce overflows (infinite or NaN losses), so the exponents are refused.
    """
    total = float(sum(k.num_samples for k in doc.clients))
    reference = doc.loss.reference_samples or total
    smallest, largest = _sample_range(doc)
    shares = (smallest / reference, largest / reference)
    for name, power in (("data_exponent_mean", doc.loss.data_exponent_mean),
                        ("data_exponent_std", -doc.loss.data_exponent_std)):
        with np.errstate(all="ignore"):
            factors = np.power(np.asarray(shares, dtype=float), power)
        if not np.all((factors <= SCALE_LIMIT) & (factors >= 1.0 / SCALE_LIMIT)):
            raise invalid(f"out of range: (samples / reference_samples) ** exponent (version 2: samples "
                          "times the set's label coverage) must stay within "
                          f"[1e-100, 1e100] for every client set, got {power!r} with samples / "
                          f"reference_samples in [{shares[0]:.3g}, {shares[1]:.3g}]", "loss", name)


def _sample_range(doc: _ScenarioDoc) -> tuple[float, float]:
    """Least and largest (effective) sample total of a client set.

    Version 2 scales a covered set's samples by its coverage ``c_S``; ``c_S
    n_S = sum_k min(n_S[k], q_k n_S)`` grows with the set, so a single client
    gives the least and the set of all clients the largest value.
    """
    sizes = [float(k.num_samples) for k in doc.clients]
    total = sum(sizes)
    values = [min(sizes), total]
    if isinstance(doc, _ScenarioDocV2):
        hists = [k.label_histogram for k in doc.clients if k.label_histogram is not None]
        if hists:
            q = (np.asarray(doc.loss.label_shares, dtype=float) if doc.loss.label_shares is not None
                 else pooled_histogram(hists))
            q = q / q.sum()
            effective = [float(np.minimum(np.asarray(k.label_histogram) / sum(k.label_histogram), q).sum())
                         * k.num_samples for k in doc.clients if k.label_histogram is not None]
            if len(hists) == len(sizes):
                effective.append(float(np.minimum(pooled_histogram(hists) / sum(map(sum, hists)),
                                                  q).sum()) * total)
            values += effective
    return min(values), max(values)


def _to_loss(doc: _LossDoc, clients: tuple[Client, ...]) -> LossModel:
    v2 = isinstance(doc, _LossDocV2)
    run = {mid: RunProfile(tuple(p.levels), tuple(p.mean), tuple(p.std),
                           tuple(p.spread_factor) if p.spread_factor is not None else None,
                           p.eval_values() if isinstance(p, _RunDocV2) else None)
           for mid, p in doc.run.items()}
    switch = {(s.source, s.target): SwitchProfile(s.source, s.target, s.mean, s.std)
              for s in doc.switch}
    total_samples = sum(k.num_samples for k in clients)
    reference = doc.reference_samples if doc.reference_samples is not None else float(total_samples)
    coverage: dict[str, Any] = {}
    if v2:
        coverage = {"label_shares": _reference_shares(doc, clients),
                    "coverage_threshold": doc.coverage_threshold,
                    "coverage_floor_loss": doc.coverage_floor_loss,
                    "min_coverage": doc.min_coverage, "max_uncovered": doc.max_uncovered,
                    "set_shift": (SetShift(doc.set_shift.mean, doc.set_shift.std)
                                  if doc.set_shift is not None else None),
                    "judged_error": doc.judged_error, "eval_dof": doc.eval_dof}
    return LossModel(initial=doc.initial, reference_samples=reference,
                     data_exponent_mean=doc.data_exponent_mean,
                     data_exponent_std=doc.data_exponent_std, run=run, switch=switch, **coverage)


def _reference_shares(doc: _LossDocV2, clients: tuple[Client, ...]) -> tuple[float, ...] | None:
    """``loss.label_shares``, normalised; default the pooled histogram of the clients that have one."""
    if doc.label_shares is not None:
        raw = np.asarray(doc.label_shares, dtype=float)
    else:
        hists = [c.label_histogram for c in clients if c.label_histogram is not None]
        if not hists:
            return None
        raw = pooled_histogram(hists)
    return tuple(float(v) for v in raw / raw.sum())


def scenario_from_dict(raw: Any) -> Scenario:
    """Validate a decoded scenario document and build a :class:`Scenario`.

    Parameters
    ----------
    raw : dict
        The decoded JSON document (contract version 1 or 2).

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
    doc = parse(_ScenarioDocV2 if raw.get("version") == 2 else _ScenarioDoc, raw)
    clusters = tuple(Cluster(c.id, tuple(Level(lv.flops_per_s, lv.joules_per_flop) for lv in c.levels),
                             c.bytes_per_s, c.joules_per_byte, c.activation_joules, c.max_clients)
                     for c in doc.clusters)
    clients = tuple(Client(k.id, k.cluster, k.num_samples, _histogram(k)) for k in doc.clients)
    models = tuple(ModelVariant(m.id, m.compression, m.flops_per_sample, m.size_bytes)
                   for m in doc.models)
    loss = _to_loss(doc.loss, clients)
    return Scenario(clusters, clients, models, loss, local_epochs=doc.local_epochs,
                    version=doc.version, extra=dict(doc.model_extra or {}))


def _histogram(client: _ClientDoc) -> tuple[float, ...] | None:
    hist = getattr(client, "label_histogram", None)
    return None if hist is None else tuple(float(v) for v in hist)


def _number_doc(value: float) -> float | int:
    """Counts that are whole numbers are written back as integers."""
    return int(value) if float(value).is_integer() and abs(value) < 2**53 else value


def _client_doc(client: Client) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": client.id, "cluster": client.cluster, "num_samples": client.num_samples}
    if client.label_histogram is not None:
        doc["label_histogram"] = [_number_doc(v) for v in client.label_histogram]
    return doc


def _coverage_doc(loss: LossModel) -> dict[str, Any]:
    """The version-2 coverage fields of ``loss`` that are set."""
    doc: dict[str, Any] = {}
    if loss.label_shares is not None:
        doc["label_shares"] = list(loss.label_shares)
        doc["coverage_threshold"] = loss.coverage_threshold
    for key in ("coverage_floor_loss", "min_coverage", "max_uncovered", "judged_error", "eval_dof"):
        if getattr(loss, key) is not None:
            doc[key] = getattr(loss, key)
    if loss.set_shift is not None:
        doc["set_shift"] = {"mean": loss.set_shift.mean, "std": loss.set_shift.std}
    return doc


def _run_doc(profile: RunProfile) -> dict[str, Any]:
    doc: dict[str, Any] = {"levels": list(profile.levels), "mean": list(profile.mean),
                           "std": list(profile.std)}
    if profile.spread_factor is not None:
        doc["spread_factor"] = list(profile.spread_factor)
    if profile.eval_std is not None:
        doc["eval_std"] = list(profile.eval_std)
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
        "clients": [_client_doc(c) for c in scenario.clients],
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
            **(_coverage_doc(scenario.loss) if scenario.version >= 2 else {}),
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
    """Write ``scenario`` as contract JSON of its version."""
    Path(path).write_text(json.dumps(scenario_to_dict(scenario), indent=2) + "\n", encoding="utf-8")
