"""Shared pieces of the pydantic schemas: number types and one-line, field-named errors.

The scenario, the plan and the run configuration are validated by pydantic
models; :func:`parse` turns the first validation problem into one
:class:`~depl_fl.errors.ScenarioError` line ``<field path>: <problem>, got <value>``,
for example ``clusters[0].levels[1].flops_per_s: must be > 0, got -1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from depl_fl.errors import ScenarioError

#: Largest integer accepted anywhere (counts, capacities, seeds): still exact as a float sum.
MAX_INT = 2**53


def _integral(value: Any) -> Any:
    """Accept an int or an integral float (``180.0``); never a bool or a string."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PydanticCustomError("int_type", "expected an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise PydanticCustomError("int_type", "expected an integer")
        return int(value)
    return value


def _number(**bounds: float) -> Any:
    return Annotated[float, Field(strict=True, allow_inf_nan=False, **bounds)]


#: A finite number (int or float, not bool, not a string).
Finite = _number()
#: A finite number >= 0.
NonNegative = _number(ge=0)
#: A finite number > 0.
Positive = _number(gt=0)
#: A non-empty string id.
Ident = Annotated[str, Field(strict=True, min_length=1)]
#: A whole number in [lower, MAX_INT].
Count = Annotated[int, BeforeValidator(_integral), Field(ge=1, le=MAX_INT)]
NonNegativeCount = Annotated[int, BeforeValidator(_integral), Field(ge=0, le=MAX_INT)]


class Schema(BaseModel):
    """Base of the nested schema objects: unknown fields are allowed and ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class OpenSchema(BaseModel):
    """Base of a top-level document: unknown fields are kept in ``model_extra``."""

    model_config = ConfigDict(extra="allow", frozen=True)


def invalid(message: str, *path: str | int) -> PydanticCustomError:
    """An error raised by a cross-field check, ``path`` relative to the validated object."""
    return PydanticCustomError("depl", "{message}", {"message": message, "path": path})


_MESSAGES = {
    "missing": "missing required field",
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "finite_number": "must be finite",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "bool_type": "expected true or false",
    "string_type": "expected a string",
    "string_too_short": "must be a non-empty string",
    "too_short": "must not be empty",
    "list_type": "expected a list",
    "dict_type": "expected an object",
    "model_type": "expected an object",
    "model_attributes_type": "expected an object",
    "literal_error": "must be {expected}",
    "string_pattern_mismatch": "must match {pattern}",
}


def _show(value: Any) -> str:
    """A short rendering of the offending value (never a multi-kilobyte repr)."""
    if isinstance(value, (dict, list, tuple)):
        return type(value).__name__
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"an integer with {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field_path(loc: Sequence[str | int], root: str = "") -> str:
    """``('clusters', 0, 'levels')`` -> ``clusters[0].levels`` (prefixed with ``root``)."""
    out = root
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "document"


def _format_number(value: Any) -> Any:
    return f"{value:g}" if isinstance(value, float) else value


def one_line(error: Any, root: str = "", label: str = "") -> str:
    """Render one pydantic error (a dict of ``ValidationError.errors()``) as one line.

    ``root`` prefixes the field path (``plan`` -> ``plan.rounds[0]``), ``label``
    the whole line (``config `` -> ``config seed: ...``).
    """
    ctx = error.get("ctx") or {}
    loc = tuple(error["loc"])
    if error["type"] == "depl":
        return f"{label}{field_path(loc + tuple(ctx['path']), root)}: {ctx['message']}"
    template = _MESSAGES.get(error["type"])
    if template is None:
        message = error["msg"]
    else:
        message = template.format(**{k: _format_number(v) for k, v in ctx.items()})
    if error["type"] != "missing":
        message += f", got {_show(error['input'])}"
    return f"{label}{field_path(loc, root)}: {message}"


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], raw: Any, root: str = "", label: str = "") -> M:
    """Validate ``raw`` against ``model``; the first problem becomes a one-line ScenarioError."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError(one_line(exc.errors(include_url=False)[0], root, label)) from None
