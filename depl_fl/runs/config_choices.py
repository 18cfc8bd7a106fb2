"""The closed sets of values of the run configuration, shared by its schema and its readers.

A leaf module (no imports from the project): :mod:`depl_fl.runs.config_schema`
checks the configuration against these sets, the aggregation and the fault
injection read them.
"""

from __future__ import annotations

import math
from typing import Any

AGGREGATION_RULES = ("fedavg", "trimmed_mean", "median")
FAULT_KINDS = ("nan", "huge", "scale", "num_examples", "dtype", "shape", "crash", "slow")


def fault_kind(value: Any) -> str | None:
    """A fault kind as a string: YAML and Hydra read ``nan`` as a float NaN."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return None if value is None else str(value)
