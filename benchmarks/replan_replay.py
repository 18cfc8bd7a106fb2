"""The planner's CPU time on the re-plans of one scale-benchmark job, replayed on two checkouts.

A job's per-round planning time moves by several milliseconds between runs on
a shared machine; replaying the same planner calls, in fresh processes that
alternate between the checkouts, compares the planner alone. The script runs
the DepL job of ``benchmarks/scale_bench.py`` at ``--clients`` once on this
checkout and keeps every call of ``make_plan`` (the initial plan and each
re-plan) and ``plan_holds`` (the check of the remaining plan) with its answer;
then each checkout in ``--code`` (this one by default; ``--before DIR`` adds a
checkout of earlier code, e.g. ``git worktree add DIR <commit>``) replays
the calls in the job's order, ``--repeats`` passes, in turns, and reports the
least CPU seconds of each call, and whether every answer equals the job's (the
plan documents apart from their measured ``planner_seconds``, and the checks'
verdicts). Every pass starts without kept Monte Carlo draws, as the job did.

Re-plans the job skipped (tracking's skip after an infeasible re-plan) are not
among the calls; the job's round records count them.

Usage: ``python benchmarks/replan_replay.py [--clients 1000]
[--profile benchmarks/results/scale/profile.json] [--before DIR] [--repeats 3]
[--out benchmarks/results/scale]`` writes ``replan_replay.json`` and ``replan_replay.md`` there.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "python benchmarks/replan_replay.py --clients {clients} --before {before}"


def capture(clients: int, profile: str, out: Path) -> dict[str, Any]:
    """Run the DepL job with the planner's calls recorded; pickle them to ``out/calls.pkl``."""
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    import logging

    logging.getLogger("flwr").setLevel(logging.ERROR)
    import scale_bench

    import depl_fl.planner as planner

    calls: list[tuple[str, tuple, dict, Any]] = []

    def recorded(name: str, fn):
        def call(*args, **kwargs):
            answer = fn(*args, **kwargs)
            calls.append((name, args, kwargs, answer))
            return answer
        return call

    planner.make_plan = recorded("make_plan", planner.make_plan)
    planner.plan_holds = recorded("plan_holds", planner.plan_holds)
    row = scale_bench.run_depl(clients, profile, out / "job")
    (out / "calls.pkl").write_bytes(pickle.dumps(calls, protocol=5))
    keep = ("rounds", "replans", "replans_infeasible", "replans_deferred", "replans_skipped", "load_average")
    return {k: row.get(k) for k in keep} | {"planning_ms_per_round": 1000 * row["server_parts"]["planning"],
                                            "plan_check_ms_per_round": 1000 * row["server_parts"].get(
                                                "plan_check", 0.0)}


def answer_key(name: str, answer: Any) -> Any:
    """What a call decided: the plan document without its measured seconds, or the check's verdict."""
    if name == "plan_holds":
        holds, prob = answer
        return bool(holds), None if math.isnan(prob) else float(prob)
    return answer.method, answer.feasible, answer.rounds, answer.predicted, answer.extra


def replay(path: Path, repeats: int) -> dict[str, Any]:
    """The recorded calls in their order, ``repeats`` passes, on the planner of ``sys.path``: each
    call's least CPU seconds over the passes, and whether it gave the job's answer in every pass.

    Each pass starts as the job did, without kept Monte Carlo draws
    (:mod:`depl_fl.contract.draws`, where the code has it): a call reads only
    the draws the calls before it in the job kept, not those of its own earlier pass.
    """
    import depl_fl.planner as planner

    try:
        from depl_fl.contract import draws
    except ImportError:  # code from before the draws were kept
        draws = None
    calls = pickle.loads(path.read_bytes())
    best, same = [math.inf] * len(calls), [True] * len(calls)
    for _ in range(repeats):
        if draws is not None:
            draws.clear()
        for i, (name, args, kwargs, answer) in enumerate(calls):
            t0 = time.process_time()
            got = getattr(planner, name)(*args, **kwargs)
            best[i] = min(best[i], time.process_time() - t0)
            same[i] = same[i] and answer_key(name, got) == answer_key(name, answer)
    rows = [{"call": c[0], "cpu_s": b, "same_answer": ok} for c, b, ok in zip(calls, best, same, strict=True)]
    return {"planner": planner.__file__, "calls": rows, "load_average": os.getloadavg()[0]}


