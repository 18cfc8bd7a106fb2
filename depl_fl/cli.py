"""The ``depl-fl`` command line (docs/FORMATS.md, "Command").

Sub-commands
------------
``plan``
    Read a scenario, compute a dependable minimum-cost plan and write it.
    Exit 0 with a dependable plan, 3 when no dependable plan exists (the plan
    file is still written, with ``"feasible": false`` and the best reachable
    probability).
``evaluate``
    Check a plan against a scenario and targets and print the Monte Carlo
    figures of :func:`depl_fl.contract.semantics.evaluate_plan` as JSON on stdout.
    Exit 0 when the plan is valid, 4 when it is not (e.g. made for another
    scenario: the JSON is still printed, with ``"valid": false`` and its
    errors, and one line on stderr says so). A valid plan that misses the
    target probability exits 0 with ``"dependable": false``, or 3 with
    ``--require-dependable``.
``profile``, ``report``, ``split``
    Handed over to :mod:`depl_fl.orchestration.profiling`, :mod:`depl_fl.runs.report` and
    :mod:`depl_fl.task.split` (per-node image folders for ``dataset=folder``).

User mistakes (bad files, bad options) print exactly one line
``depl-fl: <message>`` on stderr and exit with the error's status (2 for bad
input); unexpected exceptions are bugs and propagate with their traceback.
The exit statuses are listed in :mod:`depl_fl.errors`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from depl_fl.console import PROG, SLOW_STEP_S, OneLineParser, notice_if_slow, parse_or_status
from depl_fl.errors import INVALID_PLAN_STATUS, DeplError, InfeasibleError, ScenarioError

MIN_TRAJECTORIES = 20000
#: Finest discretisation step: the expanded graph grows like 1/eta**2 (0.001 plans the example in ~3 s,
#: 1e-6 runs out of memory).
MIN_ETA = 1e-3
#: Most Monte Carlo trajectories of ``evaluate``: about 1 GB of float64 working arrays.
MAX_TRAJECTORIES = 10_000_000
DELEGATED = {"profile": "depl_fl.orchestration.profiling", "report": "depl_fl.runs.report",
             "split": "depl_fl.task.split"}


def _number(text: str) -> float:
    """Parse a float; NaN and infinities are passed on for the targets to reject."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _seed(text: str) -> int:
    seed = _integer(text)
    if not 0 <= seed < 2**63:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**63), got {text!r}")
    return seed


def _add_targets(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target-loss", type=_number, required=True, metavar="X",
                        help="target loss L*")
    parser.add_argument("--target-prob", type=_number, required=True, metavar="P",
                        help="target probability pi, in (0, 1)")
    parser.add_argument("--deadline-s", type=_number, required=True, metavar="T",
                        help="deadline in seconds (sum of round times)")
    parser.add_argument("--max-rounds", type=_integer, default=None, metavar="K",
                        help="maximum number of rounds (optional)")
    parser.add_argument("--seed", type=_seed, default=0, metavar="S",
                        help="seed of the Monte Carlo, >= 0 (default 0)")


def _build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=(
        "DepL for Flower: plan federated training that reaches a target loss with a "
        "target probability within a deadline at minimum energy."))
    subs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                 parser_class=OneLineParser)

    plan = subs.add_parser("plan", help="compute a dependable plan",
                           description="Compute a dependable minimum-cost plan. Exit 3 "
                                       "(plan written with feasible false) when none exists.")
    plan.add_argument("scenario", metavar="SCENARIO", help="scenario JSON file")
    _add_targets(plan)
    plan.add_argument("--method", choices=["depl", "expectation", "optimum", "full"],
                      default="depl", help="planning method (default depl)")
    plan.add_argument("--eta", type=_number, default=None, metavar="E",
                      help=f"discretisation step of the expanded graph, in [{MIN_ETA:g}, 1] (default: "
                           "chosen from the scenario and recorded in the plan as 'eta'); read by "
                           "--method depl and expectation")
    plan.add_argument("--guarantee", choices=["gaussian", "cantelli"], default=None,
                      help="quantile bound of --method depl's search (default gaussian; other methods "
                           "do not read it)")
    plan.add_argument("--out", required=True, metavar="PLAN", help="plan JSON file to write")

    evaluate = subs.add_parser(
        "evaluate", help="check a plan by Monte Carlo",
        description="Check a plan and print its Monte Carlo figures as JSON. Exit status: 0 the "
                    f"plan is valid, {INVALID_PLAN_STATUS} it is invalid for the scenario and targets "
                    "(JSON still printed, 'valid' false with its 'errors'), 2 bad input, 3 with "
                    "--require-dependable when a valid plan is not dependable.")
    evaluate.add_argument("scenario", metavar="SCENARIO", help="scenario JSON file")
    evaluate.add_argument("plan", metavar="PLAN", help="plan JSON file")
    _add_targets(evaluate)
    evaluate.add_argument("--trajectories", type=_integer, default=MIN_TRAJECTORIES,
                          metavar="N", help=f"Monte Carlo trajectories (default and minimum "
                                            f"{MIN_TRAJECTORIES}, at most {MAX_TRAJECTORIES})")
    evaluate.add_argument("--allow-few", action="store_true",
                          help=f"allow fewer than {MIN_TRAJECTORIES} trajectories (quick checks)")
    evaluate.add_argument("--require-dependable", action="store_true",
                          help="exit 3 when the plan is valid but its probability misses --target-prob")

    for name, module in DELEGATED.items():
        subs.add_parser(name, add_help=False, help=f"see '{PROG} {name} --help' ({module})")
    return parser


