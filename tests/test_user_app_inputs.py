"""What a user's own Flower app writes is honoured or refused in one line, never silently dropped."""

from __future__ import annotations

import pytest

pytest.importorskip("hydra")

from depl_fl.errors import ScenarioError  # noqa: E402
from strategies.user_app import DEFAULT_COMPRESSIONS, depl_config  # noqa: E402


def _compressions(cfg: dict) -> list[float]:
    return [float(c) for c in cfg["model"]["compressions"]]


def test_the_variants_come_from_the_argument_or_from_an_override():
    assert _compressions(depl_config(2, compressions=(0.0, 0.75))) == [0.0, 0.75]
    assert _compressions(depl_config(2, overrides=["model.compressions=[0,0.25]"])) == [0.0, 0.25]
    assert _compressions(depl_config(2, overrides=["+model.compressions=[0,0.25]"])) == [0.0, 0.25]
    assert _compressions(depl_config(2)) == list(DEFAULT_COMPRESSIONS)


def test_the_argument_and_an_override_naming_the_same_variants_agree():
    cfg = depl_config(2, compressions=(0.0, 0.5), overrides=["model.compressions=[0,0.5]"])
    assert _compressions(cfg) == [0.0, 0.5]


def test_the_argument_and_an_override_naming_other_variants_are_refused_naming_both():
    with pytest.raises(ScenarioError) as err:
        depl_config(2, compressions=(0.0, 0.5), overrides=["target.loss=0.3", "model.compressions=[0]"])
    assert str(err.value) == (
        "compressions: depl_strategy(compressions=(0.0, 0.5)) and the override model.compressions=[0.0] "
        "name different variants; give them once (drop one of the two)")


@pytest.mark.parametrize("override", ["model.variants=[{id:full,compression:0}]", "~model.compressions"])
def test_variants_other_than_compressions_are_refused(override):
    with pytest.raises(ScenarioError, match="in your own app the variants are compressions of your network"):
        depl_config(2, compressions=(0.0, 0.5), overrides=[override])


def test_a_misspelled_model_key_added_in_a_users_app_is_refused():
    with pytest.raises(ScenarioError, match="override model.compresions: unknown key; did you mean"):
        depl_config(2, overrides=["+model.compresions=[0]"])


def test_a_num_clients_override_other_than_the_argument_is_refused():
    assert depl_config(3, overrides=["num_clients=3"])["num_clients"] == 3
    with pytest.raises(ScenarioError, match=r"num_clients: depl_strategy\(num_clients=2\) and the override "
                                            r"num_clients=5 disagree"):
        depl_config(2, overrides=["num_clients=5"])


@pytest.mark.parametrize("override, key", [
    ("train.lr=0.1", "train.lr"), ("dataset=cifar10", "dataset.name"), ("faults.kind=nan", "faults.kind"),
    ("output.dir=/tmp/o", "output.dir")])
def test_a_key_a_users_app_does_not_read_is_refused(override, key):
    with pytest.raises(ScenarioError, match=f"config {key}=.*: not read when the entry point is your own"):
        depl_config(2, overrides=[override])


def test_a_network_without_prunable_channels_is_told_the_argument_that_trains_it_whole():
    torch = pytest.importorskip("torch")
    from strategies.user_app import UserNetwork, depl_strategy

    network = UserNetwork(lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3)), (4,), "Net")
    with pytest.raises(ScenarioError) as err:
        depl_strategy(network, num_clients=2)
    assert str(err.value).endswith("use depl_strategy(..., compressions=(0.0,))")
    assert "model.compressions" not in str(err.value)
    assert depl_strategy(network, num_clients=2, compressions=(0.0,)).arch == "Net"
