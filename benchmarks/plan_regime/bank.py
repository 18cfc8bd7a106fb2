"""Trajectory bank: what fixed plans really do after a job's federated exploration.

For every seed of a setting, the job explores as usual (federated profiling),
then runs one fixed plan -- one model on one client set for ``--rounds``
rounds -- and records the validation and test loss of every round. Each
policy is its own job (same seed, so the same exploration and the same start
model). The bank is the evidence :mod:`benchmarks.plan_regime.fit` fits and
checks the plan regime's constants on: no planner decision is involved, every
trajectory is an honest draw of "this model on this set for K rounds".

Policies: ``standard`` = p50 and full on every client and on cluster B, p50 on
cluster A; ``subsets`` = 8 seeded random client sets of 2..n-1 clients (6 with
p50, 2 with full); ``small`` = the set sizes plans use on a large federation:
the 10, 20 and 40 clients with the most training data (p50) and the 20 of them
(full), and seeded random sets of 10, 20 and 40 clients (p50) and of 80 (full).

    python benchmarks/plan_regime/bank.py --name d1 --seeds 100-119 --policies standard \\
        --overrides "num_clients=8 partition.alpha=0.5 target.loss=0.4" [--out benchmarks/plan_regime/bank]

Per seed folder ``OUT/NAME/seed<S>/``: ``profile.json`` (the exploration's
profile cache file, with the fit inputs), ``job.json`` (config and scenario of
the job) and one ``<model>_<set>.json`` per policy. The bank the committed
constants were fitted on (d1-d4, seeds 100-119, both policy kinds) is
``benchmarks/results/plan_regime/bank.tar.gz`` (unpacks to ``bank2/``). A
long-horizon bank (d2 and d4, seeds 100-109, standard policies, ``--rounds
120``; about 40 minutes on 2 cores, one process per setting) is
``benchmarks/results/plan_regime/long/bank-long.tar.gz`` (unpacks to
``long/``), checked with ``python benchmarks/plan_regime/fit.py long
--settings d2,d4 --out benchmarks/results/plan_regime/long``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")


def policy_plan(model: str, which: str, rounds: int):
    """A ``plan_fn`` that ignores the profile and returns ``model`` on ``which`` for ``rounds`` rounds."""
    from depl_fl.contract.plan import Plan, RoundDecision

    def plan_fn(scenario, targets, start):  # noqa: ARG001 - the planner's signature
        if which == "all":
            ids = [c.id for c in scenario.clients]
        elif which.startswith("top"):
            ids = largest_clients(scenario, int(which[3:]))
        elif which in {c.cluster for c in scenario.clients}:
            ids = [c.id for c in scenario.clients if c.cluster == which]
        else:
            ids = which.split("+")
        levels = {scenario.client(c).cluster: 0 for c in ids}
        round_ = RoundDecision(model, tuple(ids), dict(levels))
        return Plan(method="depl", feasible=True, rounds=[round_] * rounds,
                    predicted={"cost_joules": 0.0, "time_s": 0.0, "loss_quantile": 0.0, "probability": 1.0})

    return plan_fn


def largest_clients(scenario, k: int) -> list[str]:
    """The ``k`` clients with the most training samples (ties: the earlier client)."""
    order = sorted(range(len(scenario.clients)), key=lambda i: (-scenario.clients[i].num_samples, i))
    return [scenario.clients[i].id for i in order[:k]]


def small_policies(seed: int, num_clients: int) -> list[tuple[str, str, str]]:
    """(model, set, label): largest 10/20/40 clients (p50) and 20 (full); random 10/20/40 (p50), 80 (full)."""
    import numpy as np

    rng = np.random.default_rng(seed * 7 + 2)
    out = [("p50", f"top{k}", f"top{k}") for k in (10, 20, 40)] + [("full", "top20", "top20")]
    for size, model in ((10, "p50"), (20, "p50"), (40, "p50"), (80, "full")):
        ids = sorted(int(j) for j in rng.choice(num_clients, size=min(size, num_clients), replace=False))
        out.append((model, "+".join(f"c{j}" for j in ids), f"random{size}"))
    return out


def subset_policies(seed: int, num_clients: int) -> list[tuple[str, str]]:
    """8 seeded random client sets of 2..n-1 clients: 6 trained with p50, 2 with full."""
    import numpy as np

    rng = np.random.default_rng(seed * 7 + 1)
    out = []
    for i in range(8):
        size = int(rng.integers(2, num_clients))
        ids = sorted(int(j) for j in rng.choice(num_clients, size=size, replace=False))
        out.append(("full" if i >= 6 else "p50", "+".join(f"c{j}" for j in ids)))
    return out


STANDARD = [("p50", "B"), ("p50", "all"), ("full", "all"), ("full", "B"), ("p50", "A")]


def run_policy(overrides: list[str], model: str, which: str, rounds: int, folder: Path) -> dict:
    """One job: exploration, then the fixed plan; returns the policy record."""
    import strategies.server_app as server_app
    from depl_fl.main import run_job
    from depl_fl.runs.runconfig import compose_config

    # profile.explore.without_tracking=thorough: the exploration the bank was recorded with (every client)
    cfg = compose_config(overrides + ["simulation=inprocess", "output.plot=false", "tracking.enabled=false",
                                      "profile.explore.without_tracking=thorough",
                                      f"target.max_rounds={rounds}", "target.deadline_s=100000"])
    cache = tempfile.mkdtemp(prefix="bank-cache-")
    cfg["profile"]["cache_dir"] = cache
    server_app.make_plan_fn = lambda _cfg: policy_plan(model, which, rounds)
    job_dir = Path(tempfile.mkdtemp(prefix="bank-job-"))
    try:
        doc = json.loads(run_job(cfg, job_dir).read_text())
        if not (folder / "profile.json").exists():
            cached = next(Path(cache).glob("profile-fed-*.json"))
            shutil.copy(cached, folder / "profile.json")
            job = {"config": doc["config"], "scenario": doc["scenario"]}
            (folder / "job.json").write_text(json.dumps(job))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(job_dir, ignore_errors=True)
    train = [r for r in doc["rounds"] if r.get("phase") == "train"]
    return {"model": model, "set": which, "clients": list(doc["plan"]["rounds"][0]["clients"]),
            "start_loss": doc["scenario"]["loss"]["initial"],
            "val": [r["loss"] for r in train], "test": [r["test_loss"] for r in train],
            "sem": [r.get("loss_sem") for r in train]}


def policies_of(kind: str, seed: int, num_clients: int) -> list[tuple[str, str, str]]:
    """(model, set, label) of every policy of ``kind`` for one seed; the label names its file."""
    if kind == "small":
        return small_policies(seed, num_clients)
    pairs = STANDARD if kind == "standard" else subset_policies(seed, num_clients)
    return [(model, which, which) for model, which in pairs]


def seeds_of(text: str) -> list[int]:
    """``100-119`` or ``1,2,5``."""
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(v) for v in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--overrides", default="")
    parser.add_argument("--seeds", required=True)
    parser.add_argument("--policies", choices=("standard", "subsets", "small"), default="standard")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "plan_regime" / "bank"))
    args = parser.parse_args()
    from depl_fl.runs.runconfig import compose_config

    for seed in seeds_of(args.seeds):
        overrides = args.overrides.split() + [f"seed={seed}"]
        folder = Path(args.out) / args.name / f"seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        n = int(compose_config(overrides)["num_clients"])
        for model, which, label in policies_of(args.policies, seed, n):
            target = folder / f"{model}_{label}.json"
            if target.exists():
                continue
            t0 = time.time()
            record = run_policy(overrides, model, which, args.rounds, folder)
            record["set"] = label
            target.write_text(json.dumps({"setting": args.name, "seed": seed, "overrides": args.overrides,
                                          **record}))
            print(f"{args.name} seed {seed} {model}:{which} {time.time() - t0:.0f}s "
                  f"final test loss {record['test'][-1]:.3f}", flush=True)


if __name__ == "__main__":
    main()
