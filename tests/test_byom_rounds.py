"""Networks a user brings train DepL rounds in process; only the sub-network travels.

BatchNorm + residual (ResNet-style), depthwise + inverted residual
(MobileNetV2-style), a plain MLP and vision transformers (``nn.TransformerEncoderLayer``,
attention written by hand) each run one compressed DepL round through
the real ClientApp; the round record's measured bytes equal the variant's
modelled size per client, and each message carries exactly the variant's entries.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import MetricRecord  # noqa: E402

from clients.client_app import make_client_app  # noqa: E402
from depl_fl.contract.plan import Plan, RoundDecision, Targets  # noqa: E402
from depl_fl.orchestration.scenario_builder import build_scenario, model_docs  # noqa: E402
from depl_fl.runs.runconfig import compose_config  # noqa: E402
from depl_fl.task.local_update import initial_state  # noqa: E402
from depl_fl.task.partitions import geometry  # noqa: E402
from depl_fl.task.subnets import network_layout  # noqa: E402
from strategies.depl_strategy import DepLStrategy, arrays_to_state, state_to_arrays  # noqa: E402
from strategies.inprocess_grid import InProcessGrid  # noqa: E402
from strategies.server_app import make_evaluate_fn  # noqa: E402

N = 3
FACTORIES = {"resnet": "tests.user_nets:resnet_tiny", "mobilenet_v2": "tests.user_nets:mobilenet_v2_tiny",
             "mlp": "tests.user_nets:mlp", "group_norm": "tests.user_nets:group_norm_net",
             "channels_last": "tests.user_nets:channels_last_net", "resnext": "tests.user_nets:resnext_net",
             "vit": "tests.user_nets:vit_net", "hand_attention": "tests.user_nets:hand_attention_net"}
#: p50's size against the full network's: below 0.6 where every group halves; a transformer halves only
#: its feed-forward width (its embedding stays whole), about half of its weights.
P50_SHARE = {"vit": 0.8, "hand_attention": 0.8}
LOSS = {"initial": 2.3, "run": {m: {"levels": [0.1, 2.3], "mean": [0.01, 0.3], "std": [0.01, 0.05]}
                                for m in ("full", "p50")},
        "switch": [{"from": "full", "to": "p50", "mean": 0.1, "std": 0.05},
                   {"from": "p50", "to": "full", "mean": 0.1, "std": 0.05}]}


class CountingGrid(InProcessGrid):
    """An in-process grid that keeps every train message and reply it carried."""

    def __init__(self, app, n):
        super().__init__(app, n)
        self.train_sent, self.received = [], []

    def deliver(self, msg):
        reply = super().deliver(msg)
        if msg.metadata.message_type == "train":
            self.train_sent.append(msg)
            self.received.append(reply)
        return reply


def _run(name: str, models=("p50", "full"), model: list[str] | None = None):
    cfg = compose_config([f"num_clients={N}", "simulation=inprocess", "tracking.enabled=false",
                          *(model or ["model=custom", f"model.factory={FACTORIES[name]}"])])
    geo = geometry(cfg)
    docs = model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size)
    clients = tuple(f"c{i}" for i in range(N))
    plan = Plan("given", True, [RoundDecision(m, clients, {"A": 0, "B": 0}) for m in models])
    strategy = DepLStrategy(
        network=network_layout(geo), arch=geo.arch, targets=Targets(0.3, 0.9, 1e6), plan=plan, plan_fn=None,
        scenario_fn=lambda props: build_scenario(cfg, props, docs, LOSS), num_clients=N,
        train_settings={"local-epochs": 1, "lr": 0.05, "batch-size": 32, "seed": 0}, node_wait_timeout_s=1.0)
    grid = CountingGrid(make_client_app(cfg), N)
    init = initial_state(geo, seed=0)
    result = strategy.start(grid, state_to_arrays(init), evaluate_fn=make_evaluate_fn(cfg))
    return cfg, geo, docs, strategy, grid, init, result


@pytest.mark.parametrize("name", list(FACTORIES))
def test_user_network_trains_a_compressed_and_a_full_round(name):
    _, geo, docs, strategy, grid, init, result = _run(name)
    records = strategy.controller.records
    assert [r["model"] for r in records] == ["p50", "full"]
    assert all(r["replied"] == ["c0", "c1", "c2"] and not r["rejected"] for r in records)
    assert all(np.isfinite(r["loss"]) for r in records)
    final = arrays_to_state(result.arrays)
    assert set(final) == set(init)
    assert any(not np.array_equal(final[k], init[k]) for k in init if init[k].dtype.kind == "f")
    sizes = {d["id"]: d["size_bytes"] for d in docs}
    assert sizes["p50"] < P50_SHARE.get(name, 0.6) * sizes["full"]
    for rec in records:  # measured bytes = the variant's modelled size, per planned client
        assert rec["bytes_down"] == rec["modelled_bytes_down"] == int(sizes[rec["model"]]) * N
        assert rec["bytes_up"] == rec["modelled_bytes_up"] == int(sizes[rec["model"]]) * N


@pytest.mark.parametrize("name", ["resnet", "mobilenet_v2"])
def test_a_train_message_carries_exactly_the_variants_entries(name):
    _, geo, _, strategy, grid, init, _ = _run(name, models=("p50",))
    layout = network_layout(geo)
    expected = layout.sub_shapes(0.5)
    for msg, reply in zip(grid.train_sent, grid.received, strict=True):
        down = {k: v.numpy() for k, v in msg.content["arrays"].items()}
        up = {k: v.numpy() for k, v in reply.content["arrays"].items()}
        assert {k: v.shape for k, v in down.items()} == expected == {k: v.shape for k, v in up.items()}
        counters = [k for k in up if k.endswith("num_batches_tracked")]
        assert all(up[k].dtype == np.int64 and int(up[k]) > int(down[k]) for k in counters)
        assert (len(counters) > 0) == (name in ("resnet", "mobilenet_v2"))
        assert sum(v.size for v in down.values()) < 0.6 * sum(v.size for v in init.values())
    # Less than the full network on the wire (array headers weigh on networks this small).
    assert strategy.controller.records[0]["bytes_down"] < layout.size_bytes(0.0) * N


def test_bundled_residual_network_learns_the_digits_in_depl_rounds():
    """``model=digits_resnet`` (BatchNorm, residual adds): the second family the guarantee is shown on."""
    _, _, docs, strategy, _, init, result = _run("digits_resnet", models=("p50", "full", "full", "full"),
                                                 model=["model=digits_resnet"])
    records = strategy.controller.records
    assert all(r["replied"] == ["c0", "c1", "c2"] and not r["rejected"] for r in records)
    assert records[-1]["loss"] < 0.6 * records[0]["loss"]
    final = arrays_to_state(result.arrays)
    stats = [k for k in init if k.endswith("running_var")]
    assert len(stats) == 6 and all(not np.array_equal(final[k], init[k]) for k in stats)
    costs = {d["id"]: d for d in docs}
    assert costs["p50"]["flops_per_sample"] < 0.4 * costs["full"]["flops_per_sample"]
    assert costs["p50"]["size_bytes"] < 0.4 * costs["full"]["size_bytes"]


def test_evaluation_metric_record_of_user_network_is_finite():
    cfg, geo, *_ = _run("mlp", models=("p50",))
    metrics = make_evaluate_fn(cfg)(1, state_to_arrays(initial_state(geo, seed=1)), 0.5)
    assert isinstance(metrics, MetricRecord) and np.isfinite(metrics["loss"])
