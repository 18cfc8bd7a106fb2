"""Real federation: node-local folders, federated profiling through the grid, honest accounting."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from flwr.app import ConfigRecord, Message, MessageType, RecordDict  # noqa: E402

import depl_fl.task.data as data_mod  # noqa: E402
import depl_fl.task.folder_data as folder_mod  # noqa: E402
import depl_fl.task.partitions as partitions_mod  # noqa: E402
from clients.client_app import make_client_app  # noqa: E402
from depl_fl.orchestration.exploration import (  # noqa: E402
    sizes_by_cost,
    split_groups,
    write_json_atomic,
)
from depl_fl.orchestration.profiling import federated_key  # noqa: E402
from depl_fl.runs.report import build_report  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.folder_data import read_folder, write_folder  # noqa: E402
from depl_fl.task.split import split_dataset  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.server_app import run_server  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
N = 3
JOB = ["simulation=inprocess", f"num_clients={N}", "profile.explore.rounds=3",
       "profile.explore.stop_loss_factor=null", "profile.explore.stop_when_met=false",
       "profile.explore.switch_rounds=[3]", "profile.explore.min_points_per_level=2", "target.loss=0.7",
       "target.prob=0.6", "target.max_rounds=8", "tracking.enabled=false", "planner.mc_trajectories=20000",
       "output.plot=false"]


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("split") / "digits"
    split_dataset("digits", N, out, alpha=0.5, seed=0)
    return out


def _png_count(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("*.png"))


# ---------------------------------------------------------------------------
# Folders
# ---------------------------------------------------------------------------
def test_split_writes_every_training_sample_once_and_the_test_set(split):
    doc = json.loads((split / "split.json").read_text())
    counts = [_png_count(split / f"node-{i}") for i in range(N)]
    assert counts == [n["num-samples"] for n in doc["nodes"]]
    assert sum(counts) == 1437 and _png_count(split / "test") == 360 == doc["test_samples"]
    for i in range(N):  # every class folder exists everywhere, so every reader infers the same classes
        assert sorted(p.name for p in (split / f"node-{i}").iterdir()) == [str(c) for c in range(10)]


def test_split_refuses_a_non_empty_folder_in_one_line(split):
    proc = subprocess.run([sys.executable, "-m", "depl_fl.cli", "split", "--dataset", "digits",
                           "--num-clients", "3", "--out", str(split)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "--out" in proc.stderr


def test_folder_infers_classes_and_shape(tmp_path):
    rng = np.random.default_rng(0)
    rgb = rng.random((5, 3, 6, 6))
    write_folder(tmp_path / "rgb", rgb, np.array([1, 0, 1, 1, 0]), ["dog", "cat", "zebra"])
    data = read_folder(tmp_path / "rgb")
    assert data.classes == ("cat", "dog", "zebra")  # sorted by folder name, the empty one kept
    assert (data.in_channels, data.image_size, data.x.shape) == (3, 6, (5, 3, 6, 6))
    assert data.label_counts() == [3, 2, 0]  # written label 1 = "cat" x3, label 0 = "dog" x2
    gray = rng.random((4, 1, 8, 8))
    write_folder(tmp_path / "gray", gray, np.array([0, 1, 1, 0]), ["0", "1"])
    back = read_folder(tmp_path / "gray")
    assert (back.in_channels, back.image_size, back.num_classes) == (1, 8, 2)
    np.testing.assert_allclose(np.sort(back.x.ravel()), np.sort(gray.ravel()), atol=1 / 255)


def test_folder_errors_name_the_setting(tmp_path):
    with pytest.raises(data_mod.DataError, match="data-dir"):
        read_folder(tmp_path / "missing")
    (tmp_path / "empty" / "a").mkdir(parents=True)
    with pytest.raises(data_mod.DataError, match="no image"):
        read_folder(tmp_path / "empty")


# ---------------------------------------------------------------------------
# Client: its own folder only
# ---------------------------------------------------------------------------
def _forbid_central_data(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("the bundled dataset must not be opened")

    # partitions is imported above, before either patch: imported under the first one it would
    # bind ``boom`` as its own load_dataset and keep it after the undo.
    monkeypatch.setattr(partitions_mod, "load_dataset", boom)
    monkeypatch.setattr(data_mod, "load_dataset", boom)


def test_client_reads_only_its_data_dir_and_reports_true_count(split, monkeypatch):
    _forbid_central_data(monkeypatch)
    opened = []
    real = folder_mod._read_cached

    def spy(path, classes, field):
        opened.append(Path(path))
        return real(path, classes, field)

    monkeypatch.setattr(folder_mod, "_read_cached", spy)
    # The ClientApp gets the server's overrides, test_dir included, and must not open it.
    cfg = compose_config(["dataset=folder", f"dataset.test_dir={split / 'nowhere'}", f"num_clients={N}"])
    grid = InProcessGrid(make_client_app(cfg), N, node_configs=[{"data-dir": str(split / f"node-{i}")}
                                                                for i in range(N)])
    for i, node in enumerate(grid.get_node_ids()):
        msg = Message(RecordDict({"config": ConfigRecord({"server-round": 0})}), dst_node_id=node,
                      message_type=MessageType.QUERY)
        (reply,) = grid.send_and_receive([msg])
        assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
        props = reply.content["properties"]
        labels = [int(p.parent.name) for p in (split / f"node-{i}").rglob("*.png")]
        assert props["num-samples"] == len(labels)
        assert list(props["label-histogram"]) == np.bincount(labels, minlength=10).tolist()
    assert set(opened) == {split / f"node-{i}" for i in range(N)}


def test_folder_client_without_data_dir_fails_clearly(split):
    cfg = compose_config(["dataset=folder", f"dataset.test_dir={split / 'test'}", f"num_clients={N}"])
    grid = InProcessGrid(make_client_app(cfg), 1)
    msg = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=next(iter(grid.get_node_ids())),
                  message_type=MessageType.QUERY)
    (reply,) = grid.send_and_receive([msg])
    assert reply.has_error() and "data-dir" in reply.error.reason


# ---------------------------------------------------------------------------
# A job whose server has no training data at all
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def folder_job(split, tmp_path_factory):
    """Three jobs on the same per-node folders sharing a profile cache: one profiles, one reuses, one
    (``profile.force``) explores again."""
    tmp = tmp_path_factory.mktemp("job")
    cfg = compose_config(["dataset=folder", f"dataset.test_dir={split / 'test'}",
                          f"profile.cache_dir={tmp / 'cache'}", *JOB])
    mp = pytest.MonkeyPatch()
    _forbid_central_data(mp)
    opened: list[tuple[str, Path]] = []
    real = folder_mod._read_cached

    def spy(path, classes, field):
        opened.append((field, Path(path)))
        return real(path, classes, field)

    mp.setattr(folder_mod, "_read_cached", spy)
    try:
        docs = []
        forced = {**cfg, "profile": {**cfg["profile"], "force": True}}
        # The forced job's folder lies outside ``tmp``, whose report reads the first two.
        jobs = (("first", cfg, tmp / "first"), ("second", cfg, tmp / "second"),
                ("forced", forced, tmp_path_factory.mktemp("forced")))
        for _, job_cfg, out in jobs:
            grid = InProcessGrid(make_client_app(job_cfg), N,
                                 node_configs=[{"data-dir": str(split / f"node-{i}")} for i in range(N)])
            path = run_server(grid, job_cfg, out)
            docs.append(json.loads(Path(path).read_text()))
    finally:
        mp.undo()
    return docs, opened, tmp, split


def test_server_without_training_data_completes_with_federated_profiling(folder_job):
    (first, *_), opened, _, split = folder_job
    server_reads = {p for field, p in opened if field == "dataset.test_dir"}
    client_reads = {p for field, p in opened if field != "dataset.test_dir"}
    assert server_reads == {split / "test"}
    assert client_reads == {split / f"node-{i}" for i in range(N)}
    phases = [r["phase"] for r in first["rounds"]]
    assert phases[:3] == ["profile"] * 3 and set(phases[3:]) == {"train"} and len(phases) > 3
    assert [r["round"] for r in first["rounds"]] == list(range(1, len(phases) + 1))
    # Exploration rounds ran on the clients: every one trained two disjoint groups.
    for r in first["rounds"][:3]:
        groups = [set(g["clients"]) for g in r["groups"]]
        assert len(groups) == 2 and not groups[0] & groups[1] and r["replied"] == r["clients"]
    # The job continued from the exploration model (not from a fresh one).
    assert first["summary"]["initial_loss"] < first["rounds"][0]["loss_before"]
    assert first["scenario"]["loss"]["initial"] == pytest.approx(first["rounds"][2]["loss"])


def test_profile_energy_is_the_sum_of_the_profile_rounds(folder_job):
    (first, *_), *_ = folder_job
    s = first["summary"]
    profile = [r for r in first["rounds"] if r["phase"] == "profile"]
    train = [r for r in first["rounds"] if r["phase"] == "train"]
    assert s["profile_rounds"] == len(profile) == 3 and s["rounds"] == len(train)
    assert s["profile_energy_j"] == pytest.approx(sum(r["energy_j"] for r in profile))
    assert s["profile_energy_j"] > 0
    assert s["cost_j"] == pytest.approx(sum(r["energy_j"] for r in train))
    assert s["total_energy_j"] == pytest.approx(s["cost_j"] + s["profile_energy_j"])
    assert s["profile_time_s"] == pytest.approx(sum(r["round_time_s"] for r in profile))
    assert s["profile_reused"] is False and first["profile"]["source"] == "federated"
    # Profiling time counts against the deadline: the plan had only what was left.
    left = first["config"]["target"]["deadline_s"] - s["profile_time_s"]
    assert first["plan"]["predicted"]["time_s"] <= left


def test_a_reused_profile_is_recorded_with_its_cost_when_made(folder_job):
    (first, second, _), *_ = folder_job
    s = second["summary"]
    assert s["profile_reused"] is True and s["profile_energy_j"] == 0 and s["profile_rounds"] == 0
    assert all(r["phase"] == "train" for r in second["rounds"])
    assert s["total_energy_j"] == pytest.approx(s["cost_j"])
    made = second["profile"]["cost_when_made"]
    assert made["energy_j"] == pytest.approx(first["summary"]["profile_energy_j"])
    assert made["rounds"] == 3


def test_a_forced_profile_explores_again_beside_a_cached_one(folder_job):
    (first, _, forced), *_ = folder_job
    s = forced["summary"]
    assert s["profile_reused"] is False and s["profile_rounds"] == first["summary"]["profile_rounds"] == 3
    assert forced["profile"]["cache_file"] == first["profile"]["cache_file"]


def test_report_totals_with_and_without_profiling(folder_job):
    (first, second, _), _, tmp, _ = folder_job
    report = build_report(tmp, tmp / "report")
    (row,) = report["groups"]
    assert row["runs"] == 2
    costs = [d["summary"]["cost_j"] for d in (first, second)]
    assert row["energy_mean_j"] == pytest.approx(sum(costs) / 2)
    assert row["total_energy_mean_j"] == pytest.approx(
        (first["summary"]["total_energy_j"] + second["summary"]["total_energy_j"]) / 2)
    # Amortised: the one profile both jobs used is paid once.
    assert row["amortised_energy_mean_j"] == pytest.approx(row["total_energy_mean_j"])
    assert row["profile_energy_mean_j"] == pytest.approx(first["summary"]["profile_energy_j"] / 2)
    assert "total energy (J)" in report["table"] and "training energy (J)" in report["table"]


def test_switch_rounds_start_every_group_from_the_global_model(folder_job):
    (first, *_), *_ = folder_job
    before, switch = first["rounds"][1], first["rounds"][2]   # profile.explore.switch_rounds=[3]
    assert {g["model"] for g in switch["groups"]} == {"full", "p50"}
    for group in switch["groups"]:
        # A switch from the other variant, measured from the global model that variant was evaluated as.
        assert group["switch_from"] not in (None, group["model"])
        assert group["loss_before"] == pytest.approx(before["losses"][group["switch_from"]])


def test_profile_records_coverage_bounds_and_evaluation_noise(folder_job):
    from depl_fl.contract.coverage import measured_bounds, pooled_histogram, shares

    (first, *_), *_ = folder_job
    profile = [r for r in first["rounds"] if r["phase"] == "profile"]
    cache = json.loads(Path(first["profile"]["cache_file"]).read_text())
    hists = {cid: hist for cid, _, _, hist in cache["profile"]["data"]}   # what the nodes reported
    assert len(hists) == N and all(hists.values())
    reference = shares(pooled_histogram(hists.values()))
    sets = [g["clients"] for r in profile for g in r["groups"]] + [r["replied"] for r in profile]
    low, high = measured_bounds(sets, hists, reference)
    for r in profile:
        for g in r["groups"]:
            assert 0.0 < g["coverage"] <= 1.0 and 0.0 <= g["uncovered"] < 1.0
    cached = cache["loss"]
    assert cached["min_coverage"] == pytest.approx(low) and 0.0 <= high
    assert low < 1.0  # the groups are proper subsets of a non-IID federation
    # The plan regime (tracking/learning_curve.py): a set that leaves a class unseen is outside the
    # measured range, the judged loss carries the measured evaluation error, the oscillation is t.
    assert cached["max_uncovered"] == 0.0
    assert cached["judged_error"] > 0.0 and cached["eval_dof"] == pytest.approx(3.4)
    regime = first["config"]["profile"]["plan_regime"]
    for run in cached["run"].values():
        assert len(run["eval_std"]) == len(run["levels"])
        assert all(0.0 <= e <= s / 2**0.5 + 1e-12
                   for e, s in zip(run["eval_std"], run["std"], strict=True))
        # The learning curve from 0 and the floor up: the oscillation's square-root shape.
        levels, eval_std = np.array(run["levels"]), np.array(run["eval_std"])
        assert levels[0] == 0.0 and levels[1] == pytest.approx(regime["floor"])
        curve = slice(1, 11)
        assert eval_std[curve] / np.sqrt(levels[curve]) == pytest.approx(eval_std[1] / np.sqrt(levels[1]))


# ---------------------------------------------------------------------------
# Pieces
# ---------------------------------------------------------------------------
def test_cache_key_depends_on_what_the_nodes_report():
    cfg = compose_config([])
    props = {"c0": {"cluster": "A", "num-samples": 10, "label-histogram": [5, 5]},
             "c1": {"cluster": "B", "num-samples": 12, "label-histogram": [6, 6]}}
    other = {**props, "c1": {"cluster": "B", "num-samples": 12, "label-histogram": [2, 10]}}
    smaller = {**props, "c1": {"cluster": "B", "num-samples": 11, "label-histogram": [6, 5]}}
    keys = {federated_key(cfg, p) for p in (props, other, smaller)}
    assert len(keys) == 3
    assert federated_key(cfg, dict(reversed(list(props.items())))) == federated_key(cfg, props)


def test_atomic_cache_write_is_safe_for_concurrent_writers(tmp_path):
    path = tmp_path / "profile.json"
    docs = [{"writer": i, "payload": list(range(2000))} for i in range(8)]
    threads = [threading.Thread(target=write_json_atomic, args=(path, d)) for d in docs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert json.loads(path.read_text())["writer"] in range(8)
    assert [p.name for p in tmp_path.iterdir()] == ["profile.json"]


def test_split_groups_are_disjoint_cover_and_vary_in_size():
    clients = [f"c{i}" for i in range(10)]
    sizes = set()
    for k in range(20):
        groups = split_groups(clients, 2, np.random.default_rng(k))
        assert sorted(c for g in groups for c in g) == sorted(clients) and all(groups)
        sizes.add(len(groups[0]))
    assert len(sizes) >= 3


def test_sizes_by_cost_gives_the_costliest_variant_the_smallest_group():
    groups = [["c0"], ["c1", "c2", "c3"], ["c4", "c5"]]
    # variants in order: cheap, costly, middle
    out = sizes_by_cost(groups, [1.0, 4.0, 2.0])
    assert out == [["c1", "c2", "c3"], ["c0"], ["c4", "c5"]]
    assert sorted(c for g in out for c in g) == sorted(c for g in groups for c in g)


def test_sizes_by_cost_keeps_the_drawn_sizes_and_the_drawn_order_on_ties():
    clients = [f"c{i}" for i in range(7)]
    for k in range(20):
        groups = split_groups(clients, 2, np.random.default_rng(k))
        out = sizes_by_cost(groups, [4.0, 1.0])  # full first, the pruned variant second
        assert sorted(map(len, out)) == sorted(map(len, groups))
        assert len(out[0]) <= len(out[1])
    equal = [["a", "b"], ["c", "d"]]
    assert sizes_by_cost(equal, [1.0, 1.0]) == equal
    assert sizes_by_cost(equal, [4.0, 1.0]) == [["c", "d"], ["a", "b"]]


# ---------------------------------------------------------------------------
# A real deployment on per-node folders
# ---------------------------------------------------------------------------
@pytest.mark.slow
def test_loopback_deployment_on_per_node_folders(split, tmp_path):
    """3 SuperNodes, each with only its own data-dir; the server gets only dataset.test_dir."""
    import os
    import shutil

    superlink = Path(sys.executable).parent / "flower-superlink"
    if not superlink.exists() and shutil.which("flower-superlink") is None:
        pytest.skip("flower-superlink is not installed")
    env = {**os.environ, "FLWR_BIN": str(superlink.parent if superlink.exists()
                                          else Path(shutil.which("flower-superlink")).parent),
           "TMPDIR": str(tmp_path), "DEPL_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "out"
    # As root, every process sees only its own folder (the server: only the test folder).
    isolate = os.geteuid() == 0 and shutil.which("unshare") is not None
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "deploy_loopback.sh"), "-n", "3", "-r", "2", "-d", str(split),
         *(["--isolate-data"] if isolate else []), "-o", str(out), "-t", "1500",
         "profile.explore.rounds=2", "profile.explore.switch_rounds=[2]",
         "profile.explore.stop_loss_factor=null", "profile.explore.stop_when_met=false",
         "profile.explore.min_points_per_level=1", "target.loss=1.5", "target.prob=0.6",
         "target.deadline_s=1e5", "tracking.enabled=false", "output.plot=false",
         # every node explores (the cheapest cluster alone, 2 rounds, finds no plan for this target)
         "profile.explore.without_tracking=thorough"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1600)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    if isolate:
        views = {f.stem: f.read_text().split() for f in (out / "logs").glob("*.view")}
        assert views == {"superlink": ["test"], **{f"supernode-{i}": [f"node-{i}"] for i in range(N)}}
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["dataset"]["name"] == "folder"
    assert doc["config"]["dataset"]["test_dir"] == str(split.resolve() / "test")
    phases = [r["phase"] for r in doc["rounds"]]
    assert phases[:2] == ["profile", "profile"] and set(phases[2:]) <= {"train"}
    # Every client's sample count is what its own folder holds.
    assert {c["id"]: c["num_samples"] for c in doc["scenario"]["clients"]} == \
        {f"c{i}": _png_count(split / f"node-{i}") for i in range(N)}
    assert doc["summary"]["profile_energy_j"] == pytest.approx(
        sum(r["energy_j"] for r in doc["rounds"] if r["phase"] == "profile"))


def test_exploration_goes_on_until_the_loss_is_near_the_target():
    from strategies.federated_profiling import FederatedProfiler

    cfg = compose_config(["profile.explore.rounds=3", "profile.explore.stop_loss_factor=2.0",
                          "profile.explore.max_rounds=5", "target.loss=0.35"])
    prof = FederatedProfiler(cfg, None)
    assert prof._explore_more(2, 0.1)          # the minimum number of rounds always runs
    assert prof._explore_more(3, 0.71)         # above 2 x 0.35: on
    assert not prof._explore_more(3, 0.69)     # near the target: stop
    assert not prof._explore_more(5, 2.0)      # the cap
    off = FederatedProfiler(compose_config(["profile.explore.rounds=3",
                                            "profile.explore.stop_loss_factor=null"]), None)
    assert not off._explore_more(3, 2.0)


def test_exploration_stops_at_its_share_of_the_deadline_even_far_above_the_target():
    from strategies.federated_profiling import FederatedProfiler

    cfg = compose_config(["profile.explore.rounds=3", "profile.explore.stop_loss_factor=2.0",
                          "profile.explore.max_rounds=40", "profile.explore.max_deadline_share=0.5",
                          "target.loss=0.3", "target.deadline_s=100"])
    prof = FederatedProfiler(cfg, None)
    prof.records = [{"round_time_s": 12.0}] * 4  # 48 s of the 100 s deadline used
    assert prof._explore_more(4, 1.5)
    prof.records = [{"round_time_s": 12.0}] * 5  # 60 s: past half the deadline
    assert not prof._explore_more(5, 1.5)
    assert prof._explore_more(2, 1.5)  # the minimum number of rounds still runs
    unlimited = FederatedProfiler(compose_config(["profile.explore.rounds=3", "profile.explore.max_rounds=40",
                                                  "profile.explore.max_deadline_share=null",
                                                  "target.loss=0.3", "target.deadline_s=100"]), None)
    unlimited.records = [{"round_time_s": 12.0}] * 5
    assert unlimited._explore_more(5, 1.5)


def test_the_default_exploration_may_go_past_20_rounds_on_the_plateau():
    from strategies.federated_profiling import FederatedProfiler

    prof = FederatedProfiler(compose_config(["target.loss=0.3"]), None)
    prof.records = [{"round_time_s": 4.0}] * 20  # 80 s of the default 300 s deadline
    assert prof._explore_more(20, 1.45)  # far above 2 x L*: a capped profile would extrapolate the plateau
    assert not prof._explore_more(20, 0.55)


def test_set_change_rounds_are_the_non_switch_groups_of_the_last_rounds():
    from depl_fl.orchestration.label_coverage import LabelCoverage
    from strategies.federated_profiling import FederatedProfiler

    props = {"c0": {"num-samples": 100, "label-histogram": [100, 0]},
             "c1": {"num-samples": 100, "label-histogram": [0, 100]},
             "c2": {"num-samples": 200, "label-histogram": [100, 100]}}
    profiler = FederatedProfiler(compose_config(JOB), None)
    profiler.coverage = LabelCoverage(props)

    def group(model, clients, coverage, switch_from=None):
        return {"model": model, "clients": clients, "switch_from": switch_from, "coverage": coverage,
                "loss_before": 1.0, "loss": 1.1}

    profiler.records = [
        {"replied": ["c0", "c1", "c2"], "groups": [group("full", ["c0"], 0.5)]},            # too early
        {"replied": ["c0", "c2"], "groups": [group("full", ["c0", "c1"], 0.5),             # c1 silent
                                             group("p50", ["c2"], 1.0)]},
        {"replied": ["c0", "c1", "c2"], "groups": [group("full", ["c1"], 0.5, "p50"),     # a switch
                                                   group("p50", ["c0", "c2"], None)]},   # no coverage
    ]
    rounds = profiler.set_change_rounds(2)
    assert [(r.model, r.gap) for r in rounds] == [("full", 0.5), ("p50", 0.0)]
    assert rounds[0].ratio == pytest.approx(profiler.coverage.effective_ratio(["c0"]))
    assert rounds[0].loss_before == 1.0 and rounds[0].loss_after == 1.1
    assert profiler.set_change_rounds(0) == []


def test_exploration_rounds_draw_at_most_max_clients():
    from depl_fl.orchestration.exploration import round_clients

    clients = [f"c{i}" for i in range(1000)]
    picked = round_clients(clients, 100, np.random.default_rng(1))
    assert len(picked) == 100 == len(set(picked)) and set(picked) <= set(clients)
    assert picked != round_clients(clients, 100, np.random.default_rng(2))
    assert round_clients(clients, None, np.random.default_rng(1)) == clients
    assert round_clients(clients[:50], 100, np.random.default_rng(1)) == clients[:50]


def test_max_clients_null_keeps_the_profile_cache_key():
    from depl_fl.orchestration.profiling import federated_key
    from depl_fl.runs.runconfig import compose_config

    cfg = compose_config(["num_clients=3"])
    props = {f"c{i}": {"cluster": "A", "num-samples": 10 + i, "partition-id": i} for i in range(3)}
    without = {**cfg, "profile": {**cfg["profile"], "explore": {
        k: v for k, v in cfg["profile"]["explore"].items() if k != "max_clients"}}}
    assert federated_key(cfg, props) == federated_key(without, props)
    explore = {**cfg["profile"]["explore"], "max_clients": 2}
    capped = {**cfg, "profile": {**cfg["profile"], "explore": explore}}
    assert federated_key(capped, props) != federated_key(cfg, props)
