"""The layers point one way and no module imports itself back, found with ``ast`` in every package.

ground (``errors``, ``console``, ``diskcache``, ``processes``) <- contract <- planner, tracking
<- task (torch, no flwr) <- runs <- orchestration (no flwr) <- Flower glue (``strategies``,
``clients``) <- entry points (``depl_fl.main``, ``depl_fl.cli``, ``benchmarks``).

An import counts wherever it stands (inside functions too), and so does a module
named in a string: ``importlib.import_module("...")``, ``__import__("...")``,
``-m pkg.mod`` and any string that is exactly a project module's dotted name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("depl_fl", "strategies", "clients", "benchmarks")
ENTRY_POINTS = {"depl_fl.main", "depl_fl.cli", "depl_fl.__main__"}
# Helper of the entry points: hydra is fine, the glue is not.
ENTRY_SUPPORT = {"depl_fl.sweep"}
# Layer -> rank: a module imports project modules of a lower rank or of its own layer only.
RANK = {"ground": 0, "contract": 1, "planner": 2, "tracking": 2, "task": 3, "runs": 4,
        "orchestration": 5, "entry_support": 5.5, "strategies": 6, "clients": 6, "entry": 7}
CORE_LAYERS = ("contract", "planner", "tracking", "task", "runs", "orchestration")
HEAVY = ("torch", "flwr", "torchvision", "flwr_datasets", "datasets", "ray", "hydra", "omegaconf")
# Layer -> third-party modules it must never import.
FORBIDDEN = {
    "ground": HEAVY, "contract": HEAVY, "planner": HEAVY, "tracking": HEAVY,
    "task": ("flwr", "ray"), "runs": ("flwr", "ray", "torch"), "orchestration": ("flwr", "ray"),
}
MODULE_NAME = re.compile(r"(?:depl_fl|strategies|clients|benchmarks)(?:\.\w+)+")
DASH_M = re.compile(r"-m\s+([A-Za-z_][\w.]*)")


def module_name(path: Path) -> str:
    """Dotted name of a file under ``ROOT`` (a package's ``__init__`` is the package)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    """Every Python module of the project's packages, by dotted name."""
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def layer_of(module: str) -> str:
    """The layer a project module belongs to."""
    top, _, rest = module.partition(".")
    if top in ("strategies", "clients"):
        return top
    if top == "benchmarks" or module in ENTRY_POINTS:
        return "entry"
    if module in ENTRY_SUPPORT:
        return "entry_support"
    sub = rest.split(".")[0]
    return sub if sub in CORE_LAYERS else "ground"


def _string_targets(node: ast.AST) -> list[str]:
    """Module names a node gives as text: import_module/__import__ arguments, ``-m X``, dotted names."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            return [node.args[0].value]
    if isinstance(node, (ast.List, ast.Tuple)):
        items = node.elts
        return [b.value for a, b in zip(items, items[1:], strict=False)
                if isinstance(a, ast.Constant) and a.value == "-m"
                and isinstance(b, ast.Constant) and isinstance(b.value, str)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if MODULE_NAME.fullmatch(node.value):
            return [node.value]
        return DASH_M.findall(node.value)
    return []


def imported_modules(source: str, package: str = "") -> list[str]:
    """Every module the source names: ``import`` / ``from ... import`` at any depth, and strings.

    ``package`` (the module's package) resolves relative imports. ``from a import b``
    gives ``a`` and ``a.b`` (``b`` may be a submodule).
    """
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            names += _string_targets(node)
    return [n for n in names if n]


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def resolve(name: str, modules: dict[str, Path], importer: str) -> str | None:
    """The project module ``name`` refers to (the longest known prefix), or ``None``.

    Benchmarks import their neighbours by bare name (``from scenarios import ...``):
    a bare name that is a file next to the importer resolves to it.
    """
    folder = importer.rpartition(".")[0]
    if importer.startswith("benchmarks") and f"{folder}.{name}".split(".")[0] == "benchmarks":
        sibling = f"{folder}.{name.split('.')[0]}"
        if sibling in modules:
            return sibling
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def violations(module: str, source: str, modules: dict[str, Path] | None = None) -> list[str]:
    """The layer rules ``module`` (a dotted name) breaks, one string per offending import."""
    modules = project_modules() if modules is None else modules
    layer = layer_of(module)
    package = module if modules.get(module, Path()).name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for name in imported_modules(source, package):
        if _within(name, FORBIDDEN.get(layer, ())):
            found.append(f"{module} imports {name} (layer {layer!r} must not)")
        target = resolve(name, modules, module)
        if target is None or target == module:
            continue
        other = layer_of(target)
        if RANK[other] > RANK[layer] or (RANK[other] == RANK[layer] and other != layer):
            found.append(f"{module} imports {target} (layer {layer!r} must not import layer {other!r})")
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> project modules it imports (function-level imports and strings included)."""
    graph = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        names = imported_modules(path.read_text(encoding="utf-8"), package)
        graph[module] = {t for t in (resolve(n, modules, module) for n in names) if t and t != module}
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start`` imports directly or through others."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo += graph.get(node, ())
    return seen


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import one another (directly or through others), sorted."""
    reach = {m: reachable(graph, m) for m in graph}
    groups = {frozenset({m, *(o for o in reach[m] if m in reach.get(o, ()))}) for m in graph if m in reach[m]}
    return sorted(sorted(g) for g in groups)


MODULES = project_modules()


def test_the_scan_sees_every_package_and_layer() -> None:
    layers = {layer_of(m) for m in MODULES}
    assert {"ground", "contract", "planner", "tracking", "task", "runs", "orchestration",
            "strategies", "clients", "entry", "entry_support"} <= layers
    assert {"strategies.depl_strategy", "clients.client_app", "benchmarks.goal_ceiling",
            "depl_fl.orchestration.controller"} <= set(MODULES)
    # function-level imports count too
    assert imported_modules("def f():\n    import torch.nn as nn\n") == ["torch.nn"]
    assert _within("torch.nn", HEAVY) and not _within("torchx", HEAVY)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_respects_the_layers(module: str) -> None:
    assert violations(module, MODULES[module].read_text(encoding="utf-8"), MODULES) == []


def test_no_import_cycle() -> None:
    assert cycles(import_graph(MODULES)) == []


@pytest.mark.parametrize("module, source", [
    ("depl_fl.runs.report", "def f():\n    from strategies.server_app import run_server\n"),
    ("depl_fl.contract.semantics", "import clients.client_app\n"),
    ("depl_fl.planner.depl", "def f():\n    import torch\n"),
    ("depl_fl.tracking.online", "from flwr.app import Message\n"),
    ("depl_fl.contract.plan", "from depl_fl.planner import make_plan\n"),
    ("depl_fl.task.training", "if True:\n    from flwr.common import log\n"),
    ("depl_fl.errors", "from depl_fl.contract.plan import Plan\n"),
    ("depl_fl.sweep", "from strategies.server_app import run_server\n"),
    ("depl_fl.orchestration.controller", "from flwr.serverapp import Grid\n"),
    ("depl_fl.orchestration.controller", "import importlib\nimportlib.import_module('strategies.x')\n"),
    ("depl_fl.runs.runconfig", "def f():\n    return __import__('depl_fl.orchestration.profiling')\n"),
    ("depl_fl.task.split", "CMD = ['python', '-m', 'clients.warm_worker']\n"),
    ("depl_fl.task.split", "CMD = 'python -m depl_fl.main seed=1'\n"),
    ("depl_fl.runs.report", "DELEGATE = {'x': 'depl_fl.orchestration.profiling'}\n"),
    ("clients.handlers", "from strategies.server_app import make_server_app\n"),
    ("strategies.server_app", "from depl_fl.main import main\n"),
    ("depl_fl.planner.depl", "from depl_fl.tracking.online import ReplanPolicy\n"),
    ("depl_fl.orchestration.profiling", "from benchmarks.scenarios import paper_like\n"),
])
def test_a_bad_import_is_caught(module: str, source: str) -> None:
    assert violations(module, source, MODULES)


def test_a_cycle_is_caught_through_functions_and_strings() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    sources = {"clients.x": "def f():\n    from clients.y import g\n",
               "clients.y": "CMD = ['python', '-m', 'clients.x']\n"}
    modules = {name: Path(f"{name.replace('.', '/')}.py") for name in sources}
    graph = {m: {t for t in (resolve(n, modules, m) for n in imported_modules(s, "clients")) if t and t != m}
             for m, s in sources.items()}
    assert cycles(graph) == [["clients.x", "clients.y"]]


def test_entry_points_may_import_the_glue() -> None:
    assert violations("depl_fl.main", "from strategies.server_app import run_server\n", MODULES) == []
    assert violations("benchmarks.plan_pit", "from strategies.server_app import run_server\n", MODULES) == []
    assert violations("depl_fl.task.models", "import torch\n", MODULES) == []
    assert violations("depl_fl.orchestration.profiling", "import torch\n", MODULES) == []