def _child(code: Path, *args: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(code))
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], env=env, cwd=code,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} on {code} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(replays: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    """Per checkout: CPU ms per training round of each call kind (the least of its turns), same answers."""
    out: dict[str, Any] = {}
    for kind in ("make_plan", "plan_holds"):
        cpu = [min(r["calls"][i]["cpu_s"] for r in replays) for i, c in enumerate(replays[0]["calls"])
               if c["call"] == kind]
        out[kind] = {"calls": len(cpu), "cpu_ms": 1000 * sum(cpu),
                     "each_ms": [1000 * c for c in cpu],
                     "initial_ms": 1000 * cpu[0] if kind == "make_plan" and cpu else 0.0,
                     "ms_per_round": 1000 * (sum(cpu) - (cpu[0] if kind == "make_plan" and cpu else 0.0))
                     / rounds}
    replans = out["make_plan"]["each_ms"][1:]
    out["make_plan"]["replan_median_ms"] = statistics.median(replans) if replans else 0.0
    out["same_answers"] = all(c["same_answer"] for r in replays for c in r["calls"])
    out["load_average"] = [r["load_average"] for r in replays]
    return out


def write_outputs(doc: dict[str, Any], out: Path) -> Path:
    """``replan_replay.json`` and ``replan_replay.md``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "replan_replay.json").write_text(json.dumps(doc, indent=1))
    job = doc["job"]
    lines = [f"# The planner's CPU time on the re-plans of a {doc['clients']}-client job, replayed", "",
             f"Regenerate: `{doc['command']}` (its docstring says what is timed). The DepL job of "
             "`benchmarks/scale_bench.py` ran once on this checkout "
             f"({job['rounds']} training rounds, {job['replans']} re-plans: {job['replans_infeasible']} "
             f"infeasible, {job['replans_deferred']} deferred, {job.get('replans_skipped', 0)} skipped after "
             f"an infeasible one; load average {job['load_average']:.1f}); its planner calls were replayed "
             f"{doc['repeats']} times per checkout in fresh processes taking turns, the least CPU time of "
             "each call counted. Per training round: the re-plans (the initial plan apart) and the checks "
             "of the remaining plan, divided by the job's training rounds.", "",
             "| code | initial plan, CPU ms | re-plans: calls, CPU ms per training round "
             "| each re-plan, CPU ms (median) "
             "| plan checks: calls, CPU ms per training round | every answer as in the job | load |",
             "|---|---|---|---|---|---|---|"]
    for name, s in doc["codes"].items():
        mp, ph = s["make_plan"], s["plan_holds"]
        load = "-".join(f"{x:.1f}" for x in (min(s["load_average"]), max(s["load_average"])))
        each = " / ".join(f"{v:.1f}" for v in mp["each_ms"][1:])
        lines.append(f"| {name} | {mp['initial_ms']:.0f} | {mp['calls'] - 1}, {mp['ms_per_round']:.1f} "
                     f"| {each} ({mp['replan_median_ms']:.1f}) "
                     f"| {ph['calls']}, {ph['ms_per_round']:.1f} | {'yes' if s['same_answers'] else 'NO'} "
                     f"| {load} |")
    lines += ["", f"In the job itself (one plain run, this checkout): planning "
              f"{job['planning_ms_per_round']:.1f} ms and plan checks "
              f"{job['plan_check_ms_per_round']:.1f} ms per training round.", ""]
    path = out / "replan_replay.md"
    path.write_text("\n".join(lines))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    results = ROOT / "benchmarks" / "results" / "scale"
    parser.add_argument("--profile", type=Path, default=results / "profile.json")
    parser.add_argument("--before", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=results)
    parser.add_argument("--capture-to", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--replay-from", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.capture_to is not None:
        print(json.dumps(capture(args.clients, str(args.profile), args.capture_to)))
        return
    if args.replay_from is not None:
        print(json.dumps(replay(args.replay_from, args.repeats)))
        return
    before = args.before.resolve() if args.before is not None else None
    if args.clients < 1 or args.repeats < 1 or not args.profile.is_file() \
            or (before is not None and not (before / "depl_fl" / "planner").is_dir()):
        print(f"replan_replay: need --clients >= 1, --repeats >= 1, an existing --profile and --before a "
              f"checkout (got {args.clients}, {args.repeats}, {args.profile}, {args.before})",
              file=sys.stderr)
        raise SystemExit(2)
    codes = {"this checkout": ROOT} | ({"before": before} if before is not None else {})
    with tempfile.TemporaryDirectory(prefix="replan-replay-") as tmp:
        job = _child(ROOT, "--capture-to", tmp, "--clients", str(args.clients),
                     "--profile", str(args.profile.resolve()))
        turns: dict[str, list[dict[str, Any]]] = {name: [] for name in codes}
        for _ in range(2):  # two turns each, alternating, so both see the same load
            for name, code in codes.items():
                turns[name].append(_child(code, "--replay-from", str(Path(tmp) / "calls.pkl"),
                                          "--repeats", str(args.repeats)))
    doc = {"clients": args.clients, "repeats": args.repeats, "job": job,
           "codes": {name: summarize(t, int(job["rounds"])) for name, t in turns.items()},
           "command": COMMAND.format(clients=args.clients, before="DIR")}
    print(write_outputs(doc, args.out))


if __name__ == "__main__":
    main()
