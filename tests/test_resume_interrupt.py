"""Simulation jobs: Ctrl-C or SIGTERM, also while a message is in flight, leaves an interrupted
results.json and exits promptly with 128 + the signal (Ray and in-process), its child processes
stopped by a reaper once it has exited; a job killed with SIGKILL after training round 2
or during its exploration rounds resumes from its checkpoint and trains like an uninterrupted one."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from depl_fl.processes import alive, hand_to_reaper, stop_after_exit

ROOT = Path(__file__).resolve().parent.parent
#: A short job (digits, 3 clients): 2 federated exploration rounds on every client (the cheapest
#: cluster alone finds no plan in 2 rounds), then 3 training rounds; every reply is held back 1 s
#: (fault kind ``slow``) so that a signal lands while the job still runs.
JOB = ["num_clients=3", "profile.explore.rounds=2", "profile.explore.max_rounds=2",
       "profile.explore.stop_when_met=false", "profile.explore.without_tracking=thorough",
       "profile.explore.switch_rounds=[2]", "target.loss=0.35", "target.prob=0.6", "target.max_rounds=6",
       "tracking.enabled=false", "output.plot=false", "faults.clients=[c0,c1,c2]", "faults.kind=slow",
       "faults.slow_s=1.0"]


def _start(run_dir: Path, extra: list[str]) -> subprocess.Popen:
    env = {**os.environ, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "RAY_DEDUP_LOGS": "0",
           "PYTHONPATH": str(ROOT)}
    # One profile cache per job folder: a profile cached by another job would replace the
    # exploration rounds and make the runs incomparable (a resumed job shares its folder's).
    return subprocess.Popen(
        [sys.executable, "-m", "depl_fl.main", *JOB, f"profile.cache_dir={run_dir}-cache",
         f"hydra.run.dir={run_dir}", *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _results(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError):
        return None


def _wait_for_round(proc: subprocess.Popen, run_dir: Path, rounds: int, timeout: float,
                    phase: str = "train") -> dict:
    """The running job's results.json once it holds ``rounds`` rounds of ``phase``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = _results(run_dir)
        if doc is not None and doc["summary"].get("status") == "running" and \
                sum(r.get("phase", "train") == phase for r in doc["rounds"]) >= rounds:
            return doc
        if proc.poll() is not None:
            pytest.fail(f"job ended before {phase} round {rounds}: {proc.stderr.read()[-3000:]}")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"no {phase} round {rounds} within {timeout} s")


def _group_alive(pgid: int) -> list[int]:
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                alive.append(int(entry.name))
    return alive


def _sleeper(ignore_term: bool = False) -> subprocess.Popen:
    trap = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_term else ""
    return subprocess.Popen([sys.executable, "-c", f"import signal, time; {trap}print(1, flush=True); "
                             "time.sleep(60)"], stdout=subprocess.PIPE)


def test_the_reaper_stops_the_children_only_after_the_job_has_exited():
    # Stopping Ray's raylet while the driver lives makes Ray end the driver with status 1, so the
    # children must outlive the job's exit; one that ignores SIGTERM gets SIGKILL.
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"])
    children = [_sleeper(), _sleeper(ignore_term=True)]
    for child in children:
        child.stdout.readline()  # its handler is installed
    t0 = time.monotonic()
    watcher = __import__("threading").Thread(target=job.wait)
    watcher.start()
    left = stop_after_exit(job.pid, [c.pid for c in children], wait_s=0.5)
    watcher.join()
    assert left == []
    assert time.monotonic() - t0 >= 0.9   # waited for the job
    assert [c.wait(5) for c in children] == [-signal.SIGTERM, -signal.SIGKILL]


def test_the_reaper_outlives_the_job_and_ignores_a_second_ctrl_c():
    child = _sleeper()
    child.stdout.readline()
    job = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from depl_fl.processes import hand_to_reaper; "
         "print(hand_to_reaper([int(sys.argv[1])], 0.5).pid, flush=True); time.sleep(1.0)", str(child.pid)],
        stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    reaper = int(job.stdout.readline())
    os.kill(reaper, signal.SIGINT)       # at once: SIGINT is ignored from the reaper's start
    assert job.wait(10) == 0
    assert child.wait(10) == -signal.SIGTERM
    deadline = time.monotonic() + 10
    while alive(reaper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(reaper)
    assert hand_to_reaper([]) is None


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "sig"), [("ray", signal.SIGINT), ("ray", signal.SIGTERM),
                                              ("inprocess", signal.SIGINT), ("inprocess", signal.SIGTERM)])
