"""``depl-fl report SWEEP_DIR [--out DIR]``: summarise a sweep of federated runs.

Scans ``SWEEP_DIR`` (typically a Hydra multirun folder) recursively for
``results.json`` files.  Each must hold a ``summary`` object with

* ``method`` (str), ``final_loss``, ``target_loss``, ``target_prob`` and
  ``cost_j`` (numbers; ``cost_joules`` is accepted for ``cost_j``);
* optionally ``profile_energy_j`` (what the job paid for its loss profile;
  0 when it reused a cached one) and the ``profile`` block's ``cache_file``
  and ``cost_when_made.energy_j`` (for the amortised figure);
* optionally ``final_test_loss`` (the loss on the test split no decision read;
  when the summary has it, it is the loss every figure judges, else
  ``final_loss``, the validation loss of older results, is used and the group
  says so in ``loss_split``), ``tracking`` (bool: online tracking was on), ``seed``,
  ``deadline_s``, ``time_s`` (modelled learning time), ``wall_s``
  (measured wall time) and ``met`` (ignored: success is recomputed as
  ``final_loss <= target_loss`` so every method is judged the same way; a
  missing, null or non-finite final loss, e.g. a diverged run, counts as a
  failure and is counted under "no final loss", never dropped).

Runs are grouped by ``(method, target_loss, target_prob, deadline_s)`` (runs
of different deadlines are never pooled; a missing deadline is its own group), where a run with
online tracking on is labelled ``<method>+tracking``, so a sweep can compare a
static plan with the same planner re-planning online.  Per group the
report gives the number of runs, the achieved probability
``P[final_loss <= target_loss]`` with its 95% Wilson score interval, whether
it reaches ``target_prob``, the calibration (the empirical
``target_prob``-quantile of the final losses divided by ``target_loss``: 1.0 is
exact, below 1 over-cautious, above 1 the promise is broken; see
:func:`calibration`) with a seeded 95% bootstrap interval, the mean and 95th percentile (numpy's linear
interpolation) of the training energy (``cost_j``), its ratio to DepL's mean
training energy at the same targets (``depl+tracking`` if present, else
``depl``), the mean profiling energy and the mean **total** energy (training +
profiling) with its ratio to DepL's, the **amortised** total (training plus
every distinct profile the group used, counted once at what it cost when
made, per run), and the mean learning time.  It writes ``report.md``,
``report.json``, ``final_loss_cdf.png`` (one panel per target pair, one
empirical CDF per method, target marked) and ``energy.png`` into ``--out``
(default: ``SWEEP_DIR``) and prints the table and the paths.

Input problems: a missing folder, a folder without any ``results.json``, or
one where no ``results.json`` is usable is a one-line :class:`ReportError`
(exit status 2).  A malformed ``results.json`` next to good ones is skipped
with a one-line warning on stderr and listed with its reason under
``skipped`` in ``report.json`` and ``report.md``, so that one crashed run does not hide a whole sweep;
so is a run that did not finish (``summary.status`` running or interrupted: its last
loss is not a final one). A run stopped before its plan (infeasible, failed) counts as a
failure.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import binomtest

from depl_fl.console import OneLineParser, parse_or_status
from depl_fl.contract.semantics import empirical_quantile
from depl_fl.errors import DeplError

PROG = "depl-fl report"
RESULTS_NAME = "results.json"
#: Methods listed first, in this order; others follow alphabetically.
METHOD_ORDER = ("depl", "expectation", "optimum", "full")


#: Printed under the table in report.md.
LEGEND = ("Losses are final test losses (a split no decision read) where the runs recorded them. "
          "Calibration = empirical π-quantile of the final losses / L* (1.0 exact, < 1 over-cautious, "
          "> 1 the promise is broken), with a seeded 95% percentile-bootstrap interval.")


#: ``summary.status`` of a run still running or stopped by Ctrl-C/SIGTERM: skipped, with the reason.
UNFINISHED = ("running", "interrupted")


class ReportError(DeplError):
    """The sweep folder cannot be reported on (exit status 2)."""


@dataclass(frozen=True)
class RunResult:
    """The summary of one federated run."""

    path: str
    method: str
    target_loss: float
    target_prob: float
    final_loss: float
    cost_j: float
    seed: Any = None
    time_s: float | None = None
    wall_s: float | None = None
    deadline_s: float | None = None
    #: Which split ``final_loss`` was measured on: ``test`` (summary.final_test_loss) or
    #: ``validation`` (results files without a test loss).
    loss_split: str = "validation"
    profile_energy_j: float = 0.0
    profile_file: str | None = None
    profile_made_j: float | None = None

    @property
    def total_j(self) -> float:
        """Training plus this job's profiling energy."""
        return self.cost_j + self.profile_energy_j

    @property
    def met(self) -> bool:
        """Whether the run reached the target loss (NaN/inf losses never do)."""
        return bool(self.final_loss <= self.target_loss)


