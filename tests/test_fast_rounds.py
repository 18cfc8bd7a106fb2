"""Round exchange on a deployment grid: replies are seen within a fraction of a second of arriving,
with the semantics of Flower's send_and_receive (error replies kept, partial replies at the timeout)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("flwr")

from types import SimpleNamespace  # noqa: E402

from flwr.superlink.grid.http_grid import HttpGrid  # noqa: E402

from strategies.exchange import send_and_receive  # noqa: E402


class ScriptedGrid(HttpGrid):
    """A deployment grid whose nodes reply ``delays[i]`` seconds after the push (no SuperLink)."""

    def __init__(self, delays: list[float | None], error_at: int | None = None) -> None:  # no super():
        self.delays, self.error_at = delays, error_at  # the real one connects to a SuperLink
        self.pushed: list[SimpleNamespace] = []
        self.pulls = 0
        self.t0 = 0.0

    def push_messages(self, messages):  # noqa: D102
        self.pushed = list(messages)
        self.t0 = time.monotonic()
        return [f"m{i}" for i in range(len(self.pushed))]

    def pull_messages(self, message_ids):  # noqa: D102
        self.pulls += 1
        now = time.monotonic() - self.t0
        return [_reply(mid, error=int(mid[1:]) == self.error_at) for mid in sorted(message_ids)
                if self.delays[int(mid[1:])] is not None and now >= self.delays[int(mid[1:])]]


def _reply(mid: str, error: bool = False) -> SimpleNamespace:
    """What the exchange reads of a reply: the message it answers (plus, here, the node and an error)."""
    return SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=mid), node=int(mid[1:]),
                           has_error=lambda: error)


def _messages(n: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(dst_node_id=i + 1) for i in range(n)]


def test_replies_are_seen_within_a_poll_of_the_last_arrival():
    grid = ScriptedGrid([0.3, 0.6, 0.9])
    t0 = time.monotonic()
    replies = send_and_receive(grid, _messages(3), timeout=30, poll_s=0.05)
    took = time.monotonic() - t0
    assert sorted(r.node for r in replies) == [0, 1, 2]
    # Flower's own loop asks every 3 s: the last reply (0.9 s) would be seen at 3 s.
    assert 0.9 <= took < 1.5, took
    assert grid.pulls >= 10


def test_error_replies_are_returned_like_any_reply():
    grid = ScriptedGrid([0.1, 0.2], error_at=1)
    replies = send_and_receive(grid, _messages(2), timeout=30, poll_s=0.05)
    assert len(replies) == 2 and sum(r.has_error() for r in replies) == 1


def test_timeout_returns_the_replies_in_by_then():
    grid = ScriptedGrid([0.1, None])
    t0 = time.monotonic()
    replies = send_and_receive(grid, _messages(2), timeout=0.6, poll_s=0.05)
    assert [r.node for r in replies] == [0]
    assert 0.55 <= time.monotonic() - t0 < 1.5


def test_other_grids_keep_their_own_send_and_receive():
    class Plain:
        def __init__(self) -> None:
            self.calls = []

        def send_and_receive(self, messages, *, timeout=None):
            self.calls.append(timeout)
            return iter(["reply"])

    grid = Plain()
    assert send_and_receive(grid, _messages(1), timeout=7.0) == ["reply"]
    assert grid.calls == [7.0]


# ---------------------------------------------------------------------------
# The server's work between two rounds
# ---------------------------------------------------------------------------
def test_validation_loss_alone_equals_the_full_evaluations_loss():
    pytest.importorskip("torch")
    from depl_fl.runs.runconfig import compose_config
    from depl_fl.task.local_update import initial_state
    from depl_fl.task.partitions import geometry
    from strategies.depl_strategy import state_to_arrays
    from strategies.server_app import make_evaluate_fn

    cfg = compose_config(["seed=3"])
    evaluate = make_evaluate_fn(cfg)
    arrays = state_to_arrays(initial_state(geometry(cfg), seed=3))
    for compression in (0.0, 0.5):
        full = float(evaluate(1, arrays, compression)["loss"])
        assert evaluate.validation_loss(arrays, compression) == full


def _counting(make_evaluate_fn, calls: dict[str, int]):
    """``make_evaluate_fn`` whose evaluations count themselves into ``calls`` (full / validation)."""
    def make(cfg):
        inner = make_evaluate_fn(cfg)

        def evaluate(server_round, arrays, compression=0.0):
            calls["full"] += 1
            return inner(server_round, arrays, compression)

        def validation_loss(arrays, compression=0.0):
            calls["validation"] += 1
            return inner.validation_loss(arrays, compression)

        evaluate.validation_loss = validation_loss
        return evaluate
    return make


def _counts_after_each_exploration_round(checkpointer, calls: dict[str, int], seen: list[dict[str, int]]):
    """``_checkpointer`` that also notes ``calls`` after every exploration round."""
    def make(cfg, out_dir, clock):
        write = checkpointer(cfg, out_dir, clock)

        def on_round(strategy, arrays, loss):
            if strategy.controller is None and strategy.profiler.records:
                seen.append(dict(calls))
            write(strategy, arrays, loss)
        return on_round
    return make


def test_exploration_rounds_evaluate_each_variant_once_and_groups_on_validation(tmp_path, monkeypatch):
    """Per exploration round: one full evaluation per variant (the merged model, for the record),
    the groups' aggregates on the validation split only, and no group start evaluated twice."""
    pytest.importorskip("torch")
    import json
    from pathlib import Path

    import strategies.server_app as server_app
    from clients.client_app import make_client_app
    from depl_fl.runs.runconfig import compose_config
    from strategies.inprocess_grid import InProcessGrid

    cfg = compose_config(["simulation=inprocess", "num_clients=3", "profile.explore.rounds=3",
                          "profile.explore.stop_when_met=false",
                          "profile.explore.stop_loss_factor=null", "profile.explore.switch_rounds=[3]",
                          "profile.explore.min_points_per_level=2", "target.loss=0.9", "target.prob=0.6",
                          "target.max_rounds=4", "tracking.enabled=false", "output.plot=false",
                          f"profile.cache_dir={tmp_path / 'cache'}"])
    calls, seen = {"full": 0, "validation": 0}, []
    monkeypatch.setattr(server_app, "make_evaluate_fn", _counting(server_app.make_evaluate_fn, calls))
    monkeypatch.setattr(server_app, "_checkpointer",
                        _counts_after_each_exploration_round(server_app._checkpointer, calls, seen))
    doc = json.loads(Path(server_app.run_server(InProcessGrid(make_client_app(cfg), 3), cfg,
                                                tmp_path / "job")).read_text())
    profile = [r for r in doc["rounds"] if r["phase"] == "profile"]
    assert len(profile) == 3 and len(seen) == 3
    variants = 2
    # Before round 1: the fresh model, once per variant; then every round the same again.
    assert [d["full"] for d in seen] == [variants * (k + 2) for k in range(3)]
    # The groups: their aggregates (two groups a round) and, only in the switch round, the
    # starts silenced to another variant; a start that is the global model is never re-evaluated.
    silenced = sum(1 for g in profile[2]["groups"] if g["switch_from"] == "p50")
    assert [d["validation"] for d in seen] == [2, 4, 6 + silenced]
    for prev, rec in zip(profile, profile[1:], strict=False):
        for group in rec["groups"]:
            source = group["switch_from"] or group["model"]
            assert group["loss_before"] == pytest.approx(prev["losses"][source], rel=1e-6)
    for rec in profile:
        assert set(rec["steps_s"]) >= {"exchange", "evaluate_groups", "evaluate", "write"}
        # wall_s is read after the evaluate mark and before the record mark (steps rounded to ms).
        steps = rec["steps_s"]
        before = steps["exchange"] + steps["evaluate_groups"] + steps["evaluate"]
        assert before - 0.002 <= rec["wall_s"] <= before + steps["record"] + 0.002