def test_signal_mid_message_leaves_interrupted_results_and_exits_promptly(tmp_path, backend, sig):
    run_dir = tmp_path / "job"
    # Every reply is held back 3 s: one second after exploration round 1 is in results.json the
    # ClientApps (under Ray: actors) are in the middle of round 2's messages.
    proc = _start(run_dir, [f"simulation={backend}", "faults.slow_s=3.0"])
    _wait_for_round(proc, run_dir, 1, 900, "profile")
    time.sleep(1.0)
    os.killpg(proc.pid, sig)  # Ctrl-C in a terminal signals the whole process group
    t0 = time.monotonic()
    try:
        _, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the job did not exit within 60 s of {sig.name}")
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 128 + sig, stderr[-3000:]
    doc = _results(run_dir)
    assert doc["summary"]["status"] == "interrupted"
    assert len(doc["rounds"]) >= 1
    assert [r["round"] for r in doc["rounds"]] == list(range(1, len(doc["rounds"]) + 1))
    time.sleep(5)
    assert _group_alive(proc.pid) == [], "processes of the job outlived it"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    """results.json of the in-process job run without interruption (the reference of a resumed one)."""
    run_dir = tmp_path_factory.mktemp("whole") / "job"
    whole = _start(run_dir, ["simulation=inprocess"])
    _, stderr = whole.communicate(timeout=1200)
    assert whole.returncode == 0, stderr[-3000:]
    reference = _results(run_dir)
    assert reference["summary"]["rounds"] >= 3
    return reference


def _kill_and_resume(run_dir: Path, rounds: int, phase: str) -> tuple[dict, dict]:
    """SIGKILL the job once ``rounds`` rounds of ``phase`` are in results.json, then resume it.

    Returns results.json at the kill and after the resumed job.
    """
    crash = _start(run_dir, ["simulation=inprocess"])
    _wait_for_round(crash, run_dir, rounds, 900, phase)
    os.killpg(crash.pid, signal.SIGKILL)
    crash.communicate()
    at_kill = _results(run_dir)
    assert at_kill["summary"]["status"] == "running"
    resumed = _start(run_dir, ["simulation=inprocess", "resume=true"])
    _, stderr = resumed.communicate(timeout=1200)
    assert resumed.returncode == 0, stderr[-3000:]
    return at_kill, _results(run_dir)


def _assert_trains_like(doc: dict, reference: dict) -> None:
    """Every round (exploration and training) exactly once, numbered without gaps, as uninterrupted."""
    assert doc["summary"]["status"] == "completed"
    assert [r["round"] for r in doc["rounds"]] == list(range(1, len(reference["rounds"]) + 1))
    assert [r.get("phase") for r in doc["rounds"]] == [r.get("phase") for r in reference["rounds"]]
    for got, want in zip(doc["rounds"], reference["rounds"], strict=True):
        assert got["model"] == want["model"] and got["clients"] == want["clients"]
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-6)
    assert doc["summary"]["final_loss"] == pytest.approx(reference["summary"]["final_loss"], rel=1e-6)


@pytest.mark.slow
def test_killed_inprocess_job_resumes_like_an_uninterrupted_one(tmp_path, uninterrupted):
    at_kill, doc = _kill_and_resume(tmp_path / "crash", 2, "train")
    # resumed_from is the last round of results.json at the kill (exploration rounds numbered first)
    assert doc["summary"]["resumed_from"] == at_kill["rounds"][-1]["round"]
    assert at_kill["rounds"][-1]["phase"] == "train"
    _assert_trains_like(doc, uninterrupted)


@pytest.mark.slow
def test_job_killed_during_exploration_resumes_like_an_uninterrupted_one(tmp_path, uninterrupted):
    at_kill, doc = _kill_and_resume(tmp_path / "crash", 1, "profile")
    # killed before the exploration ended: it goes on from there, no round repeated
    assert {r["phase"] for r in at_kill["rounds"]} == {"profile"}
    assert doc["summary"]["resumed_from"] == at_kill["rounds"][-1]["round"]
    assert doc["summary"]["profile_rounds"] == uninterrupted["summary"]["profile_rounds"]
    assert doc["summary"]["profile_energy_j"] == pytest.approx(uninterrupted["summary"]["profile_energy_j"])
    _assert_trains_like(doc, uninterrupted)


@pytest.mark.slow
def test_resume_with_other_overrides_is_one_line(tmp_path):
    run_dir = tmp_path / "job"
    proc = _start(run_dir, ["simulation=inprocess"])
    _, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-3000:]
    again = _start(run_dir, ["simulation=inprocess", "seed=1", "resume=true"])
    _, stderr = again.communicate(timeout=600)
    assert again.returncode == 2
    lines = [ln for ln in stderr.splitlines() if ln.startswith("depl-fl:")]
    assert len(lines) == 1 and "seed" in lines[0] and "Traceback" not in stderr


def test_resume_without_a_checkpoint_is_one_line_and_exit_2(tmp_path):
    run_dir = tmp_path / "job"
    proc = _start(run_dir, ["simulation=ray", "resume=true"])
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2, stderr[-3000:]
    lines = [ln for ln in stderr.splitlines() if ln.startswith("depl-fl:")]
    assert len(lines) == 1 and "no checkpoint" in lines[0] and "Traceback" not in stderr
    assert not (run_dir / "results.json").exists()  # refused before the job started


