"""The scale benchmarks' bookkeeping: the server-side split, the tables, memory per SuperNode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import scale_bench  # noqa: E402
import scale_ray_job  # noqa: E402
import supernode_memory  # noqa: E402


class FakeTime:
    """``perf_counter`` and ``process_time`` that advance only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def process_time(self) -> float:
        return self.now


def test_a_round_splits_into_the_clients_and_the_servers_parts():
    clock = scale_bench.Clock()
    clock.setup = (2.0, 1.0)
    clock.setup_cpu.update({"client": 0.4, "planning": 0.3})
    clock.setup_wall.update({"client": 0.5})
    clock.cpu.update({"client": 3.0, "planning": 0.5, "evaluation": 0.2})
    clock.wall.update({"client": 6.0})
    row = scale_bench._split(clock, wall=12.0, cpu=6.0, rounds=4)
    assert row["round_cpu_s_per_round"] == pytest.approx(1.25)
    assert row["client_cpu_s_per_round"] == pytest.approx(0.75)
    assert row["server_cpu_s_per_round"] == pytest.approx(0.5)
    assert row["server_wall_s_per_round"] == pytest.approx(1.0)
    assert row["server_parts"] == pytest.approx({"planning": 0.125, "evaluation": 0.05, "other": 0.325})
    assert row["setup_cpu_s"] == pytest.approx(0.6) and row["initial_plan_cpu_s"] == pytest.approx(0.3)