# ---------------------------------------------------------------------------
# The benchmark's figures
# ---------------------------------------------------------------------------
def _bench():
    from tests.benchmark_scripts import load_benchmark

    return load_benchmark("deploy_round_bench")


def test_benchmark_ratios_steps_and_verdicts_per_phase():
    import argparse

    bench = _bench()
    minimal = [[6.3, 6.4, 9.3], [6.2, 6.3]]
    explore = [[{"phase": "profile", "wall_s": w, "steps_s": {"exchange": w - 0.2, "evaluate": 0.2,
                                                             "write": 0.05}} for w in (6.5, 6.6, 6.7)]]
    train = [[{"phase": "train", "wall_s": w, "steps_s": {"exchange": w - 0.1, "write": 0.04}}
              for w in (9.4, 9.5)]]
    fig = bench.summarize(minimal, {"DepL": {"exploration": explore, "training": train}})
    assert fig["minimal"]["median_s"] == 6.3 and fig["minimal"]["rounds"] == 5
    assert fig["DepL"]["exploration"]["ratio"] == pytest.approx(6.6 / 6.3)
    assert fig["DepL"]["training"]["ratio"] == pytest.approx(9.45 / 6.3)
    assert fig["DepL"]["exploration"]["steps_median_s"] == pytest.approx(
        {"exchange": 6.4, "evaluate": 0.2, "write": 0.05})
    args = argparse.Namespace(argv=["--repeats", "1"], nodes=3, repeats=1, rounds=3)
    text = bench.report(fig, args, ["method=full"], ("0.5 / 0.4 / 0.3", "0.9 / 0.5 / 0.3"), 1.1)
    assert "exploration 1.05x (met)" in text and "training 1.50x (NOT met)" in text
    assert "load averages 0.5 / 0.4 / 0.3 before" in text and "`method=full`" in text
    assert "between rounds: write 0.050" in text


def test_arrivals_say_when_each_reply_was_seen():
    grid = ScriptedGrid([0.2, 0.7])
    arrivals: dict[str, float] = {}
    send_and_receive(grid, _messages(2), timeout=30, poll_s=0.05, arrivals=arrivals)
    assert set(arrivals) == {"m0", "m1"}
    assert 0.2 <= arrivals["m0"] < 0.45 and 0.7 <= arrivals["m1"] < 0.95, arrivals