def test_job_without_a_dependable_plan_after_exploring_says_so_in_results(tmp_path):
    """Exit 3 after the exploration rounds: results.json keeps them, status infeasible, the reason."""
    run_dir = tmp_path / "job"
    proc = _start(run_dir, ["simulation=inprocess", "target.deadline_s=45"])  # exploring takes ~41 s
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 3, stderr[-3000:]
    doc = _results(run_dir)
    assert doc is not None
    assert doc["summary"]["status"] == "infeasible"
    assert "no dependable plan" in doc["summary"]["error"]
    assert [r["phase"] for r in doc["rounds"]] == ["profile", "profile"]
    assert doc["summary"]["profile_energy_j"] > 0
    from depl_fl.runs.report import parse_result

    assert math.isinf(parse_result(doc, "results.json").final_loss)  # the report counts a failure


@pytest.mark.slow
def test_resuming_a_finished_job_says_so_in_the_summarys_numbers(tmp_path):
    run_dir = tmp_path / "job"
    first = _start(run_dir, ["simulation=inprocess"])
    _, stderr = first.communicate(timeout=900)
    assert first.returncode == 0, stderr[-3000:]
    done = _results(run_dir)
    explored, trained = done["summary"]["profile_rounds"], done["summary"]["rounds"]
    assert explored > 0 and trained > 0
    again = _start(run_dir, ["simulation=inprocess", "resume=true"])
    stdout, stderr = again.communicate(timeout=600)
    assert again.returncode == 0, stderr[-3000:]
    point = (f"round {explored + trained} ({explored} exploration + {trained} training rounds); "
             "the job had already finished: no round left to run")
    assert f"resuming after {point}" in stdout + stderr
    doc = _results(run_dir)
    assert [r["round"] for r in doc["rounds"]] == [r["round"] for r in done["rounds"]]
    assert doc["summary"]["rounds"] == trained and doc["summary"]["resumed_from"] == explored + trained
    assert f"{trained} rounds" in stdout + stderr and f"resumed after {point}" in stdout + stderr


#: A process that sets up a job's signal handlers, lets the job end as ``END`` says, then
#: SIGTERMs itself: ``finished`` (results final, exit status recorded), ``running`` (not finished).
LATE_SIGNAL = """
import json, os, signal, sys, time
from pathlib import Path
from depl_fl import main
from strategies.server_app import end_job

out, end, sweeping = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "sweep"
main._stop_on_signals(out, sweeping)
results = out / "results.json"
if end == "running":
    results.write_text(json.dumps({"summary": {"status": "running", "rounds": 1}, "rounds": []}))
else:
    status, word = {"completed": (0, "completed"), "infeasible": (3, "infeasible")}[end]
    end_job(out, status, lambda: results.write_text(json.dumps({"summary": {"status": word}, "rounds": []})))
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(30)
sys.exit(99)
"""


@pytest.mark.parametrize(("end", "mode", "status", "kept"),
                         [("completed", "job", 0, "completed"), ("infeasible", "job", 3, "infeasible"),
                          ("running", "job", 128 + signal.SIGTERM, "interrupted"),
                          ("completed", "sweep", 128 + signal.SIGTERM, "completed")])
def test_a_signal_after_the_job_finished_exits_with_the_jobs_own_status(tmp_path, end, mode, status, kept):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", LATE_SIGNAL, str(tmp_path), end, mode], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == status, proc.stderr[-3000:]
    assert _results(tmp_path)["summary"]["status"] == kept
    assert ("has summary.status interrupted" in proc.stderr) == (kept == "interrupted")


#: A finished job's process that gets SIGTERM while Python tears its modules down, after every
#: exit handler (the signal's default action restored by then): here from a module global's __del__.
SIGNAL_AT_EXIT = """
import os, signal, sys, time
from depl_fl import main
from strategies.server_app import end_job

class LateSignal:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)

late = LateSignal()
main._stop_on_signals(sys.argv[1], False)
end_job(sys.argv[1], 0, lambda: None)
"""


def test_a_signal_while_a_finished_job_exits_leaves_its_exit_status(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", SIGNAL_AT_EXIT, str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_signal_another_thread_receives_waits_for_the_held_final_write():
    """The system may hand Ctrl-C to any thread that does not block it; Python then runs the handler
    in the main thread at once. The final write and its recorded status must still land together."""
    import threading

    from depl_fl.runs.job_end import deferred_while_held, signals_held

    order: list[str] = []
    handler = deferred_while_held(lambda signum, frame: order.append("handler"))
    previous = signal.signal(signal.SIGTERM, handler)
    idle = threading.Event()
    other = threading.Thread(target=idle.wait)
    other.start()
    try:
        with signals_held():
            order.append("write")
            signal.pthread_kill(other.ident, signal.SIGTERM)  # a thread that does not hold it
            time.sleep(0.2)  # the main thread passes many bytecodes: an undeferred handler runs here
            order.append("record")
        time.sleep(0.2)
    finally:
        idle.set()
        other.join()
        signal.signal(signal.SIGTERM, previous)
    assert order == ["write", "record", "handler"]
