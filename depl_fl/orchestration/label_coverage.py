"""Label coverage of the client sets a job trains on, from the nodes' label histograms.

A thin adapter from the queried node properties (``num-samples``,
``label-histogram``) to the pure maths of :mod:`depl_fl.contract.coverage`
(docs/CONTRACT_V2.md): the coverage ``c_S`` and uncovered share ``u_S`` of a
set, its effective data ratio ``r_eff = c_S * r`` (what the profile fit and the
tracker use as a round's sample fraction) and the range of coverage the
profile was measured on (``min_coverage`` / ``max_uncovered``). When some
node reports no histogram every set keeps the version-1 meaning
(``r_eff = r``, no bounds).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from depl_fl.contract.coverage import (
    DEFAULT_COVERAGE_THRESHOLD,
    measured_bounds,
    pooled_histogram,
    set_coverage,
    shares,
)


class LabelCoverage:
    """Coverage of client sets of one federation.

    Parameters
    ----------
    properties : mapping
        Client id -> queried properties (``num-samples``, optional ``label-histogram``).
    threshold : float, optional
        ``loss.coverage_threshold`` (default 0.1).
    """

    def __init__(self, properties: Mapping[str, Mapping[str, Any]], threshold: float | None = None) -> None:
        self.samples = {cid: int(p["num-samples"]) for cid, p in properties.items()}
        self.total = float(sum(self.samples.values()))
        hists = {cid: [float(v) for v in p["label-histogram"]]
                 for cid, p in properties.items() if p.get("label-histogram")}
        complete = bool(hists) and len(hists) == len(properties)
        self.histograms: dict[str, list[float]] = hists if complete else {}
        self.reference = shares(pooled_histogram(hists.values())) if complete else None
        self.threshold = float(DEFAULT_COVERAGE_THRESHOLD if threshold is None else threshold)

    @classmethod
    def of_config(cls, cfg: Mapping[str, Any], properties: Mapping[str, Mapping[str, Any]]) -> LabelCoverage:
        """Coverage with ``profile.coverage_threshold`` of ``cfg``."""
        return cls(properties, (cfg.get("profile") or {}).get("coverage_threshold"))

    def of(self, clients: Sequence[str]) -> tuple[float, float] | None:
        """``(c_S, u_S)`` of ``clients``; None without histograms (version-1 meaning)."""
        if self.reference is None:
            return None
        return set_coverage(tuple(clients), self.histograms, self.reference, self.threshold)

    def factor(self, clients: Sequence[str]) -> float:
        """``c_S`` (1 without histograms): ``r_eff = factor * r``."""
        cov = self.of(clients)
        return 1.0 if cov is None else cov[0]

    def effective_ratio(self, clients: Sequence[str]) -> float:
        """``r_eff = c_S * n_S / n_all`` of ``clients`` (``r`` without histograms)."""
        return self.factor(clients) * sum(self.samples[c] for c in clients) / self.total

    def record(self, clients: Sequence[str]) -> dict[str, float | None]:
        """``{"coverage", "uncovered"}`` of a set, for a round record."""
        cov = self.of(clients)
        return {"coverage": None if cov is None else cov[0], "uncovered": None if cov is None else cov[1]}

    def bounds(self, sets: Iterable[Sequence[str]]) -> dict[str, float]:
        """``{"min_coverage", "max_uncovered"}`` over the profile's client sets (empty without histograms)."""
        sets = [tuple(s) for s in sets if s]
        if self.reference is None or not sets:
            return {}
        low, high = measured_bounds(sets, self.histograms, self.reference, self.threshold)
        return {"min_coverage": float(low), "max_uncovered": float(high)}
