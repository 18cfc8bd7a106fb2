"""The Check keeps a group whole when the forward breaks at any of the job's compressions, and only then.

``six_block_net`` views the 12 channels of ``conv2`` as 6 blocks: 6 channels
(compression 0.5) run, 3 (0.75) do not. With ``model.compressions=[0,0.5,0.75]``
``conv2`` is kept whole in every variant and ``conv1``/``conv3`` are compressed
at both widths; with ``[0,0.5]`` nothing is kept whole. Server and nodes
derive the same groups from (network, compressions): the job's train messages
name them and a node checks them (:func:`depl_fl.task.subnets.check_kept_whole`).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from depl_fl.errors import ScenarioError  # noqa: E402
from depl_fl.task.geometry import TaskGeometry, with_compressions  # noqa: E402
from depl_fl.task.models import get_state, set_state  # noqa: E402
from depl_fl.task.slicing import extract, scatter, silence  # noqa: E402
from depl_fl.task.subnets import (  # noqa: E402
    UserNetwork,
    build_skeleton,
    check_kept_whole,
    check_variants,
    example_batch,
    full_network,
    kept_whole,
    network_layout,
)
from tests.log_lines import LogLines  # noqa: E402
from tests.torch_threads import one_thread  # noqa: F401,E402 (autouse)

ROOT = Path(__file__).resolve().parent.parent
SIX_BLOCKS = "tests.user_nets_more:six_block_net"


def _geo(compressions: tuple[float, ...], factory: str = SIX_BLOCKS) -> TaskGeometry:
    return with_compressions(TaskGeometry(factory, 10, 1, 8), compressions)


# --- the kept set covers every compression of the job ---


def test_a_group_breaking_only_at_075_is_kept_whole_and_the_others_compressed_at_both_widths():
    geo = _geo((0.0, 0.5, 0.75))
    kept = kept_whole(geo)
    assert [(k.layer, k.at) for k in kept] == [("conv2", (0.75,))]
    layout = network_layout(geo)
    assert layout.kept == ("conv2",)
    assert [g.root for g in layout.groups] == ["conv1", "conv3"]
    check_variants(geo, layout, (0.0, 0.5, 0.75))  # raises when a variant is not the silenced network
    full = get_state(full_network(geo, seed=3))
    x = example_batch((1, 8, 8), batch=4)
    for compression, (c1, c3) in ((0.5, (4, 8)), (0.75, (2, 4))):
        shapes = layout.sub_shapes(compression)
        assert shapes["conv2.weight"] == (12, c1, 3, 3)  # whole itself, reading conv1's kept channels
        assert shapes["conv1.weight"][0] == c1 and shapes["conv3.weight"][0] == c3
        structure = layout.structure(full, compression)
        sub = extract(full, structure)
        back = scatter(full, sub, structure)
        assert all(np.array_equal(back[k], full[k]) for k in full)  # extract then scatter: exact
        small = build_skeleton(geo, compression)
        assert {k: tuple(v.shape) for k, v in small.state_dict().items()} == shapes
        set_state(small, sub)
        big = full_network(geo)
        set_state(big, silence(full, layout, structure))
        with torch.no_grad():
            torch.testing.assert_close(small.eval()(x), big.eval()(x), rtol=1e-4, atol=1e-5)


def test_without_075_nothing_is_kept_whole_as_with_the_probe_compression_alone():
    geo = _geo((0.0, 0.5))
    assert kept_whole(geo) == ()
    layout = network_layout(geo)
    assert [g.root for g in layout.groups] == ["conv1", "conv2", "conv3"] and layout.kept == ()
    assert layout is network_layout(TaskGeometry(SIX_BLOCKS, 10, 1, 8))  # the same as without compressions
    check_variants(geo, layout, (0.0, 0.5))
    assert layout.sub_shapes(0.5)["conv2.weight"][0] == 6


def test_a_width_the_probe_compression_passes_and_another_breaks_is_now_trained_not_refused():
    """Blocks of 4 channels: 8 and 4 run (0.5, 0.75: nothing kept whole), 11, 6, 2 (0.3, 0.6, 0.9) do not."""
    factory = "tests.user_nets_more:four_channel_blocks_net"
    assert kept_whole(_geo((0.0, 0.5, 0.75), factory)) == ()
    geo = _geo((0.0, 0.3, 0.6, 0.9), factory)
    assert [(k.layer, k.at) for k in kept_whole(geo)] == [("conv2", ())]  # breaks at every one of them
    layout = network_layout(geo)
    check_variants(geo, layout, (0.0, 0.3, 0.6, 0.9))
    assert all(layout.sub_shapes(c)["conv2.weight"][0] == 16 for c in (0.3, 0.6, 0.9))
    assert layout.size_bytes(0.9) < layout.size_bytes(0.3) < layout.size_bytes(0.0)


def test_the_warning_line_names_the_compression_at_which_the_group_broke():
    from tests.user_nets_more import six_block_net

    net = UserNetwork(six_block_net, (1, 8, 8), "warned_six_blocks", compressions=(0.5, 0.75))
    handler, logger = LogLines(), logging.getLogger("depl_fl.subnets")
    logger.addHandler(handler)
    try:
        check_variants(net, network_layout(net), (0.0, 0.5, 0.75))
        check_variants(net, network_layout(net), (0.0, 0.75))
    finally:
        logger.removeHandler(handler)
    assert len(handler.lines) == 1 and "\n" not in handler.lines[0]
    assert handler.lines[0].startswith(
        "model warned_six_blocks: layer 'conv2' kept whole: the forward breaks once it loses output channels "
        "at compression 0.75 (RuntimeError: shape '[1, 6, -1, 8, 8]' is invalid")
    assert handler.lines[0].endswith(
        "is invalid for input of size 192); the 12 output channels of layer 'conv2' are viewed as 6 blocks "
        "(a count written into the forward): a compression keeping a number of them that is not a multiple "
        "of 6 cannot cut them (0.75 keeps 3); choose compressions keeping multiples of 6 (such as 0.5); or "
        "compute the block count from the tensor to compress it")


def test_blocks_of_a_hard_coded_size_name_the_size_and_compressions_that_keep_its_multiples():
    geo = _geo((0.0, 0.3, 0.6, 0.9), "tests.user_nets_more:four_channel_blocks_net")
    (kept,) = kept_whole(geo)
    assert kept.problem == "RuntimeError: shape '[1, -1, 4, 8, 8]' is invalid for input of size 704"
    assert kept.remedy() == (
        "the 16 output channels of layer 'conv2' are viewed as blocks of 4 (a size written into the "
        "forward): a compression keeping a number of them that is not a multiple of 4 cannot cut them "
        "(0.3 keeps 11); choose compressions keeping multiples of 4 (such as 0.25, 0.5, 0.75) to compress it")
    # Those compressions indeed run: nothing is kept whole.
    assert kept_whole(_geo((0.0, 0.25, 0.5, 0.75), "tests.user_nets_more:four_channel_blocks_net")) == ()


@pytest.mark.parametrize(("problem", "batch", "channels", "kept", "found"), [
    ("RuntimeError: shape '[1, 6, -1, 8, 8]' is invalid for input of size 192", 1, 12, 3, ("count", 6)),
    ("RuntimeError: shape '[2, -1, 4, 8, 8]' is invalid for input of size 1408", 2, 16, 11, ("size", 4)),
    ("RuntimeError: shape '[1, 6, -1]' is invalid for input of size 3", 1, 12, 3, ("count", 6)),  # features
    ("RuntimeError: shape '[-1, 400]' is invalid for input of size 224", 1, 16, 14, None),  # a flatten
    ("RuntimeError: shape '[-1, 6, 2, 8, 8]' is invalid for input of size 192", 1, 12, 3, None),  # batch -1
    ("RuntimeError: shape '[1, 6, -1, 8, 8]' is invalid for input of size 320", 1, 12, 3, None),  # not these
    ("RuntimeError: shape '[1, 5, -1, 8, 8]' is invalid for input of size 192", 1, 12, 3, None),  # 5 ∤ 12
    ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x32 and 16x64)", 1, 16, 8, None),
])
def test_a_block_view_is_recognised_from_the_error_and_the_widths(problem, batch, channels, kept, found):
    from depl_fl.task.block_views import block_view

    assert block_view(problem, batch, channels, kept) == found


def test_a_block_view_no_compression_can_cut_keeps_the_generic_hint():
    from depl_fl.task.block_views import block_view_hint
    from depl_fl.task.slicing import kept_width

    six = "RuntimeError: shape '[1, 6, -1, 8, 8]' is invalid for input of size 192"
    assert block_view_hint(six, "conv2", 1, 12, 0.75, lambda c: kept_width(12, c)).startswith(
        "the 12 output channels of layer 'conv2' are viewed as 6 blocks")
    # 6 channels as 6 blocks: no compression keeps a multiple of 6 below 6.
    one_each = "RuntimeError: shape '[1, 6, -1, 8, 8]' is invalid for input of size 192"
    assert block_view_hint(one_each, "conv2", 1, 6, 0.5, lambda c: kept_width(6, c)) is None


@pytest.mark.parametrize(("name", "layers"), [("transpose_tied_net", ("enc", "mid")),
                                               ("spatial_layer_norm_net", ("conv",))])
def test_a_network_breaking_at_every_width_in_every_group_is_still_refused_in_one_line(name, layers):
    geo = _geo((0.0, 0.5, 0.75), f"tests.user_nets:{name}")
    assert [(k.layer, k.at) for k in kept_whole(geo)] == [(layer, ()) for layer in layers]
    layout = network_layout(geo)
    assert layout.groups == ()
    with pytest.raises(ScenarioError) as err:
        check_variants(geo, layout, (0.0, 0.5, 0.75))
    message = str(err.value)
    assert "\n" not in message and "cannot be pruned structurally" in message
    assert f"the forward breaks once layer {layers[0]!r} loses output channels (" in message
    assert "model.compressions=[0]" in message


# --- the server and the nodes agree ---


def test_a_node_refuses_in_one_line_groups_kept_whole_it_does_not_derive():
    geo = _geo((0.0, 0.5, 0.75))
    check_kept_whole(geo, ["conv2"])  # what the server sends for these compressions
    with pytest.raises(ScenarioError) as err:
        check_kept_whole(_geo((0.0, 0.5)), ["conv2"])  # a node configured with other compressions
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("model tests.user_nets_more:six_block_net: the server keeps layers ['conv2'] "
                              "whole, this node derives [] at compressions 0.5:")


_DIGEST = """
import json
from depl_fl.task.geometry import TaskGeometry, with_compressions
from depl_fl.task.models import get_state
from depl_fl.task.subnets import full_network, kept_whole, network_layout
geo = with_compressions(TaskGeometry("{factory}", 10, 1, 8), {compressions})
layout = network_layout(geo)
full = get_state(full_network(geo, seed=3))
index = {{c: {{k: [None if i is None else i.tolist() for i in v]
              for k, v in layout.structure(full, c).index.items()}} for c in {compressions} if c > 0}}
