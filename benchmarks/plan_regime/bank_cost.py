"""What a trajectory bank costs: the modelled energy of its explorations and fixed plans.

A network's plan-regime constants are fitted on its trajectory bank
(:mod:`benchmarks.plan_regime.bank`): every seed explores once and then runs
each fixed policy for its rounds. That work is paid once per network, before
any job plans with the constants, and belongs in the cost of using them. This
script prices it in the same modelled joules as the jobs: each exploration's
recorded cost, and each policy round at its clusters' lowest resource level
(as the bank runs it) by :func:`depl_fl.contract.semantics.round_energy` on the
seed's own scenario.

    python benchmarks/plan_regime/bank_cost.py BANK_DIR [--out FILE.md] [--source ARCHIVE]

``BANK_DIR`` holds ``<setting>/seed<S>/`` folders (an unpacked bank, e.g.
``tar xzf benchmarks/results/plan_regime/digits_resnet/bank.tar.gz -C /tmp/bank``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from depl_fl.contract.plan import RoundDecision  # noqa: E402
from depl_fl.contract.scenario import scenario_from_dict  # noqa: E402
from depl_fl.contract.semantics import round_energy  # noqa: E402

NOT_POLICIES = {"job.json", "profile.json"}


@dataclass
class BankCost:
    """Modelled energy of one bank setting."""

    explorations: int = 0
    exploration_j: float = 0.0
    policies: int = 0
    policy_rounds: int = 0
    policy_j: float = 0.0

    @property
    def total_j(self) -> float:
        """Explorations plus fixed plans."""
        return self.exploration_j + self.policy_j


def seed_cost(folder: Path, cost: BankCost) -> None:
    """Add one seed folder's exploration and policies to ``cost``."""
    scenario = scenario_from_dict(json.loads((folder / "job.json").read_text())["scenario"])
    profile = json.loads((folder / "profile.json").read_text())
    cost.explorations += 1
    cost.exploration_j += float(profile["profile"]["cost"]["energy_j"])
    for path in sorted(folder.glob("*.json")):
        if path.name in NOT_POLICIES:
            continue
        policy = json.loads(path.read_text())
        ids = tuple(policy["clients"])
        levels = {scenario.client(c).cluster: 0 for c in ids}
        rounds = len(policy["val"])
        cost.policies += 1
        cost.policy_rounds += rounds
        cost.policy_j += rounds * round_energy(scenario, RoundDecision(policy["model"], ids, levels))


def bank_costs(bank: Path) -> dict[str, BankCost]:
    """Per setting folder of ``bank``, its modelled cost."""
    costs: dict[str, BankCost] = {}
    for folder in sorted(bank.glob("*/seed*")):
        if (folder / "job.json").is_file() and (folder / "profile.json").is_file():
            seed_cost(folder, costs.setdefault(folder.parent.name, BankCost()))
    return costs


def unpacked_into(bank: Path, source: str) -> Path:
    """Where ``source`` unpacks to give ``bank``: its parent when the archive holds ``bank``'s folder."""
    with tarfile.open(source) as archive:
        first = archive.getnames()[0]
    return bank.parent if first.split("/")[0] == bank.name else bank


def table(bank: Path, costs: dict[str, BankCost], source: str | None = None) -> str:
    """The markdown report (``source``: the archive ``bank`` was unpacked from, if any)."""
    unpack = []
    if source:
        into = unpacked_into(bank, source)
        unpack = [f"    mkdir -p {into} && tar xzf {source} -C {into}"]
    lines = [f"# Modelled energy of the trajectory bank `{bank.name}`", "", *unpack,
             f"    python benchmarks/plan_regime/bank_cost.py {bank}", "",
             "| setting | explorations | exploration J | fixed plans | their rounds | their J | total J |",
             "|---|---|---|---|---|---|---|"]
    total = BankCost()
    for name, c in costs.items():
        lines.append(f"| {name} | {c.explorations} | {c.exploration_j:.0f} | {c.policies} "
                     f"| {c.policy_rounds} | {c.policy_j:.0f} | {c.total_j:.0f} |")
        for field in ("explorations", "exploration_j", "policies", "policy_rounds", "policy_j"):
            setattr(total, field, getattr(total, field) + getattr(c, field))
    lines.append(f"| all | {total.explorations} | {total.exploration_j:.0f} | {total.policies} | "
                 f"{total.policy_rounds} | {total.policy_j:.0f} | **{total.total_j:.0f}** |")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bank", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--source", default=None, help="the archive BANK was unpacked from (for the report)")
    args = parser.parse_args()
    costs = bank_costs(args.bank)
    if not costs:
        print(f"bank_cost: no <setting>/seed<S>/ folders with job.json and profile.json under {args.bank}",
              file=sys.stderr)
        return 2
    text = table(args.bank, costs, args.source)
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
