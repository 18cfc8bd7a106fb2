"""Load a script of ``benchmarks/`` as a module, for the tests of its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: The benchmarks folder of this checkout.
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str, module_name: str | None = None) -> ModuleType:
    """``benchmarks/<name>.py`` (``name`` may hold a subfolder: ``a/b``) run as a module.

    The module is named ``module_name``, by default the file's name without ``.py``.
    The script's folder goes on ``sys.path`` first, as ``python benchmarks/<name>.py``
    puts it, so that its imports of sibling scripts resolve in a test run alone.
    """
    path = BENCHMARKS / f"{name}.py"
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(module_name or Path(name).name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
