"""The server runs its job with a one-thread BLAS pool (idle pool threads spin and burn CPU)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")
threadpoolctl = pytest.importorskip("threadpoolctl")

import strategies.server_app as server_app  # noqa: E402


def _blas_threads() -> list[int]:
    np.ones((4, 4)) @ np.ones((4, 4))  # numpy's BLAS is loaded
    return [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]


def test_the_server_job_runs_with_one_blas_thread_and_restores_the_pool_after():
    before = _blas_threads()
    assert before
    with server_app.server_blas_threads():
        assert _blas_threads() == [server_app.SERVER_BLAS_THREADS] * len(before)
    assert _blas_threads() == before


def test_run_server_starts_the_strategy_inside_the_limit(monkeypatch, tmp_path):
    seen: list[list[int]] = []

    class Stop(Exception):
        pass

    class Strategy:
        resumed_from = None

        def start(self, *args, **kwargs):
            seen.append(_blas_threads())
            raise Stop

    monkeypatch.setattr(server_app, "build_strategy", lambda *a, **k: Strategy())
    monkeypatch.setattr(server_app, "make_evaluate_fn", lambda cfg: None)
    from depl_fl.runs.runconfig import compose_config

    with pytest.raises(Stop):
        server_app.run_server(None, compose_config([]), tmp_path)
    assert seen and set(seen[0]) == {server_app.SERVER_BLAS_THREADS}
