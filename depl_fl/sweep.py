"""Command-line overrides checked up front, and sweeps that outlive their failing jobs.

Used by :mod:`depl_fl.main` only (entry-point layer).

* :func:`check_overrides` composes the configuration once before Hydra runs, so
  a malformed override, an unknown key or a missing config group option is one
  line on stderr with exit status 2, instead of Hydra's multi-line message and
  exit status 1 (a key the configuration lacks, also one added with ``+``:
  :mod:`depl_fl.runs.override_keys`). In a sweep (``-m``) the first job's overrides are composed and
  every option of a swept config group is looked up; values that only fail
  :func:`depl_fl.runs.runconfig.validate` are left to their jobs.
* :class:`SweepFailures` collects the jobs of a sweep that failed, so that the
  sweep runs every job and exits non-zero at the end with one line naming them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from depl_fl.errors import ScenarioError
from depl_fl.runs.override_keys import check_override_keys

#: Hydra options that consume the next argument.
_TWO_TOKEN = {"-cp", "--config-path", "-cd", "--config-dir", "-cn", "--config-name", "-c", "--cfg",
              "-p", "--package", "--info", "-i", "--experimental-rerun"}
#: Hydra options after which Hydra itself is left in charge (help, printing, completion).
_HYDRA_ONLY = {"-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-i", "--info",
               "-sc", "--shell-completion", "--experimental-rerun", "-cp", "--config-path",
               "-cn", "--config-name", "-cd", "--config-dir"}


def split_argv(argv: Sequence[str]) -> tuple[list[str], bool, bool]:
    """``(overrides, multirun, hydra_only)`` of a Hydra command line (program name excluded)."""
    overrides: list[str] = []
    multirun = hydra_only = False
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("-m", "--multirun"):
            multirun = True
        elif name in _HYDRA_ONLY:
            hydra_only = True
            skip = name in _TWO_TOKEN and "=" not in arg
        elif arg.startswith("-"):
            skip = name in _TWO_TOKEN and "=" not in arg
        else:
            overrides.append(arg)
    return overrides, multirun, hydra_only


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split("See https://")[0].split())


def _compose(conf_dir: str, overrides: list[str]) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=conf_dir, version_base=None):
            compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ScenarioError(f"override: {_one_line(exc)}") from None
    finally:
        GlobalHydra.instance().clear()


def check_overrides(overrides: Sequence[str], multirun: bool, conf_dir: str) -> None:
    """Raise a one-line :class:`ScenarioError` for overrides Hydra could not compose.

    Parameters
    ----------
    overrides : sequence of str
        The command line's overrides (see :func:`split_argv`).
    multirun : bool
        ``-m``: sweep values are expanded; the first job is composed and every
        value of a swept config group must name an existing option.
    conf_dir : str
        The primary config directory.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    own = [o for o in overrides if not o.lstrip("+~").startswith("hydra.")]
    try:
        parsed = OverridesParser.create().parse_overrides(list(own))
    except HydraException as exc:
        raise ScenarioError(f"override: {_one_line(exc)}") from None
    first: list[str] = []
    for ov in parsed:
        if ov.is_sweep_override() and multirun:
            values = list(ov.sweep_string_iterator())
            _check_group_options(conf_dir, ov.key_or_group, values)
            first.append(f"{ov.get_key_element()}={values[0]}" if values else ov.input_line)
        else:
            first.append(ov.input_line)
    check_override_keys(conf_dir, first)
    _compose(conf_dir, first)


def _check_group_options(conf_dir: str, key: str, values: Sequence[str]) -> None:
    group = Path(conf_dir) / key.replace(".", "/")
    if not group.is_dir():
        return
    options = sorted(p.stem for p in group.glob("*.yaml"))
    for value in values:
        if value not in options:
            raise ScenarioError(f"override {key}={value}: no such option (choose from {', '.join(options)})")


@dataclass
class SweepFailures:
    """Failed jobs of the current sweep (the basic launcher runs them in this process)."""

    jobs: list[str] = field(default_factory=list)
    status: int = 0

    def add(self, number: int, overrides: str, exit_status: int) -> None:
        """Record job ``number`` (its override string) as failed with ``exit_status``."""
        self.jobs.append(f"#{number} ({overrides or 'no overrides'})")
        self.status = max(self.status, int(exit_status))

    def line(self) -> str:
        """One line naming every failed job."""
        return f"{len(self.jobs)} sweep job(s) failed: {', '.join(self.jobs)}"