kept = [[k.layer, list(k.at)] for k in kept_whole(geo)]
print(json.dumps({{"kept": kept, "groups": [g.root for g in layout.groups],
                   "index": {{str(c): v for c, v in index.items()}}}}))
"""


def _digest(factory: str, compressions: tuple[float, ...]) -> dict:
    geo = _geo(compressions, factory)
    layout, full = network_layout(geo), get_state(full_network(geo, seed=3))
    index = {str(c): {k: [None if i is None else i.tolist() for i in v]
                      for k, v in layout.structure(full, c).index.items()} for c in compressions if c > 0}
    kept = [[k.layer, list(k.at)] for k in kept_whole(geo)]
    return {"kept": kept, "groups": [g.root for g in layout.groups], "index": index}


@pytest.mark.parametrize(("factory", "compressions"), [(SIX_BLOCKS, (0.0, 0.5, 0.75)),
                                                       ("tests.user_nets:quickstart_net_8", (0.0, 0.3, 0.9))])
def test_a_fresh_process_keeps_the_same_groups_whole_with_the_same_index_sets(factory, compressions):
    code = _DIGEST.format(factory=factory, compressions=compressions)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == _digest(factory, compressions)
    assert got["kept"]  # a group is kept whole: the agreement is not the trivial one


# --- one DepL round in process: what travels is what the cost model charges ---

N = 3


def _round(compressions: str, models: tuple[str, ...]):
    from clients.client_app import make_client_app
    from depl_fl.contract.plan import Plan, RoundDecision, Targets
    from depl_fl.orchestration.scenario_builder import build_scenario, model_docs
    from depl_fl.runs.runconfig import compose_config, job_network
    from depl_fl.task.local_update import initial_state
    from depl_fl.task.partitions import geometry
    from strategies.depl_strategy import DepLStrategy, state_to_arrays
    from strategies.inprocess_grid import InProcessGrid
    from strategies.server_app import make_evaluate_fn

    cfg = compose_config([f"num_clients={N}", "simulation=inprocess", "tracking.enabled=false",
                          "model=custom", f"model.factory={SIX_BLOCKS}",
                          f"model.compressions={compressions}"])
    geo = job_network(cfg, geometry(cfg))
    docs = model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size)
    ids = [d["id"] for d in docs]
    loss = {"initial": 2.3, "run": {m: {"levels": [0.1, 2.3], "mean": [0.01, 0.3], "std": [0.01, 0.05]}
                                    for m in ids},
            "switch": [{"from": a, "to": b, "mean": 0.1, "std": 0.05} for a in ids for b in ids if a != b]}
    clients = tuple(f"c{i}" for i in range(N))
    plan = Plan("given", True, [RoundDecision(m, clients, {"A": 0, "B": 0}) for m in models])
    strategy = DepLStrategy(
        network=network_layout(geo), arch=geo.arch, targets=Targets(0.3, 0.9, 1e6), plan=plan, plan_fn=None,
        scenario_fn=lambda props: build_scenario(cfg, props, docs, loss), num_clients=N,
        train_settings={"local-epochs": 1, "lr": 0.05, "batch-size": 32, "seed": 0}, node_wait_timeout_s=1.0)
    grid = InProcessGrid(make_client_app(cfg), N)
    strategy.start(grid, state_to_arrays(initial_state(geo, seed=0)), evaluate_fn=make_evaluate_fn(cfg))
    return geo, {d["id"]: d["size_bytes"] for d in docs}, strategy, grid


def test_a_depl_round_at_each_width_moves_the_modelled_bytes_with_the_group_kept_whole():
    geo, sizes, strategy, grid = _round("[0,0.5,0.75]", ("p50", "p75"))
    records = strategy.controller.records
    assert [r["model"] for r in records] == ["p50", "p75"]
    assert all(r["replied"] == ["c0", "c1", "c2"] and not r["rejected"] for r in records)
    assert all(np.isfinite(r["loss"]) for r in records)
    for rec in records:  # measured bytes = the variant's modelled size, per planned client
        assert rec["bytes_down"] == rec["modelled_bytes_down"] == int(sizes[rec["model"]]) * N
        assert rec["bytes_up"] == rec["modelled_bytes_up"] == int(sizes[rec["model"]]) * N
    assert sizes["p75"] < sizes["p50"] < sizes["full"]
    layout = network_layout(geo)
    train = [m for m in grid.sent if m.metadata.message_type == "train"]
    assert len(train) == 2 * N
    for msg in train:
        conf = msg.content["config"]
        assert list(conf["compressions"]) == [0.5, 0.75] and list(conf["kept-whole"]) == ["conv2"]
        shapes = {k: tuple(v.shape) for k, v in msg.content["arrays"].items()}
        assert shapes == layout.sub_shapes(float(conf["compression"]))
        assert shapes["conv2.weight"][0] == 12


def test_a_depl_round_without_075_compresses_every_group():
    geo, sizes, strategy, grid = _round("[0,0.5]", ("p50",))
    assert network_layout(geo).kept == ()
    rec = strategy.controller.records[0]
    assert rec["bytes_down"] == rec["modelled_bytes_down"] == int(sizes["p50"]) * N
    msg = next(m for m in grid.sent if m.metadata.message_type == "train")
    assert list(msg.content["config"]["kept-whole"]) == []
    assert msg.content["arrays"]["conv2.weight"].shape[0] == 6


# --- a node of a user's own app learns the compressions from the message ---


def _user_train_message(grid, network: UserNetwork, compression: float, kept: list[str]):
    from flwr.app import ConfigRecord, RecordDict

    from strategies.depl_strategy import state_to_arrays

    full = get_state(full_network(network, seed=1))
    sub = extract(full, network_layout(network).structure(full, compression))
    content = RecordDict({"arrays": state_to_arrays(sub), "config": ConfigRecord({
        "compression": compression, "local-epochs": 1, "compressions": list(network.compressions),
        "kept-whole": kept})})
    return grid.create_message(content, "train", 1001, "1"), sub


def test_a_user_node_rebuilds_the_variant_from_the_compressions_the_message_carries():
    from torch.utils.data import DataLoader, TensorDataset

    from clients.user_app import DepLClient
    from strategies.depl_strategy import arrays_to_state
    from strategies.inprocess_grid import InProcessGrid
    from tests.user_app_wiring import user_client_app
    from tests.user_nets_more import six_block_net

    plain = UserNetwork(six_block_net, (1, 8, 8), "six_blocks")
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8, 1, 8, 8, generator=gen), torch.arange(8) % 10)

    def train(net, loader, epochs, device):  # noqa: ARG001
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()

    client = DepLClient(plain, train)  # the node's network carries no compressions
    grid = InProcessGrid(user_client_app(client, lambda: DataLoader(data, batch_size=4)), 1)
    network = with_compressions(plain, (0.0, 0.5, 0.75))
    msg, sub = _user_train_message(grid, network, 0.75, ["conv2"])
    (reply,) = grid.send_and_receive([msg])
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    up = arrays_to_state(reply.content["arrays"])
    assert {k: v.shape for k, v in up.items()} == {k: v.shape for k, v in sub.items()}
    assert up["conv2.weight"].shape[0] == 12

    msg, _ = _user_train_message(grid, network, 0.75, [])  # a server that keeps another set whole
    (reply,) = grid.send_and_receive([msg])
    assert reply.has_error() and "this node derives ['conv2'] at compressions 0.5, 0.75" in reply.error.reason



def test_two_strategies_for_one_network_each_evaluate_their_own_variants():
    """In one process, in either order, each evaluate_fn cuts the network to its strategy's compressions."""
    from strategies.depl_strategy import state_to_arrays
    from strategies.user_app import depl_strategy, evaluate_fn
    from tests.user_nets_more import six_block_net

    network = UserNetwork(six_block_net, (1, 8, 8), "six_blocks_twice")
    arrays = state_to_arrays(get_state(full_network(network, seed=1)))
    seen: list[tuple[str, tuple[int, ...]]] = []

    def test_of(name: str):
        def test(net, loader, device):  # noqa: ARG001
            seen.append((name, tuple(net.state_dict()["conv2.weight"].shape)))
            return 1.0, 0.0
        return test

    wide = depl_strategy(network, num_clients=1, compressions=(0.0, 0.5, 0.75))  # conv2 kept whole
    narrow = depl_strategy(network, num_clients=1, compressions=(0.0, 0.5))  # nothing kept whole
    evaluate_narrow = evaluate_fn(narrow, test_of("narrow"), None)
    evaluate_wide = evaluate_fn(wide, test_of("wide"), None)  # built after the other strategy
    for evaluate in (evaluate_wide, evaluate_narrow):
        evaluate(1, arrays, 0.5)
    evaluate_wide(1, arrays, 0.75)
    assert seen == [("wide", (12, 4, 3, 3)), ("narrow", (6, 4, 3, 3)), ("wide", (12, 2, 3, 3))]
    assert wide.network.kept == ("conv2",) and narrow.network.kept == ()  # what each strategy trains


def test_evaluate_fn_refuses_a_network_in_one_line():
    from strategies.user_app import evaluate_fn
    from tests.user_nets_more import six_block_net

    with pytest.raises(ScenarioError) as err:
        evaluate_fn(UserNetwork(six_block_net, (1, 8, 8), "six_blocks"), lambda *a: (1.0, 0.0), None)
    assert str(err.value) == ("evaluate_fn takes the strategy depl_strategy built for six_blocks, not the "
                              "network: its variants depend on that strategy's compressions; write "
                              "evaluate_fn(strategy, test, testloader)")