# ---------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------
def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion.

    Parameters
    ----------
    successes, n : int
        Number of successes and of trials (``n >= 1``).
    confidence : float
        Two-sided confidence level.

    Returns
    -------
    (float, float)
        Lower and upper bound, within [0, 1].
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval: need 0 <= successes <= n and n >= 1, got {successes}/{n}")
    interval = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(interval.low), float(interval.high)


def calibration(losses: Sequence[float], prob: float, target_loss: float, confidence: float = 0.95,
                seed: int = 0, n_resamples: int = 2000) -> tuple[float, float | None, float | None]:
    """Calibration ``q_prob(final losses) / target_loss`` with a percentile bootstrap interval.

    Parameters
    ----------
    losses : sequence of float
        Final (test) losses of the runs of one group.
    prob, target_loss : float
        pi and L* of the group (``target_loss > 0``).
    confidence : float
        Two-sided level of the interval.
    seed : int
        Seed of the bootstrap resampling (equal seeds, equal intervals).
    n_resamples : int
        Bootstrap resamples.

    Returns
    -------
    (float, float or None, float or None)
        The calibration (1.0: the pi-quantile sits exactly on the target;
        below 1: over-cautious; +inf when more than ``1 - prob`` of the runs
        have no finite final loss) and its interval (None with fewer than two runs).
    """
    from scipy.stats import bootstrap

    data = np.asarray(losses, dtype=float)
    value = float(empirical_quantile(data, prob)) / target_loss
    if data.size < 2:
        return value, None, None
    with np.errstate(invalid="ignore"):  # diverged runs (inf) make scipy's spread check warn
        res = bootstrap((data,), lambda x, axis: empirical_quantile(x, prob, axis=axis) / target_loss,
                        confidence_level=confidence, n_resamples=n_resamples, method="percentile",
                        rng=np.random.default_rng(seed), vectorized=True)
    ci = res.confidence_interval
    return value, float(ci.low), float(ci.high)


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------
def _number(summary: dict[str, Any], key: str, *, finite: bool = True,
            optional: bool = False) -> float | None:
    if key not in summary or summary[key] is None:
        if optional:
            return None
        raise ValueError(f"summary.{key} is missing")
    value = summary[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"summary.{key} must be a number, got {value!r}")
    if finite and not math.isfinite(value):
        raise ValueError(f"summary.{key} must be finite, got {value!r}")
    return float(value)