def _targets(args: argparse.Namespace) -> Any:
    from depl_fl.contract.plan import Targets

    return Targets(target_loss=args.target_loss, target_prob=args.target_prob,
                   deadline_s=args.deadline_s, max_rounds=args.max_rounds)


def _cap_text(targets: Any) -> str:
    """``", max_rounds N"`` when the targets cap the rounds (a limit that can bind), else empty."""
    return "" if targets.max_rounds is None else f", max_rounds {targets.max_rounds}"


def _write_plan(plan: Any, path: str) -> None:
    from depl_fl.contract.plan import save_plan

    try:
        save_plan(plan, path)
    except OSError as exc:
        raise ScenarioError(f"--out {path}: cannot write file ({exc.strerror or exc})") from None


def _relaxed_plan(plan: Any, scenario: Any, targets: Any, args: argparse.Namespace) -> Any:
    """The plan at a longer deadline, to say whether more deadline makes one (None: the search never ran)."""
    from depl_fl.contract.plan import relaxed_targets
    from depl_fl.planner import make_plan

    longer = relaxed_targets(plan, targets)
    if longer is None:
        return None
    with notice_if_slow(_progress, f"{PROG}: no dependable plan within {targets.deadline_s:g} s; still "
                        f"planning within {longer.deadline_s:g} s to say whether a longer deadline helps"):
        return make_plan(scenario, longer, method=args.method, eta=args.eta,
                         guarantee=args.guarantee or "gaussian", seed=args.seed)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _cmd_plan(args: argparse.Namespace) -> int:
    from depl_fl.contract.plan import CLI_KNOBS, Plan, relief_text, shortfall_text
    from depl_fl.contract.scenario import load_scenario
    from depl_fl.runs.mode_keys import check_plan_options

    if args.eta is not None and not (math.isfinite(args.eta) and MIN_ETA <= args.eta <= 1.0):
        raise ScenarioError(f"--eta: must be in [{MIN_ETA:g}, 1], got {args.eta!r}")
    check_plan_options(args.method, {"--guarantee": args.guarantee, "--eta": args.eta})
    _refuse_overwriting_input(args.out, args.scenario)
    targets = _targets(args)
    scenario = load_scenario(args.scenario)
    from depl_fl.planner import make_plan

    try:
        slow = f"{PROG}: still searching for a dependable plan after {SLOW_STEP_S:g} s"
        with notice_if_slow(_progress, slow):
            plan = make_plan(scenario, targets, method=args.method, eta=args.eta,
                             guarantee=args.guarantee or "gaussian", seed=args.seed)
    except MemoryError:
        raise ScenarioError(f"{args.scenario}: out of memory while planning: the expanded graph is too "
                            f"large at --eta {args.eta if args.eta is not None else 'auto'} (extreme "
                            "loss-profile values, or try a larger "
                            "--eta)") from None
    except OverflowError as exc:
        raise ScenarioError(f"{args.scenario}: a number overflowed while planning ({exc}); the "
                            "scenario's values or the targets are out of range") from None
    except InfeasibleError as exc:
        # No plan at all (e.g. not even one round fits the deadline): still leave a plan
        # file behind, as the contract asks, then report the reason.
        _write_plan(Plan(method=args.method, feasible=False, rounds=[],
                         predicted={"probability": 0.0}, extra={"reason": str(exc)}), args.out)
        raise
    _write_plan(plan, args.out)
    predicted = plan.predicted or {}
    if not plan.feasible:
        relief = relief_text(plan, _relaxed_plan(plan, scenario, targets, args), targets, CLI_KNOBS)
        print(f"{PROG}: no dependable plan: {shortfall_text(plan, targets.target_prob)}{relief}, target "
              f"{targets.target_prob:g} (target loss {targets.target_loss:g}, deadline "
              f"{targets.deadline_s:g} s{_cap_text(targets)}, method {args.method}; wrote {args.out} with "
              "feasible false)", file=sys.stderr)
        return InfeasibleError.exit_status
    print(f"{PROG}: plan written to {args.out}: {len(plan.rounds)} rounds, "
          f"cost {_fmt(predicted.get('cost_joules'))} J, time {_fmt(predicted.get('time_s'))} s, "
          f"P[loss <= {targets.target_loss:g}] = {_fmt(predicted.get('probability'))} "
          f"+- {_fmt(predicted.get('probability_stderr'))} "
          f"(method {plan.method}, {plan.planner_seconds:.3g} s)"
          f"{_dependability_note(predicted.get('probability'), targets.target_prob)}")
    return 0


