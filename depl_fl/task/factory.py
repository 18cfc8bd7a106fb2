"""The global network of a job: a built-in model or a user's factory ``PKG.MODULE:NAME``.

``model.arch`` names a built-in network (:data:`depl_fl.task.models.ARCHS`);
with ``model=custom`` it is the factory ``PKG.MODULE:NAME`` itself, a
callable ``NAME(num_classes=K, in_channels=C)`` that returns an
``nn.Module`` for the dataset's ``C x S x S`` images; it receives only the
arguments its signature names, positional-only ones by position
(:func:`factory_arguments`). The factory must be
importable wherever the job runs (the server and every node).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from torch import nn

from depl_fl.errors import ScenarioError
from depl_fl.task.models import ARCHS, build_model


def is_factory(arch: str) -> bool:
    """True when ``arch`` names a factory ``PKG.MODULE:NAME`` rather than a built-in network."""
    return ":" in str(arch)


def load_factory(spec: str, field: str = "model.factory") -> Callable[..., Any]:
    """The callable ``PKG.MODULE:NAME``; a one-line ScenarioError naming ``field`` when it cannot be found."""
    module_name, _, attr = str(spec).partition(":")
    if not module_name or not attr:
        raise ScenarioError(f"{field} {spec!r}: expected PKG.MODULE:NAME")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import failure of user code is a configuration error
        raise ScenarioError(f"{field} {spec!r}: cannot import {module_name} "
                            f"({type(exc).__name__}: {exc})") from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ScenarioError(f"{field} {spec!r}: {module_name} has no attribute {attr}")
    if not callable(target):
        raise ScenarioError(f"{field} {spec!r}: {attr} is not callable")
    return target


def factory_arguments(factory: Callable[..., Any], spec: str,
                      offered: dict[str, int]) -> tuple[tuple[int, ...], dict[str, int]]:
    """The arguments of ``offered`` (``num_classes``, ``in_channels``) that ``factory`` takes.

    A factory (a function or a class) receives the ones its signature names,
    all of them with ``**kwargs``, so ``NAME(num_classes)`` and ``NAME()`` work
    too. A positional-only parameter named like an offered one
    (``def make(num_classes, in_channels, /)``) receives it positionally. A
    signature that cannot be read gets them all as keywords.

    Returns
    -------
    tuple
        ``(args, kwargs)``: the call is ``factory(*args, **kwargs)``.

    Raises
    ------
    ScenarioError
        One line: ``factory`` is an ``nn.Module`` instance, not a factory, or a
        parameter without a default is not one of ``offered``.
    """
    import inspect

    if isinstance(factory, nn.Module):
        raise ScenarioError(f"model.factory {spec!r} is an nn.Module instance ({type(factory).__name__}), "
                            "not a factory: give its class or a function that builds it")
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # no signature to read (some builtins): offer everything
        return (), dict(offered)
    empty = inspect.Parameter.empty
    args: list[int] = []
    for p in (p for p in params if p.kind is inspect.Parameter.POSITIONAL_ONLY):
        if p.name in offered:
            args.append(offered[p.name])
        elif p.default is empty:
            names = ", ".join(offered)
            raise ScenarioError(f"model.factory {spec!r}: its positional-only parameter {p.name!r} has no "
                                f"default and is not one of {names}, the only arguments DepL passes: name it "
                                "after one of them, give it a default, or wrap the factory in a function of "
                                "these")
        else:
            break  # a later positional-only argument would need this default passed explicitly
    given_positionally = {p.name for p in params[:len(args)]}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return tuple(args), {k: v for k, v in offered.items() if k not in given_positionally}
    named = {p.name for p in params
             if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    given = named & set(offered)
    missing = [p.name for p in params if p.default is empty and p.name not in given
               and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY)]
    if missing:
        passed = ", ".join(f"{k}={v}" for k, v in offered.items())
        raise ScenarioError(f"model.factory {spec!r}: its parameter {missing[0]!r} has no default, but DepL "
                            f"passes only {passed} (those the signature names): give it a default, or wrap "
                            "the factory in a function of these")
    return tuple(args), {k: v for k, v in offered.items() if k in named}


def build_network(arch: str, num_classes: int, in_channels: int, image_size: int,
                  seed: int | None = None) -> nn.Module:
    """Build the full network of ``arch`` (built-in name or factory), optionally seeded.

    Parameters
    ----------
    arch : str
        A built-in architecture or ``PKG.MODULE:NAME``.
    num_classes, in_channels, image_size : int
        Task geometry (the factory receives the first two).
    seed : int, optional
        Draw the initial weights from this seed without touching torch's global state.

    Raises
    ------
    ScenarioError
        Unknown architecture, a factory that cannot be imported, raises or
        returns something other than an ``nn.Module``.
    """
    import torch

    if arch in (None, "", "None"):
        raise ScenarioError("model.factory: model=custom needs model.factory=PKG.MODULE:NAME, a callable "
                            "NAME(num_classes=K, in_channels=C) returning an nn.Module")
    if not is_factory(arch):
        if arch not in ARCHS:
            raise ScenarioError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)} "
                                "or model=custom model.factory=PKG.MODULE:NAME")
        return build_model(arch, num_classes, in_channels, image_size, seed=seed)
    factory = load_factory(arch)
    offered = {"num_classes": int(num_classes), "in_channels": int(in_channels)}
    args, kwargs = factory_arguments(factory, arch, offered)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(int(seed))
        try:
            net = factory(*args, **kwargs)
        except Exception as exc:  # user code: report it in one line
            raise ScenarioError(f"model.factory {arch!r} failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(net, nn.Module):
        raise ScenarioError(f"model.factory {arch!r} returned {type(net).__name__}, not a torch nn.Module")
    return net