def _finished_summary(doc: Any) -> dict[str, Any]:
    """The ``summary`` of a finished run (``ValueError`` when missing or the run did not finish)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("summary"), dict):
        raise ValueError("no 'summary' object")
    summary = doc["summary"]
    if summary.get("status") in UNFINISHED:  # its last loss is not a final loss: neither met nor missed
        raise ValueError(f"summary.status is {summary['status']}: the run did not finish "
                         "(resume it with resume=true, or move it out of the sweep)")
    return summary


def parse_result(doc: Any, path: str) -> RunResult:
    """Validate one decoded ``results.json`` (``ValueError`` with the reason if malformed)."""
    summary = _finished_summary(doc)
    method = summary.get("method")
    if not isinstance(method, str) or not method:
        raise ValueError(f"summary.method must be a non-empty string, got {method!r}")
    tracking = summary.get("tracking", False)
    if not isinstance(tracking, bool):
        raise ValueError(f"summary.tracking must be true or false, got {tracking!r}")
    if tracking:
        method = f"{method}+tracking"
    if "cost_j" not in summary and "cost_joules" in summary:
        summary = {**summary, "cost_j": summary["cost_joules"]}
    target_loss = _number(summary, "target_loss")
    target_prob = _number(summary, "target_prob")
    cost = _number(summary, "cost_j")
    assert target_loss is not None and target_prob is not None and cost is not None
    if target_loss < 0:
        raise ValueError(f"summary.target_loss must be >= 0, got {target_loss!r}")
    if not 0.0 < target_prob < 1.0:
        raise ValueError(f"summary.target_prob must be in (0, 1), got {target_prob!r}")
    if cost < 0:
        raise ValueError(f"summary.cost_j must be >= 0, got {cost!r}")
    # Judged on the test split where the run recorded one (summary.met_on says so).
    split = "test" if "final_test_loss" in summary and summary.get("met_on") != "validation" \
        else "validation"
    profile = doc.get("profile") if isinstance(doc.get("profile"), dict) else {}
    made = profile.get("cost_when_made") if isinstance(profile.get("cost_when_made"), dict) else {}
    # A run without a final loss (diverged: NaN is written as null) is a failure, not a gap.
    final_loss = _number(summary, "final_test_loss" if split == "test" else "final_loss",
                         finite=False, optional=True)
    if summary.get("status") in ("infeasible", "failed"):  # stopped before its plan: a failure
        final_loss = None
    return RunResult(path=path, method=method, target_loss=target_loss, target_prob=target_prob,
                     final_loss=math.inf if final_loss is None else final_loss, cost_j=cost,
                     seed=summary.get("seed"), time_s=_number(summary, "time_s", optional=True),
                     wall_s=_number(summary, "wall_s", optional=True),
                     deadline_s=_number(summary, "deadline_s", optional=True), loss_split=split,
                     profile_energy_j=_number(summary, "profile_energy_j", optional=True) or 0.0,
                     profile_file=_text_or_none(profile.get("cache_file")),
                     profile_made_j=_number(made, "energy_j", optional=True))


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def load_results(sweep_dir: str | Path) -> tuple[list[RunResult], list[dict[str, str]]]:
    """Find and parse every ``results.json`` under ``sweep_dir``.

    Returns
    -------
    (list of RunResult, list of dict)
        The usable runs (sorted by path) and the skipped files as
        ``{"path", "reason"}``.

    Raises
    ------
    ReportError
        Folder missing, no ``results.json`` at all, or none usable.
    """
    root = Path(sweep_dir)
    if not root.is_dir():
        raise ReportError(f"sweep folder {root}: not found or not a directory")
    files = sorted(p for p in root.rglob(RESULTS_NAME) if p.is_file())
    if not files:
        raise ReportError(f"sweep folder {root}: no {RESULTS_NAME} found")
    runs: list[RunResult] = []
    skipped: list[dict[str, str]] = []
    for path in files:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            runs.append(parse_result(doc, str(path)))
        except (OSError, UnicodeDecodeError, RecursionError) as exc:
            skipped.append({"path": str(path), "reason": f"cannot read ({type(exc).__name__})"})
        except json.JSONDecodeError as exc:
            skipped.append({"path": str(path),
                            "reason": f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"})
        except ValueError as exc:
            skipped.append({"path": str(path), "reason": str(exc)})
    if not runs:
        raise ReportError(f"sweep folder {root}: none of the {len(files)} {RESULTS_NAME} files is usable "
                          f"(first problem: {skipped[0]['path']}: {skipped[0]['reason']})")
    return runs, skipped


# ---------------------------------------------------------------------------
# Aggregation
# ---------------------------------------------------------------------------
def _method_key(method: str) -> tuple[int, str]:
    base = method.split("+", 1)[0]
    return (METHOD_ORDER.index(base) if base in METHOD_ORDER else len(METHOD_ORDER), method)


def _mean_or_none(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def amortised_energy(members: Sequence[RunResult]) -> float:
    """Mean energy per run when every distinct profile is paid once (at its cost when made)."""
    made: dict[str, float] = {}
    unshared = 0.0
    for r in members:
        if r.profile_file is None:
            unshared += r.profile_energy_j
        else:
            cost = r.profile_made_j if r.profile_made_j is not None else r.profile_energy_j
            made[r.profile_file] = max(made.get(r.profile_file, 0.0), cost)
    return (sum(r.cost_j for r in members) + unshared + sum(made.values())) / len(members)


def _energy_figures(members: Sequence[RunResult]) -> dict[str, Any]:
    costs = np.array([r.cost_j for r in members])
    totals = np.array([r.total_j for r in members])
    return {"energy_mean_j": float(costs.mean()), "energy_p95_j": float(np.percentile(costs, 95)),
            "profile_energy_mean_j": float(np.mean([r.profile_energy_j for r in members])),
            "total_energy_mean_j": float(totals.mean()),
            "total_energy_p95_j": float(np.percentile(totals, 95)),
            "amortised_energy_mean_j": amortised_energy(members)}


def _group_key(run: RunResult) -> tuple[str, float, float, float]:
    # Runs of different deadlines answer different questions: never pooled (missing = inf).
    return (run.method, run.target_loss, run.target_prob,
            math.inf if run.deadline_s is None else run.deadline_s)


def summarise(runs: Sequence[RunResult], confidence: float = 0.95) -> list[dict[str, Any]]:
    """Per ``(method, target_loss, target_prob, deadline_s)`` figures, sorted by targets then method."""
    groups: dict[tuple[str, float, float, float], list[RunResult]] = {}
    for run in runs:
        groups.setdefault(_group_key(run), []).append(run)
    rows = []
    for (method, target_loss, target_prob, deadline), members in groups.items():
        n = len(members)
        successes = sum(r.met for r in members)
        low, high = wilson_interval(successes, n, confidence)
        calib = calibration([r.final_loss for r in members], target_prob, target_loss, confidence) \
            if target_loss > 0 else (None, None, None)
        splits = sorted({r.loss_split for r in members})
        rows.append({
            "method": method, "target_loss": target_loss, "target_prob": target_prob,
            "deadline_s": None if math.isinf(deadline) else deadline,
            "runs": n, "successes": successes, "probability": successes / n,
            "no_final_loss": sum(not math.isfinite(r.final_loss) for r in members),
            "wilson_low": low, "wilson_high": high, "guarantee_met": successes / n >= target_prob,
            "calibration": calib[0], "calibration_low": calib[1], "calibration_high": calib[2],
            "loss_split": splits[0] if len(splits) == 1 else "mixed",
            **_energy_figures(members), "energy_vs_depl": None, "total_vs_depl": None,
            "time_mean_s": _mean_or_none([r.time_s for r in members]),
            "wall_mean_s": _mean_or_none([r.wall_s for r in members]),
            "time_runs": sum(r.time_s is not None for r in members),
            "wall_runs": sum(r.wall_s is not None for r in members),
        })
    # The reference is DepL as it runs by default (with tracking), else static DepL.
    reference = {_targets_of(r): r
                 for r in sorted(rows, key=lambda r: r["method"] == "depl+tracking")
                 if r["method"] in ("depl", "depl+tracking")}
    for row in rows:
        base = reference.get(_targets_of(row))
        if base and base["energy_mean_j"]:
            row["energy_vs_depl"] = row["energy_mean_j"] / base["energy_mean_j"]
        if base and base["total_energy_mean_j"]:
            row["total_vs_depl"] = row["total_energy_mean_j"] / base["total_energy_mean_j"]
    rows.sort(key=lambda r: (r["target_loss"], r["target_prob"], _deadline_order(r["deadline_s"]),
                             _method_key(r["method"])))
    return rows


def _deadline_order(deadline: float | None) -> float:
    return math.inf if deadline is None else deadline


def _targets_of(row: dict[str, Any]) -> tuple[float, float, float | None]:
    return (row["target_loss"], row["target_prob"], row["deadline_s"])


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------
def _fmt(value: float | None, spec: str = ".4g") -> str:
    return "n/a" if value is None else format(value, spec)


def _interval(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The report's markdown table, one line per group."""
    header = ("| method | L* | π | deadline (s) | runs | no final loss | P[L ≤ L*] | 95% Wilson | P ≥ π "
              "| calibration | 95% bootstrap | training energy (J) | profiling energy (J) "
              "| total energy (J) | amortised total (J) | p95 total (J) | training / DepL | total / DepL "
              "| mean time (s) | mean wall (s) |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['method']} | {r['target_loss']:g} | {r['target_prob']:g} | {_fmt(r['deadline_s'], 'g')} "
            f"| {r['runs']} | {r['no_final_loss']} "
            f"| {r['probability']:.3f} | [{r['wilson_low']:.3f}, {r['wilson_high']:.3f}] "
            f"| {'yes' if r['guarantee_met'] else 'no'} | {_fmt(r['calibration'], '.3f')} "
            f"| {_interval(r['calibration_low'], r['calibration_high'])} | {_fmt(r['energy_mean_j'])} "
            f"| {_fmt(r['profile_energy_mean_j'])} | {_fmt(r['total_energy_mean_j'])} "
            f"| {_fmt(r['amortised_energy_mean_j'])} | {_fmt(r['total_energy_p95_j'])} "
            f"| {_fmt(r['energy_vs_depl'], '.3f')} | {_fmt(r['total_vs_depl'], '.3f')} "
            f"| {_fmt(r['time_mean_s'])} | {_fmt(r['wall_mean_s'])} |")
    return "\n".join(lines)


