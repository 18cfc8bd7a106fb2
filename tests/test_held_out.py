"""Decisions read the validation split; the test split is only reported."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from depl_fl.task.data import split_held_out

pytest.importorskip("flwr")
pytest.importorskip("torch")

SMALL = ["simulation=inprocess", "num_clients=3", "profile.explore.stop_when_met=false",
         "target.loss=1.2", "target.prob=0.6", "target.max_rounds=6",
         "tracking.enabled=true", "planner.mc_trajectories=5000", "output.plot=false"]


def test_held_out_split_is_disjoint_stratified_and_seeded():
    labels = np.repeat(np.arange(5), 20)
    val, test = split_held_out(labels, 0.5, seed=3)
    assert np.intersect1d(val, test).size == 0 and np.union1d(val, test).size == labels.size
    assert np.all(np.bincount(labels[val], minlength=5) == 10)
    again, _ = split_held_out(labels, 0.5, seed=3)
    other, _ = split_held_out(labels, 0.5, seed=4)
    assert np.array_equal(val, again) and not np.array_equal(val, other)


def test_validation_and_test_split_of_a_run_come_from_the_run_seed():
    from depl_fl.runs.runconfig import compose_config
    from depl_fl.task.partitions import dataset, test_split, validation_split

    cfg = compose_config(["seed=2"])
    (xv, yv), (xt, yt) = validation_split(cfg), test_split(cfg)
    held = dataset(cfg)
    assert len(yv) + len(yt) == len(held.y_test) and abs(len(yv) - len(yt)) <= 1
    rows = {r.tobytes() for r in xv.reshape(len(xv), -1)}
    assert not any(r.tobytes() in rows for r in xt.reshape(len(xt), -1))
    assert not np.array_equal(validation_split(compose_config(["seed=3"]))[1], yv)


def test_val_dir_is_the_validation_split_and_the_dataset_test_split_is_the_test_split(tmp_path):
    from PIL import Image

    from depl_fl.errors import DeplError
    from depl_fl.task.partitions import dataset, test_split, validation_split

    rng = np.random.default_rng(0)
    for split, n in (("train/00000", 4), ("train/00001", 4), ("test/00000", 2), ("test/00001", 1),
                     ("val/00000", 1), ("val/00001", 2)):
        folder = tmp_path / split
        folder.mkdir(parents=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    cfg = {"seed": 0, "dataset": {"name": "gtsrb", "data_dir": str(tmp_path),
                                  "val_dir": str(tmp_path / "val")}}
    (xv, yv), (xt, yt) = validation_split(cfg), test_split(cfg)
    assert sorted(yv.tolist()) == [0, 1, 1] and xv.shape == (3, 3, 32, 32)
    assert sorted(yt.tolist()) == [0, 0, 1] and np.array_equal(xt, dataset(cfg).x_test)
    assert abs(float(xv.mean())) < 1.0  # standardised with the training split's statistics
    bad = {**cfg, "dataset": {**cfg["dataset"], "val_dir": str(tmp_path / "missing")}}
    with pytest.raises(DeplError, match="dataset.val_dir: .* is not a folder"):
        validation_split(bad)
    with pytest.raises(DeplError, match="dataset.val_dir: dataset 'digits' is not read from a folder"):
        validation_split({"seed": 0, "dataset": {"name": "digits", "data_dir": None,
                                                 "val_dir": str(tmp_path / "val")}})


def _decisions(doc: dict) -> dict:
    rounds = [{k: r[k] for k in ("model", "clients", "levels", "loss", "loss_before",
                                 "predicted_quantile", "replanned")} for r in doc["rounds"]]
    replans = [{k: v for k, v in r.items() if k != "planner_seconds"} for r in doc["replans"]]
    plan = {k: v for k, v in doc["plan"].items() if k != "planner_seconds"}
    return {"plan": plan, "rounds": rounds, "replans": replans,
            "stop": doc["summary"]["rounds"], "final_loss": doc["summary"]["final_loss"]}


def _run(tmp_path: Path, name: str, monkeypatch, spoil: str | None) -> dict:
    import json

    import depl_fl.task.partitions as partitions
    from depl_fl.main import run_job
    from depl_fl.runs.runconfig import compose_config

    if spoil is not None:
        clean = getattr(partitions, spoil)

        def spoiled(cfg, seed=None):
            x, y = clean(cfg, seed)
            rng = np.random.default_rng(99)
            return (x + rng.normal(0.0, 0.5, x.shape)).astype(np.float32), rng.permutation(y)

        monkeypatch.setattr(partitions, spoil, spoiled)
    cfg = compose_config([*SMALL, f"profile.cache_dir={tmp_path / name / 'cache'}"])
    path = run_job(cfg, tmp_path / name)
    monkeypatch.undo()
    return json.loads(Path(path).read_text())


@pytest.mark.slow
def test_perturbing_the_test_split_changes_no_decision(tmp_path, monkeypatch):
    clean = _run(tmp_path, "clean", monkeypatch, None)
    noisy = _run(tmp_path, "noisy-test", monkeypatch, "test_split")
    assert _decisions(noisy) == _decisions(clean)  # same plan, same rounds, same stop
    clean_test = [r["test_loss"] for r in clean["rounds"]]
    noisy_test = [r["test_loss"] for r in noisy["rounds"]]
    assert all(abs(a - b) > 0.05 for a, b in zip(clean_test, noisy_test, strict=True))
    assert noisy["summary"]["final_test_loss"] != clean["summary"]["final_test_loss"]
    # The same perturbation on the validation split does move the run (its pilots and
    # its tracking read it; here the plan may even become infeasible): the check has power.
    from depl_fl.errors import InfeasibleError

    try:
        spoiled_val = _decisions(_run(tmp_path, "noisy-val", monkeypatch, "validation_split"))
    except InfeasibleError:
        spoiled_val = None
    assert spoiled_val != _decisions(clean)
