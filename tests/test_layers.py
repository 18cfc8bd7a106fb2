"""The layers point one way: every import in ``depl_fl`` (also inside functions) is checked with ``ast``.

ground (``errors``, ``console``) <- contract <- planner, tracking <- task (torch, no flwr)
<- runs <- Flower glue (``strategies``, ``clients``) <- entry points (``main``, ``cli``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "depl_fl"
ENTRY_POINTS = {"depl_fl/main.py", "depl_fl/cli.py", "depl_fl/__main__.py"}
# Helpers of the entry points: hydra is fine, the glue is not.
ENTRY_SUPPORT = {"depl_fl/sweep.py"}
GLUE = ("clients", "strategies")
HEAVY = ("torch", "flwr", "torchvision", "flwr_datasets", "datasets", "ray", "hydra", "omegaconf")
# Layer of a module (its sub-package) -> modules it must never import.
FORBIDDEN = {
    "ground": ("depl_fl.contract", "depl_fl.planner", "depl_fl.tracking", "depl_fl.task", "depl_fl.runs",
               *HEAVY),
    "contract": ("depl_fl.planner", "depl_fl.tracking", "depl_fl.task", "depl_fl.runs", *HEAVY),
    "planner": ("depl_fl.tracking", "depl_fl.task", "depl_fl.runs", *HEAVY),
    "tracking": ("depl_fl.planner", "depl_fl.task", "depl_fl.runs", *HEAVY),
    "task": ("depl_fl.runs", "flwr", "ray"),
}


def imported_modules(source: str) -> list[str]:
    """Every module an ``import`` / ``from ... import`` statement names, at any depth."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(relative: str, source: str) -> list[str]:
    """The layer rules ``relative`` (``depl_fl/...``) breaks, one string per offending import."""
    parts = relative.split("/")
    if len(parts) > 2:
        layer = parts[1]
    else:
        layer = None if relative in ENTRY_POINTS | ENTRY_SUPPORT else "ground"
    found = []
    for module in imported_modules(source):
        if relative not in ENTRY_POINTS and _within(module, GLUE):
            found.append(f"{relative} imports {module} (only entry points may import the glue)")
        if layer in FORBIDDEN and _within(module, FORBIDDEN[layer]):
            found.append(f"{relative} imports {module} (layer {layer!r} must not)")
    return found


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_scan_sees_every_layer() -> None:
    layers = {p.relative_to(PACKAGE).parts[0] for p in _modules() if len(p.relative_to(PACKAGE).parts) > 1}
    assert {"contract", "planner", "tracking", "task", "runs"} <= layers
    # function-level imports count too
    assert imported_modules("def f():\n    import torch.nn as nn\n") == ["torch.nn"]
    assert _within("torch.nn", HEAVY) and not _within("torchx", HEAVY)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_respects_the_layers(path: Path) -> None:
    relative = path.relative_to(ROOT).as_posix()
    assert violations(relative, path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("relative, source", [
    ("depl_fl/runs/report.py", "def f():\n    from strategies.profiling import main\n"),
    ("depl_fl/contract/semantics.py", "import clients.client_app\n"),
    ("depl_fl/planner/depl.py", "def f():\n    import torch\n"),
    ("depl_fl/tracking/online.py", "from flwr.app import Message\n"),
    ("depl_fl/contract/plan.py", "from depl_fl.planner import make_plan\n"),
    ("depl_fl/task/training.py", "if True:\n    from flwr.common import log\n"),
    ("depl_fl/errors.py", "from depl_fl.contract.plan import Plan\n"),
    ("depl_fl/sweep.py", "from strategies.server_app import run_server\n"),
])
def test_a_bad_import_is_caught(relative: str, source: str) -> None:
    assert violations(relative, source)


def test_entry_points_may_import_the_glue() -> None:
    assert violations("depl_fl/main.py", "from strategies.profiling import ensure_profile\n") == []
    assert violations("depl_fl/task/models.py", "import torch\n") == []
