"""A round is written before it is announced: when a progress line appears, results.json and the
checkpoint already hold that round, so a stop right after the line never trains it again.

In-process grid, no subprocess: a logging handler reads the job folder at the moment each progress
line (``exploration round K: ...``, ``round N: model ...``, ``round N: the target is met now ...``)
is emitted.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from clients.client_app import make_client_app  # noqa: E402
from depl_fl.orchestration.checkpointing import rounds_completed  # noqa: E402
from depl_fl.runs.checkpoint import CHECKPOINT_FILE, load_checkpoint  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.server_app import run_server  # noqa: E402

N = 3
JOB = ["simulation=inprocess", f"num_clients={N}", "profile.explore.rounds=2",
       "profile.explore.stop_loss_factor=null", "profile.explore.switch_rounds=[2]",
       "profile.explore.stop_when_met=false",
       "profile.explore.min_points_per_level=2", "target.loss=0.5", "target.prob=0.6",
       "target.max_rounds=3", "output.plot=false"]
#: Progress lines and the phase of the round they announce.
PROGRESS = [(re.compile(r"^exploration round (\d+): "), "profile"),
            (re.compile(r"^round (\d+): model "), "train"),
            (re.compile(r"^round (\d+): the target is met now"), "train")]


class FolderAtLine(logging.Handler):
    """On every progress line, what the job folder holds: (phase, round, rounds in results.json,
    rounds in the checkpoint)."""

    def __init__(self, cfg: dict, out: Path) -> None:
        super().__init__(logging.INFO)
        self.cfg, self.out, self.seen = cfg, out, []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        for pattern, phase in PROGRESS:
            match = pattern.match(message)
            if match:
                path = self.out / "results.json"
                doc = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"rounds": []}
                written = sum(r.get("phase", "train") == phase for r in doc["rounds"])
                saved_file = self.out / CHECKPOINT_FILE
                checkpoint = load_checkpoint(self.out, self.cfg) if saved_file.exists() else {}
                saved = (len((checkpoint.get("profiler") or {}).get("records") or ()) if phase == "profile"
                         else int(checkpoint.get("rounds_done") or 0))
                self.seen.append((phase, int(match.group(1)), written, saved,
                                  rounds_completed(checkpoint) if checkpoint else 0))


@pytest.fixture(scope="module")
def lines(tmp_path_factory) -> list[tuple[str, int, int, int, int]]:
    tmp = tmp_path_factory.mktemp("announce")
    cfg = compose_config([f"profile.cache_dir={tmp / 'cache'}", *JOB])
    out = tmp / "job"
    handler = FolderAtLine(cfg, out)
    logger = logging.getLogger("depl_fl")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        run_server(InProcessGrid(make_client_app(cfg), N), cfg, out)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return handler.seen


def test_every_round_is_announced(lines) -> None:
    assert [n for phase, n, *_ in lines if phase == "profile"] == [1, 2]
    train = [n for phase, n, *_ in lines if phase == "train"]
    assert train and train[0] == 1, lines


def test_results_json_holds_the_round_when_its_line_appears(lines) -> None:
    for phase, n, written, _, _ in lines:
        assert written >= n, f"{phase} round {n} announced with {written} in results.json"


def test_checkpoint_holds_the_round_when_its_line_appears(lines) -> None:
    for phase, n, _, saved, completed in lines:
        assert saved >= n, f"{phase} round {n} announced with {saved} in the checkpoint"
        # a resume would start after the announced round, not train it again
        assert completed >= n + (2 if phase == "train" else 0), (phase, n, completed)
