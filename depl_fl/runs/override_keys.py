"""Overrides of keys the configuration lacks: refused in one line, with the closest known keys.

Hydra refuses ``target.prb=0.9`` with the advice to write ``+target.prb=0.9``,
which it would accept and no job would ever read. Every entry point (a Hydra
job, :mod:`depl_fl.sweep`; ``flwr run .``, ``depl-fl profile`` and the Python
API, :func:`depl_fl.runs.runconfig.compose_config`) looks the overridden keys up
in the configuration that the config group choices compose, whether they are
changed, added (``+``) or forced (``++``).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from depl_fl.errors import ScenarioError


def addable_keys(conf_dir: str) -> frozenset[str]:
    """Keys a user may add with ``+``/``++`` though the chosen model's file lacks them.

    The model group is read beyond each file's own keys: every key that some
    ``conf/model/`` file declares (``model.compressions`` on every network,
    ``model.factory``, ...) and ``model.regime.NAME`` for every plan-regime
    constant (``profile.plan_regime`` in ``conf/profile/``). Any other added
    key, ``+model.compresions`` say, is refused like an unknown key.
    """
    from omegaconf import OmegaConf

    root = Path(conf_dir)
    keys: set[str] = set()
    for path in sorted((root / "model").glob("*.yaml")):
        keys.update(f"model.{k}" for k in config_keys(OmegaConf.to_container(OmegaConf.load(path))))
    for path in sorted((root / "profile").glob("*.yaml")):
        regime = OmegaConf.to_container(OmegaConf.load(path)).get("plan_regime")
        keys.update(f"model.regime.{k}" for k in config_keys(regime) if k != "enabled")
    return frozenset(keys)


def config_keys(node: Any, prefix: str = "") -> dict[str, bool]:
    """Every dotted key of a plain configuration, mapped to whether it is a leaf (not a section)."""
    if not isinstance(node, dict):
        return {}
    out: dict[str, bool] = {}
    for name, value in node.items():
        out[f"{prefix}{name}"] = not isinstance(value, dict)
        out.update(config_keys(value, f"{prefix}{name}."))
    return out


def unknown_key(key: str, leaves: Sequence[str]) -> ScenarioError:
    """The one-line error for ``key``, absent from the configuration, with the closest of its ``leaves``."""
    close = difflib.get_close_matches(key, leaves, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return ScenarioError(f"override {key}: unknown key{hint} (every key and its meaning: conf/)")


def check_override_keys(conf_dir: str, overrides: Sequence[str], added_only: bool = False) -> None:
    """Raise :func:`unknown_key` for the first override of a key the composed configuration lacks.

    ``hydra.*`` overrides and config group choices are Hydra's to check;
    the keys :func:`addable_keys` names may be added. Overrides that do not
    parse are left to the caller's composition. ``added_only``: look only at
    keys added with ``+``/``++`` and compose nothing when there are none (a
    changed key that is unknown fails Hydra's own composition: check again
    then, for the message).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    def is_group(key: str) -> bool:
        return (Path(conf_dir) / key.replace(".", "/")).is_dir()

    own = [o for o in overrides if not o.lstrip("+~").startswith("hydra.")]
    try:
        parsed = OverridesParser.create().parse_overrides(list(own))
    except HydraException:
        return
    addable = addable_keys(conf_dir)
    if added_only and not any((ov.is_add() or ov.is_force_add()) and not is_group(ov.key_or_group)
                              and str(ov.key_or_group) not in addable for ov in parsed):
        return
    groups = [ov.input_line for ov in parsed
              if is_group(ov.key_or_group) and not ov.is_delete() and not ov.is_sweep_override()]
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=conf_dir, version_base=None):
            cfg = OmegaConf.to_container(compose(config_name="config", overrides=groups), resolve=False)
    except (HydraException, OmegaConfBaseException):
        return  # a bad group choice: the caller's composition names it
    finally:
        GlobalHydra.instance().clear()
    known = config_keys(cfg)
    for ov in parsed:
        key = str(ov.key_or_group)
        if is_group(key) or key in known or key in addable:
            continue
        raise unknown_key(key, sorted({k for k, leaf in known.items() if leaf} | addable))
