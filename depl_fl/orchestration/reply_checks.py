"""Validation of client training replies before aggregation (pure numpy, no flwr import).

A reply is aggregated only when it carries no error, exactly the expected
sub-network entry names with the expected shapes, the expected kind of dtype
(a real floating dtype for weights and floating buffers: no bool, complex or
object arrays; an integer dtype for integer buffers such as BatchNorm's
``num_batches_tracked``; bool for a flag buffer), only finite values, and a positive finite
``num-examples``. Everything else is rejected with a reason.
The weight and update-norm bounds follow in :mod:`strategies.robust_aggregation`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from depl_fl.orchestration.npy_arrays import array_of

WEIGHT_KEY = "num-examples"


def array_problem(name: str, arr: np.ndarray, expected: tuple[int, ...],
                  integer: bool | str = False) -> str | None:
    """Why one received array is unusable: wrong shape or dtype kind, NaN/inf (``None``: fine).

    ``integer`` says the entry is an integer buffer (a counter): it must then
    have an integer dtype (bool is no counter). ``integer="bool"`` says it is
    a flag buffer (``register_buffer("initialized", torch.tensor(False))``):
    it must then be bool.
    """
    if tuple(arr.shape) != expected:
        return f"{name} has shape {tuple(arr.shape)}, expected {expected}"
    if integer == "bool":
        if arr.dtype != np.bool_:
            return f"{name} has dtype {arr.dtype}, expected a bool buffer"
        return None
    if integer:
        if not np.issubdtype(arr.dtype, np.integer):
            return f"{name} has dtype {arr.dtype}, expected an integer buffer"
        return None
    if not np.issubdtype(arr.dtype, np.floating):
        # integer, bool, complex and object arrays are no model weights
        return f"{name} has dtype {arr.dtype}, expected real floating point"
    if not np.all(np.isfinite(arr)):
        return f"{name} contains NaN or inf"
    return None


def _integer_kind(name: str, integer_entries: frozenset[str] | set[str] | Mapping[str, str]) -> bool | str:
    """``"bool"`` for a flag buffer, True for any other integer buffer, False for floating entries."""
    if isinstance(integer_entries, Mapping):
        kind = integer_entries.get(name)
        return False if kind is None else ("bool" if np.dtype(kind) == np.bool_ else True)
    return name in integer_entries


def check_update(state: Mapping[str, np.ndarray] | None, metrics: Mapping[str, Any] | None,
                 expected_shapes: Mapping[str, tuple[int, ...]],
                 integer_entries: frozenset[str] | set[str] | Mapping[str, str] = frozenset()) -> list[str]:
    """Problems of one pruned update (empty list = acceptable).

    Parameters
    ----------
    state : mapping of str to array, or None
        The kept weights sent by the client.
    metrics : mapping, or None
        The reply's metrics (must hold a positive finite ``num-examples``).
    expected_shapes : mapping of str to tuple of int
        Names and shapes of the planned sub-network's weights.
    integer_entries : set of str, or mapping of str to dtype name
        Entries that are integer buffers in the global state; as a mapping, a
        ``"bool"`` one is a flag buffer that must come back as bool.

    Returns
    -------
    list of str
        One human-readable reason per problem found.
    """
    problems: list[str] = []
    if state is None:
        problems.append("no ArrayRecord 'arrays'")
    else:
        missing = sorted(set(expected_shapes) - set(state))
        extra = sorted(set(state) - set(expected_shapes))
        if missing:
            problems.append(f"missing arrays {missing}")
        if extra:
            problems.append(f"unexpected arrays {extra}")
        for name in sorted(set(state) & set(expected_shapes)):
            problem = array_problem(name, np.asarray(state[name]), tuple(expected_shapes[name]),
                                    integer=_integer_kind(name, integer_entries))
            if problem is not None:
                problems.append(problem)
    if metrics is None:
        problems.append("no MetricRecord 'metrics'")
    else:
        weight = metrics.get(WEIGHT_KEY)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) \
                or not math.isfinite(weight) or weight <= 0:
            problems.append(f"{WEIGHT_KEY} must be a positive finite number, got {weight!r}")
        loss = metrics.get("train-loss")
        if isinstance(loss, (int, float)) and not isinstance(loss, bool) and not math.isfinite(loss):
            problems.append(f"train-loss is {loss!r}")
    return problems


def unpack_reply(msg: Any) -> tuple[dict[str, np.ndarray] | None, dict[str, Any] | None, str | None]:
    """Split a Flower reply ``Message`` into (state, metrics, error reason).

    Duck-typed on the Message API (``has_error``, ``error.reason``,
    ``content["arrays"]``, ``content["metrics"]``) so that it imports no flwr.
    """
    if msg.has_error():
        err = msg.error
        return None, None, f"error reply (code {err.code}): {err.reason}"
    if not msg.has_content():
        return None, None, "reply without content"
    content = msg.content
    state = None
    records = content.array_records  # a new view on every access: taken once
    if "arrays" in records:
        state = {k: array_of(v) for k, v in records["arrays"].items()}
    metric_records = content.metric_records  # a new view on every access: taken once
    metrics = dict(metric_records["metrics"]) if "metrics" in metric_records else None
    return state, metrics, None


def check_reply(msg: Any, expected_shapes: Mapping[str, tuple[int, ...]],
                integer_entries: frozenset[str] | set[str] | Mapping[str, str] = frozenset()
                ) -> tuple[dict[str, np.ndarray] | None, dict[str, Any] | None, list[str]]:
    """Unpack and check one training reply: ``(state, metrics, problems)``."""
    try:
        state, metrics, error = unpack_reply(msg)
    except Exception as exc:  # malformed payloads must be rejected, never crash the round
        return None, None, [f"unreadable reply: {type(exc).__name__}: {exc}"]
    if error is not None:
        return None, None, [error]
    return state, metrics, check_update(state, metrics, expected_shapes, integer_entries)