def test_a_part_leaves_out_the_parts_timed_inside_it(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(scale_bench, "time", fake)
    clock = scale_bench.Clock()

    def client():
        fake.now += 3.0

    def exchange():
        fake.now += 1.0
        timed_client()

    timed_client = clock.timed("client", client)
    clock.start()
    clock.timed("exchange", exchange)()  # a node query: the start-up's
    fake.now += 0.5
    configure = scale_bench._first_round(clock, lambda: None)
    configure()
    assert clock.setup == (4.5, 4.5) and clock.setup_cpu == {"exchange": 1.0, "client": 3.0}
    clock.timed("exchange", exchange)()
    assert clock.cpu == {"configure": 0.0, "exchange": 1.0, "client": 3.0}
    row = scale_bench._split(clock, wall=fake.now, cpu=fake.now, rounds=1)
    assert row["setup_cpu_s"] == pytest.approx(1.5) and row["server_cpu_s_per_round"] == pytest.approx(1.0)


def _row(strategy, n, server, whole):
    parts = {"planning": 0.1 * server, "evaluation": 0.5 * server, "other": 0.4 * server}
    return {"strategy": strategy, "clients": n, "rounds": 2, "clients_per_round": 5.0,
            "samples_per_round": 500.0, "replans": 1, "replans_infeasible": 1, "replans_deferred": 3,
            "replans_skipped": 2,
            "server_cpu_s_per_round": server, "server_wall_s_per_round": 2 * server,
            "round_cpu_s_per_round": whole, "peak_rss_mb": 100.0 + n, "setup_cpu_s": 2.0,
            "initial_plan_cpu_s": 1.5 if strategy == "depl" else 0.0, "server_parts": parts,
            "load_average": 4.0}


def test_the_tables_compare_server_and_whole_round_at_equal_client_counts(tmp_path):
    rows = [_row("depl", 10, 0.3, 1.2), _row("fedavg", 10, 0.1, 0.6), _row("depl", 30, 0.3, 1.0),
            _row("fedavg", 30, 0.1, 0.5)]
    rows[2]["peak_rss_mb"] = 150.0
    scale_bench.write_outputs(rows, tmp_path)
    text = (tmp_path / "scale.md").read_text()
    assert ("| 10 | 2 | 5.0 (500) / 5.0 (500) | 0.3000 / 0.1000 | 3.00 | 1.200 / 0.600 | 2.00 "
            "| 2.00 (1.50) / 2.00 | 0.600 / 0.200 | 110 / 110 | 1 (1; 3; 2) | 4.0 / 4.0 |") in text
    assert "| 10 | depl | 0.0 | 0.0 | 0.0 | 150.0 | 0.0 | 30.0 | 0.0 | 0.0 | 120.0 | 300.0 |" in text
    assert "| 10 | fedavg | 0.0 | 0.0 | 0.0 | 50.0 | - | - | - | - | 40.0 | 100.0 |" in text
    assert "depl 2.000 (10->30); fedavg 1.000 (10->30)" in text
    assert (tmp_path / "scale.png").stat().st_size > 1000


def test_memory_per_node_counts_the_node_processes_only():
    samples = [{"supernode": {"count": 4, "rss_kib": 4 * 1024 * 100, "pss_kib": 4 * 1024 * 60,
                              "max_rss_kib": 0},
                "warm_worker": {"count": 4, "rss_kib": 4 * 1024 * 300, "pss_kib": 4 * 1024 * 200,
                                "max_rss_kib": 0},
                "serverapp": {"count": 1, "rss_kib": 1024 * 500, "pss_kib": 1024 * 400, "max_rss_kib": 0}}]
    s = supernode_memory.summarise(samples, nodes=4, machine_gib=10.0, reserve_gib=1.0)
    assert s["per_node_rss_mib"] == pytest.approx(400.0) and s["per_node_pss_mib"] == pytest.approx(260.0)
    assert s["server_side_pss_mib"] == pytest.approx(400.0)
    assert s["nodes_per_machine"] == int((9 * 1024 - 400) // 260)


def test_the_memory_report_says_the_job_and_its_overrides(tmp_path):
    samples = [{"supernode": {"count": 2, "rss_kib": 2048, "pss_kib": 1024, "max_rss_kib": 1024}}]
    doc = {"overrides": ["cost.clock=model"], "returncode": 0, "status": "completed",
           "job": {"met": True, "final_test_loss": 0.3312, "target_loss": 0.35, "target_prob": 0.9,
                   "rounds": 7, "profile_rounds": 12, "total_energy_j": 512.25, "wall_s": 600.4},
           "summary": supernode_memory.summarise(samples, nodes=2, machine_gib=4.0, reserve_gib=1.0)}
    text = supernode_memory.write_outputs(doc, tmp_path).read_text()
    assert "`python benchmarks/supernode_memory.py -n 2 cost.clock=model`" in text
    assert ("12 exploration and 7 training rounds, final test loss 0.3312 (target 0.35 at pi 0.9, "
            "met: True)") in text


def test_a_superexec_started_by_a_supernode_belongs_to_it():
    assert supernode_memory._parent_pid_arg("flower-superexec --insecure --parent-pid 42") == "42"
    assert supernode_memory._parent_pid_arg("flower-superexec --insecure") is None


def test_the_ray_job_record_counts_each_phase(tmp_path):
    doc = {"summary": {"status": "completed", "replans": 2, "final_test_loss": 1.5, "target_loss": 1.6,
                       "target_prob": 0.9, "met": True, "wall_s": 99.0},
           "scenario": {"clients": [{"id": f"c{i}"} for i in range(7)]},
           "plan": {"feasible": True, "planner_seconds": 1.25,
                    "rounds": [{"clients": ["c1", "c2"]}, {"clients": ["c2", "c3"]}]},
           "rounds": [{"phase": "profile", "groups": [{"clients": ["c0", "c1"]}, {"clients": ["c4"]}]},
                      {"phase": "train", "clients": ["c1", "c2"], "plan_check": {"kept": True}},
                      {"phase": "train", "clients": ["c2", "c3", "c5"]}]}
    facts = scale_ray_job.job_facts(doc)
    assert facts["clients"] == 7 and facts["exploration_rounds"] == 1 and facts["clients_explored"] == 3
    assert facts["plan_rounds"] == 2 and facts["plan_clients"] == 3 and facts["train_rounds"] == 2
    assert facts["deferred_replans"] == 1 and facts["clients_per_train_round"] == 2.5
    facts.update(process_wall_s=120.5, load_average=3.0, command="python -m depl_fl.main x")
    scale_ray_job.write(facts, tmp_path)
    assert "| process_wall_s | 120.5 |" in (tmp_path / "ray_job.md").read_text()


def test_the_round_profile_ranks_functions_by_their_share_of_the_servers_time(tmp_path):
    import scale_round_profile

    root = str(scale_round_profile.ROOT)
    stats = {(f"{root}/depl_fl/a.py", 3, "plan"): (4, 4, 0.6, 0.9, {}),
             (f"{root}/depl_fl/b.py", 7, "check"): (8, 8, 0.3, 0.3, {}),
             ("~", 0, "<built-in method numpy.sum>"): (2, 2, 0.1, 0.1, {})}
    funcs = scale_round_profile.top_functions(stats, rounds=2, top=2)
    assert funcs["profiled_ms_per_round"] == pytest.approx(500.0)
    assert [r["function"] for r in funcs["by_own"]] == ["depl_fl/a.py:3(plan)", "depl_fl/b.py:7(check)"]
    assert funcs["by_own"][0]["share"] == pytest.approx(0.6) and funcs["by_own"][1]["calls_per_round"] == 4
    assert funcs["by_inclusive"][0]["share"] == pytest.approx(0.9)
    row = _row("depl", 1000, 0.2, 1.0)
    row.update(replans=3, replans_infeasible=0, replans_deferred=1, clients_per_round=16.0)
    doc = {"clients": 1000, "commit": "abc", "command": "python benchmarks/scale_round_profile.py",
           "plain": row, "profiled": {"row": row, "functions": funcs}}
    text = scale_round_profile.write_outputs(doc, tmp_path).read_text()
    assert "| evaluation | 100.0 | 50% |" in text and "| **server** | **200.0** | 100% |" in text
    assert "| `depl_fl/a.py:3(plan)` | 2.0 | 300.00 | 450.00 | 60.0% |" in text
    # Several sizes: their parts side by side, then a section each, in one file of the given name.
    small = {**doc, "clients": 100, "profile": "p.json", "plain": {**row, "server_cpu_s_per_round": 0.4}}
    text = scale_round_profile.write_sizes([small, {**doc, "profile": "p.json"}], tmp_path, "parts_small")
    text = text.read_text()
    assert "| evaluation | 100.0 (25%) | 100.0 (50%) |" in text
    assert "| **server** | **400.0** | **200.0** |" in text
    assert "\n## 100 clients\n" in text and "\n## 1000 clients\n" in text and "### Parts (plain run)" in text
    assert "--clients 100 1000" in text and "--name parts_small" in text
    assert (tmp_path / "parts_small.json").is_file()


def test_the_replay_sums_each_calls_least_time_per_training_round_and_says_whether_answers_match(tmp_path):
    import replan_replay

    def turn(times, same=True):
        kinds = ["make_plan", "plan_holds", "make_plan", "make_plan"]
        calls = [{"call": k, "cpu_s": t, "same_answer": same} for k, t in zip(kinds, times, strict=True)]
        return {"calls": calls, "load_average": 2.0}

    summary = replan_replay.summarize([turn([0.30, 0.01, 0.05, 0.04]), turn([0.20, 0.02, 0.06, 0.03])],
                                      rounds=2)
    assert summary["make_plan"]["calls"] == 3 and summary["plan_holds"]["calls"] == 1
    assert summary["make_plan"]["initial_ms"] == pytest.approx(200.0)
    assert summary["make_plan"]["ms_per_round"] == pytest.approx((50.0 + 30.0) / 2)
    assert summary["plan_holds"]["ms_per_round"] == pytest.approx(5.0) and summary["same_answers"] is True
    assert summary["make_plan"]["each_ms"] == pytest.approx([200.0, 50.0, 30.0])
    assert summary["make_plan"]["replan_median_ms"] == pytest.approx(40.0)
    assert replan_replay.summarize([turn([0.3, 0.01, 0.05, 0.04], same=False)], 2)["same_answers"] is False
    job = {"rounds": 2, "replans": 2, "replans_infeasible": 1, "replans_deferred": 0, "replans_skipped": 1,
           "load_average": 3.0, "planning_ms_per_round": 41.0, "plan_check_ms_per_round": 2.5}
    doc = {"clients": 10, "repeats": 2, "job": job, "command": "python benchmarks/replan_replay.py",
           "codes": {"this checkout": summary, "before": summary}}
    text = replan_replay.write_outputs(doc, tmp_path).read_text()
    assert "| this checkout | 200 | 2, 40.0 | 50.0 / 30.0 (40.0) | 1, 5.0 | yes | 2.0-2.0 |" in text
    assert "1 skipped after an infeasible one" in text and "planning 41.0 ms" in text


def test_a_replay_answer_is_the_plan_document_without_its_measured_seconds():
    import dataclasses

    import replan_replay

    from depl_fl.contract.plan import Plan

    plan = Plan("depl", True, [], {"probability": 0.9}, planner_seconds=1.0, extra={"eta": 0.1})
    again = dataclasses.replace(plan, planner_seconds=2.0)
    assert replan_replay.answer_key("make_plan", plan) == replan_replay.answer_key("make_plan", again)
    assert replan_replay.answer_key("make_plan", plan) != replan_replay.answer_key(
        "make_plan", dataclasses.replace(plan, feasible=False))
    assert replan_replay.answer_key("plan_holds", (False, float("nan"))) == (False, None)


def test_the_replay_refuses_bad_input_with_status_2(monkeypatch, capsys, tmp_path):
    import replan_replay

    monkeypatch.setattr(sys, "argv", ["replan_replay.py", "--clients", "0"])
    with pytest.raises(SystemExit) as stop:
        replan_replay.main()
    assert stop.value.code == 2 and "--clients >= 1" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["replan_replay.py", "--before", str(tmp_path)])
    with pytest.raises(SystemExit) as stop:
        replan_replay.main()
    assert stop.value.code == 2


def test_the_runs_table_puts_each_runs_ratio_beside_the_others_and_refuses_a_missing_run(tmp_path):
    import json

    import scale_runs_table

    for label, depl in (("before", 0.3), ("after", 0.2)):
        (tmp_path / label).mkdir()
        (tmp_path / label / "scale.json").write_text(json.dumps(
            {"rows": [_row("depl", 100, depl, 1.0), _row("fedavg", 100, 0.1, 0.5)]}))
    docs = {label: json.loads((tmp_path / label / "scale.json").read_text()) for label in ("before", "after")}
    rows = [r for label, doc in docs.items() for r in scale_runs_table.rows_of(label, doc)]
    text = scale_runs_table.write(rows, tmp_path / "out", "cmd").read_text()
    assert "| 100 | before | 300.0 | 100.0 | 3.00 | 30.0 / 0.0 / 0.0 / 0.0 | 150.0 / 50.0 | 4.0 / 4.0 |" \
        in text
    assert "| 100 | after | 200.0 | 100.0 | 2.00 |" in text
    done = subprocess.run([sys.executable, str(Path(scale_runs_table.__file__)), f"x={tmp_path / 'none'}",
                           "--out", str(tmp_path / "o")], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "expected LABEL=DIR" in done.stderr


def test_the_margin_cost_table_takes_each_checkouts_least_time_and_says_whether_margins_match(tmp_path):
    import stop_margin_cost

    def turn(cpu, margins, load=2.0):
        row = {"validation": 100, "test": 90, "margins": margins, "cpu_s": cpu}
        return {"rows": [row], "load_average": load}

    doc = {"sizes": [(100, 90)], "repeats": 2, "turns": 2, "command": "python benchmarks/stop_margin_cost.py",
           "codes": {"this checkout": [turn(0.09, [0.1, 0.2]), turn(0.08, [0.1, 0.2])],
                     "before": [turn(0.12, [0.1, 0.2], 3.0), turn(0.10, [0.1, 0.2])]}}
    text = stop_margin_cost.write_outputs(doc, tmp_path).read_text()
    assert "| 100 / 90 | 80.0 | 100.0 | -20% | yes |" in text and "2.0-3.0" in text
    doc["codes"]["before"][1] = turn(0.10, [0.1, 0.2000001])
    assert "| -20% | NO |" in stop_margin_cost.write_outputs(doc, tmp_path).read_text()


def test_the_margin_cost_refuses_bad_sizes_with_exit_status_2():
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "stop_margin_cost.py"
    done = subprocess.run([sys.executable, str(script), "--sizes", "1:5"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2 and "VALIDATION:TEST" in done.stderr
