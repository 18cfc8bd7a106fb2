"""Logging: one logger hierarchy under ``depl_fl``, shown by one handler; no spurious Flower warnings."""

from __future__ import annotations

import ast
import io
import logging
from pathlib import Path

import pytest

from depl_fl.console import ROOT_LOGGER, log_to

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("depl_fl", "strategies", "clients")


def _logger_names(path: Path) -> list[str]:
    """The first argument of every ``logging.getLogger(...)`` call, as source text."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "getLogger" and node.args):
            names.append(ast.unparse(node.args[0]))
    return names


def test_every_project_logger_is_under_depl_fl() -> None:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for name in _logger_names(path):
                found[f"{path.relative_to(ROOT)}: {name}"] = name
    assert found, "no logger found: the scan is broken"
    bad = []
    for where, name in found.items():
        in_core = where.startswith("depl_fl/")
        ok = (name in (repr(ROOT_LOGGER), "ROOT_LOGGER") or name.startswith(f"'{ROOT_LOGGER}.")
              or (name == "__name__" and in_core)
              or (name in ("'flwr'", "'alembic'") and where.startswith("depl_fl/console.py")))
        if not ok:
            bad.append(where)
    assert not bad, f"loggers outside the depl_fl hierarchy: {bad}"


def test_log_to_shows_every_depl_fl_logger(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger(ROOT_LOGGER)
    monkeypatch.setattr(root, "handlers", [h for h in root.handlers if not getattr(h, "_depl", False)])
    monkeypatch.setattr(root, "propagate", root.propagate)
    monkeypatch.setattr(root, "level", root.level)
    stream = io.StringIO()
    log_to(stream)
    log_to(io.StringIO())  # idempotent: no second handler
    for name in ("depl_fl.controller", "depl_fl.server", "depl_fl.profiling"):
        logging.getLogger(name).info("hello from %s", name)
    lines = stream.getvalue().splitlines()
    assert lines == [f"[depl] hello from {n}" for n in ("depl_fl.controller", "depl_fl.server",
                                                          "depl_fl.profiling")]


def test_strategy_construction_logs_no_flower_warning() -> None:
    pytest.importorskip("flwr")
    from depl_fl.contract.plan import Targets
    from strategies.depl_strategy import DepLStrategy

    records: list[logging.LogRecord] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = _Keep(level=logging.DEBUG)
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(handler)
    try:
        strategy = DepLStrategy(network=None, arch="digits_cnn", targets=Targets(0.3, 0.9, 100.0),
                                scenario_fn=lambda props: None, plan_fn=None, num_clients=3,
                                train_settings={})
    finally:
        flwr_logger.removeHandler(handler)
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []
    # Federated evaluation stays off (the server evaluates centrally).
    assert strategy.fraction_evaluate == 0.0 and strategy.min_evaluate_nodes == 0


def test_an_inprocess_job_logs_its_results_line_as_a_ray_job_does(tmp_path: Path, monkeypatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    import strategies.server_app
    from depl_fl.main import run_job
    from depl_fl.runs.runconfig import compose_config

    written = tmp_path / "results.json"
    monkeypatch.setattr(strategies.server_app, "run_server", lambda grid, cfg, out_dir: written)
    cfg = compose_config(["simulation=inprocess", "num_clients=2"])
    with caplog.at_level(logging.INFO, logger=ROOT_LOGGER):
        assert run_job(cfg, tmp_path) == written
    assert f"results: {written}" in [r.getMessage() for r in caplog.records]


def test_a_slow_step_is_announced_once_and_a_fast_one_not_at_all() -> None:
    import threading

    from depl_fl.console import notice_if_slow

    said: list[str] = []
    announced = threading.Event()

    def say(line: str) -> None:
        said.append(line)
        announced.set()

    with notice_if_slow(say, "still planning", after_s=0.01):
        assert announced.wait(timeout=30), "the notice never came while the block ran"
    with notice_if_slow(say, "fast step", after_s=3600):
        pass
    assert said == ["still planning"]