def _dependability_note(probability: Any, target_prob: float) -> str:
    # The expectation baseline plans on the mean only and may miss the target probability.
    if isinstance(probability, (int, float)) and probability < target_prob:
        return f"; NOT dependable: {probability:.4g} < target {target_prob:g}"
    return ""


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "?"


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from depl_fl.contract.plan import load_plan
    from depl_fl.contract.scenario import load_scenario
    from depl_fl.contract.semantics import evaluate_plan

    if args.trajectories < 1 or (args.trajectories < MIN_TRAJECTORIES and not args.allow_few):
        raise ScenarioError(f"--trajectories: must be >= {MIN_TRAJECTORIES} (the contract's "
                            f"minimum; --allow-few lowers it to 1), got {args.trajectories}")
    if args.trajectories > MAX_TRAJECTORIES:
        raise ScenarioError(f"--trajectories: must be <= {MAX_TRAJECTORIES}, got {args.trajectories}")
    targets = _targets(args)
    scenario = load_scenario(args.scenario)
    plan = load_plan(args.plan)
    result = evaluate_plan(scenario, plan.rounds, targets, n=args.trajectories, seed=args.seed)
    print(json.dumps(result, indent=2))
    return _evaluation_status(result, args)


def _evaluation_status(result: dict[str, Any], args: argparse.Namespace) -> int:
    """Exit status of ``evaluate``, with one line on stderr when the check failed."""
    if not result["valid"]:
        errors = result["errors"]
        print(f"{PROG}: invalid plan {args.plan} for {args.scenario}: {len(errors)} error(s), first: "
              f"{_one_line(str(errors[0]))}", file=sys.stderr)
        return INVALID_PLAN_STATUS
    if args.require_dependable and not result["dependable"]:
        print(f"{PROG}: plan {args.plan} is not dependable: P[loss <= {args.target_loss:g}] = "
              f"{_fmt(result['probability'])} < target {args.target_prob:g}", file=sys.stderr)
        return InfeasibleError.exit_status
    return 0


def _refuse_overwriting_input(out: str, *inputs: str) -> None:
    """``--out`` must not name an input file: the plan would overwrite it."""
    target = Path(out)
    for source in inputs:
        same = Path(source).resolve() == target.resolve()
        if not same and target.exists() and Path(source).exists():
            same = target.samefile(source)  # hard links and other aliases
        if same:
            raise ScenarioError(f"--out {out}: is the input file {source}; refusing to overwrite it")


def _delegate(command: str, argv: list[str]) -> int:
    module_name = DELEGATED[command]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            print(f"{PROG}: '{command}' is not available ({module_name} is missing)",
                  file=sys.stderr)
        else:
            print(f"{PROG}: '{command}' needs the Python package {exc.name!r} "
                  "(install depl-fl[fl])", file=sys.stderr)
        return 2
    status = module.main(argv)
    return 0 if status is None else int(status)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``depl-fl`` command line.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name (default ``sys.argv[1:]``).

    Returns
    -------
    int
        Exit status: 0 success, 2 bad input, 3 no dependable plan, 4 invalid plan
        (``evaluate``); see :mod:`depl_fl.errors`.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list and args_list[0] in DELEGATED:
            return _delegate(args_list[0], args_list[1:])
        args = parse_or_status(_build_parser(), args_list)
        if isinstance(args, int):
            return args
        if args.command == "plan":
            return _cmd_plan(args)
        return _cmd_evaluate(args)
    except DeplError as exc:
        print(f"{PROG}: {_one_line(str(exc))}", file=sys.stderr)
        return exc.exit_status


def _one_line(message: str) -> str:
    return " ".join(message.split())


if __name__ == "__main__":
    sys.exit(main())
