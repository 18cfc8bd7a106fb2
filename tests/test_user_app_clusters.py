"""A user's own Flower app whose nodes set no ``cluster=``: the cluster DepL assigns, logged and recorded."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("flwr")
torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from clients.user_app import DepLClient  # noqa: E402
from depl_fl.orchestration.scenario_builder import assigned_clusters_note, fill_clusters  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.subnets import UserNetwork  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.user_app import depl_strategy, evaluate_fn, initial_arrays  # noqa: E402
from tests.user_app_wiring import small_mlp, user_client_app  # noqa: E402

#: The default configuration's node classes: A (fraction 0.4), then B (0.6).
CLASSES = compose_config([])["clusters"]["classes"]


def _props(*clusters: str) -> dict[str, dict]:
    return {f"c{i}": {"partition-id": i, "num-samples": 10, "cluster": c} for i, c in enumerate(clusters)}


def test_blank_clusters_follow_the_configured_split_and_are_marked_assigned():
    filled = fill_clusters({"clusters": {"classes": CLASSES}}, _props("", "", "", "", ""))
    assert [filled[f"c{i}"]["cluster"] for i in range(5)] == ["A", "A", "B", "B", "B"]
    assert all(p["cluster-source"] == "assigned" for p in filled.values())
    assert assigned_clusters_note(filled) == (
        "clusters: 5 client(s) set no node config cluster=, assigned by clusters.classes' fractions "
        "in partition-id order (A: c0, c1; B: c2, c3, c4)")


def test_a_cluster_the_node_set_is_kept_and_not_marked():
    filled = fill_clusters({"clusters": {"classes": CLASSES}}, _props("B", ""))
    assert filled["c0"] == {"partition-id": 0, "num-samples": 10, "cluster": "B"}
    assert filled["c1"]["cluster"] == "B" and filled["c1"]["cluster-source"] == "assigned"
    assert assigned_clusters_note({"c0": filled["c0"]}) is None


class _Stop(Exception):
    """Ends the job right after the properties query (no exploration, no round)."""


def _loader() -> DataLoader:
    gen = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(6, 4, generator=gen), torch.arange(6) % 3), batch_size=3)


def _train(net, loader, epochs, device):  # noqa: ARG001
    return 0.0


def _test(net, loader, device):  # noqa: ARG001
    return 1.0, 0.0


def test_the_log_names_the_assigned_clusters_of_nodes_that_set_none(caplog):
    network = UserNetwork(small_mlp, (4,), "mlp")
    app = user_client_app(DepLClient(network, _train), _loader, train=False)
    grid = InProcessGrid(app, 3, node_configs=[{}, {"cluster": "A"}, {}])
    strategy = depl_strategy(network, num_clients=3)

    def stop(*args, **kwargs):
        raise _Stop

    strategy.profiler.run = stop
    with caplog.at_level(logging.INFO, logger="depl_fl"), pytest.raises(_Stop):
        strategy.start(grid, initial_arrays(network), evaluate_fn=evaluate_fn(strategy, _test, _loader()))
    assert "clients: c0(A, 6), c1(A, 6), c2(B, 6)" in caplog.text
    assert ("clusters: 2 client(s) set no node config cluster=, assigned by clusters.classes' fractions "
            "in partition-id order (A: c0; B: c2)") in caplog.text
    assert "c0(, " not in caplog.text
    # The recorded properties (checkpoint, profile cache key, scenario) carry the decision.
    assert strategy.properties["c0"]["cluster-source"] == "assigned"
    assert "cluster-source" not in strategy.properties["c1"]
    assert [strategy.properties[c]["cluster"] for c in ("c0", "c1", "c2")] == ["A", "A", "B"]