def _target_groups(runs: Sequence[RunResult]) -> list[tuple[float, float, float]]:
    return sorted({_group_key(r)[1:] for r in runs})


def plot_final_loss_cdf(runs: Sequence[RunResult], path: Path) -> None:
    """Empirical CDF of the final loss per method, one panel per target pair."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = _target_groups(runs)
    fig, axes = plt.subplots(1, len(targets), figsize=(5 * len(targets), 4), squeeze=False)
    for ax, (target_loss, target_prob, deadline) in zip(axes[0], targets, strict=False):
        members = [r for r in runs if _group_key(r)[1:] == (target_loss, target_prob, deadline)]
        for method in sorted({r.method for r in members}, key=_method_key):
            losses = np.sort([r.final_loss for r in members if r.method == method])
            ys = np.arange(1, len(losses) + 1) / len(losses)
            finite = np.isfinite(losses)  # diverged runs keep the curve below 1
            xs = losses[finite]
            if xs.size:
                ax.step(np.r_[xs[0], xs], np.r_[0.0, ys[finite]], where="post", label=method)
        ax.axvline(target_loss, color="k", linestyle="--", linewidth=1, label=f"L* = {target_loss:g}")
        ax.axhline(target_prob, color="gray", linestyle=":", linewidth=1, label=f"π = {target_prob:g}")
        ax.set_xlabel("final loss (test split where recorded)")
        ax.set_ylabel("P[final loss ≤ x]")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"L* = {target_loss:g}, π = {target_prob:g}, deadline {deadline:g} s")
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_energy(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Bars of mean energy per method and target pair, with the 95th percentile marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = sorted({_targets_of(r) for r in rows}, key=lambda t: (t[0], t[1], _deadline_order(t[2])))
    methods = sorted({r["method"] for r in rows}, key=_method_key)
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.5 * len(targets) * len(methods)), 4))
    for mi, method in enumerate(methods):
        xs, means, p95 = [], [], []
        for ti, target in enumerate(targets):
            row = next((r for r in rows if r["method"] == method and _targets_of(r) == target), None)
            if row is not None:
                xs.append(ti + (mi - (len(methods) - 1) / 2) * width)
                means.append(row["energy_mean_j"])
                p95.append(row["energy_p95_j"])
        ax.bar(xs, means, width=width, label=method)
        ax.scatter(xs, p95, marker="_", s=300, color="k", zorder=3)
    ax.set_xticks(range(len(targets)))
    ax.set_xticklabels([f"L*={tl:g}\nπ={tp:g}\nT={_fmt(dl, 'g')}" for tl, tp, dl in targets])
    ax.set_ylabel("energy per run (J): bar = mean, tick = p95")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report_markdown(sweep_dir: str | Path, runs: Sequence[RunResult], skipped: Sequence[dict[str, str]],
                    table: str) -> str:
    """``report.md``: the table, then every skipped file and why."""
    text = (f"# DepL sweep report\n\n{len(runs)} runs from {sweep_dir}"
            f"{f', {len(skipped)} skipped' if skipped else ''}. Runs without a final loss "
            f"(diverged) count as failures.\n\n{table}\n\n{LEGEND}\n")
    if skipped:
        text += "\n## Skipped files\n\n" + "".join(f"- `{s['path']}`: {s['reason']}\n" for s in skipped)
    return text


def _json_safe(value: Any) -> Any:
    """``value`` with non-finite floats (an infinite calibration) as None, for strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def build_report(sweep_dir: str | Path, out_dir: str | Path | None = None) -> dict[str, Any]:
    """Load a sweep, aggregate it and write ``report.md``, ``report.json`` and the plots.

    Parameters
    ----------
    sweep_dir : path
        Folder scanned recursively for ``results.json``.
    out_dir : path, optional
        Where to write (created if needed); default ``sweep_dir``.

    Returns
    -------
    dict
        The ``report.json`` document (``groups``, ``skipped``, ``files``, ...)
        plus ``"table"``, the markdown table.
    """
    runs, skipped = load_results(sweep_dir)
    out = Path(out_dir) if out_dir is not None else Path(sweep_dir)
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportError(f"--out {out}: cannot create directory ({exc.strerror or exc})") from None
    rows = summarise(runs)
    table = markdown_table(rows)
    files = {"markdown": out / "report.md", "json": out / "report.json",
             "final_loss_cdf": out / "final_loss_cdf.png", "energy": out / "energy.png"}
    doc = {
        "sweep_dir": str(sweep_dir), "runs": len(runs), "confidence": 0.95,
        "groups": rows, "skipped": skipped,
        "files": {k: str(v) for k, v in files.items()},
    }
    try:
        files["markdown"].write_text(report_markdown(sweep_dir, runs, skipped, table), encoding="utf-8")
        files["json"].write_text(json.dumps(_json_safe(doc), indent=2, allow_nan=False) + "\n",
                                 encoding="utf-8")
        plot_final_loss_cdf(runs, files["final_loss_cdf"])
        plot_energy(rows, files["energy"])
    except OSError as exc:
        raise ReportError(f"--out {out}: cannot write report ({exc.strerror or exc})") from None
    return {**doc, "table": table}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``depl-fl report``; returns the exit status.

    :class:`ReportError` propagates (the ``depl-fl`` CLI prints it as one line
    and exits 2); bad options print one line and return 2.
    """
    parser = OneLineParser(prog=PROG, description="Summarise a sweep of runs (results.json files).")
    parser.add_argument("sweep_dir", metavar="SWEEP_DIR", help="folder scanned recursively for results.json")
    parser.add_argument("--out", metavar="DIR", default=None, help="output folder (default: SWEEP_DIR)")
    args = parse_or_status(parser, argv)
    if isinstance(args, int):
        return args
    report = build_report(args.sweep_dir, args.out)
    for item in report["skipped"]:
        print(f"{PROG}: warning: skipped {item['path']}: {item['reason']}", file=sys.stderr)
    print(report["table"])
    for path in report["files"].values():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    try:
        sys.exit(main())
    except DeplError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        sys.exit(error.exit_status)
