"""Recurrent layers (input side and hidden size), ``nn.Bilinear``, einsum and matmul weights pruned.

Grouped by what they protect: canaries pinning the torch-pruning 1.6.1
behaviour DepL works around or relies on (they fail the day it changes);
the tracing stand-ins leave the outputs unchanged; the variants of networks
with a GRU, an RNN, LSTMs of every shape, bilinear fusions, einsums and
``F.linear``/``torch.matmul``/``@``/``torch.mm`` on a bare weight derive,
pass the Check (the sub-network computes the silenced full network), shrink
the layer before them and slice exactly (extract then scatter); a recurrent
layer's hidden size is one group (every layer and direction; the final
state's readers follow), kept whole when projected, given an initial state,
or read through ``pad_packed_sequence``; a weight two einsums (or two matmuls) share,
given first or read whole elsewhere too is refused in one line. DepL rounds
with bytes as modelled run in ``tests/test_user_zoo_extra.py``
(``bilinear_net``, ``bilstm_net``, ``einsum_net``) and
``tests/test_user_zoo.py`` (``parameter_matmul_net``, ``conv_lstm_net``,
``row_lstm``, ``row_gru``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from depl_fl.errors import ScenarioError
from depl_fl.task import extra_pruners
from depl_fl.task.models import get_state
from depl_fl.task.slicing import extract, scatter
from depl_fl.task.subnets import (
    UserNetwork,
    build_skeleton,
    check_variants,
    full_network,
    kept_whole,
    network_layout,
)
from depl_fl.task.torch_pruning_guard import torch_pruning
from tests.torch_threads import one_thread  # noqa: F401 (autouse)
from tests.zoo_checks import check_derived_variants


class ConvRows(nn.Module):
    """A conv stem whose map rows (8 channels x 8 columns) feed a recurrent layer, the last step a head."""

    def __init__(self, kind: str = "LSTM", *, layers: int = 2, bidirectional: bool = True,
                 batch_first: bool = True, proj_size: int = 0, packed: bool = False,
                 hidden_linear: bool = False, residual: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        extra = {"proj_size": proj_size} if proj_size else {}
        self.rnn = getattr(nn, kind)(64, 16, num_layers=layers, batch_first=batch_first,
                                     bidirectional=bidirectional, **extra)
        width = (proj_size or 16) * (2 if bidirectional else 1)
        self.batch_first, self.packed = batch_first, packed
        self.skip = nn.Linear(64, width) if residual else None
        self.mid = nn.Linear(width, 12) if hidden_linear else None
        self.fc = nn.Linear(12 if hidden_linear else width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        rows = F.relu(self.conv(x)).permute(0, 2, 1, 3).flatten(2)
        seq = rows if self.batch_first else rows.transpose(0, 1)
        if self.packed:
            lengths = torch.full((rows.shape[0],), rows.shape[1])
            out, _ = self.rnn(nn.utils.rnn.pack_padded_sequence(seq, lengths, batch_first=True))
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        else:
            out, _ = self.rnn(seq)
        last = out[:, -1] if self.batch_first else out[-1]
        if self.skip is not None:
            last = last + self.skip(rows.mean(1))  # a group reaching the recurrent layer's outputs
        if self.mid is not None:
            last = F.relu(self.mid(last))
        return self.fc(last)


class StateHead(nn.Module):
    """A conv stem whose rows feed a two-layer recurrent layer, the final state (not the outputs) to the head.

    ``initial``: the layer is given a zero initial state made in the forward.
    """

    def __init__(self, kind: str = "LSTM", *, bidirectional: bool = False, initial: bool = False,
                 **options: object) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.rnn = getattr(nn, kind)(64, 16, num_layers=2, batch_first=True, bidirectional=bidirectional,
                                     **options)
        self.initial = initial
        self.fc = nn.Linear(32 if bidirectional else 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        rows = F.relu(self.conv(x)).permute(0, 2, 1, 3).flatten(2)
        directions = 2 if self.rnn.bidirectional else 1
        if self.initial:
            h0 = torch.zeros(2 * directions, x.shape[0], 16)
            _, state = self.rnn(rows, (h0, h0) if isinstance(self.rnn, nn.LSTM) else h0)
        else:
            _, state = self.rnn(rows)
        h = state[0] if isinstance(state, tuple) else state
        return self.fc(torch.cat([h[-2], h[-1]], 1) if directions == 2 else h[-1])


class PixelRows(nn.Module):
    """The image's rows straight into a two-layer bidirectional recurrent layer, its output or state read."""

    def __init__(self, kind: str = "LSTM", *, final_state: bool = False) -> None:
        super().__init__()
        self.rnn = getattr(nn, kind)(8, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.final_state = final_state
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        out, state = self.rnn(x[:, 0])
        if not self.final_state:
            return self.head(out[:, -1])
        h = state[0] if isinstance(state, tuple) else state
        return self.head(torch.cat([h[-2], h[-1]], 1))


class RowsWithInitialState(nn.Module):
    """The image's rows through a GRU given a zero initial state, a linear head: nothing else to prune."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.head = nn.GRU(8, 16, batch_first=True), nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        out, _ = self.rnn(x[:, 0], torch.zeros(1, x.shape[0], 16))
        return self.head(out[:, -1])


class Fused(nn.Module):
    """A conv's pooled channels fused by ``nn.Bilinear`` with themselves or with a second conv's flat map."""

    def __init__(self, second: str = "same") -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(1, 4, 3, stride=2, padding=1)
        self.second = second
        self.fuse = nn.Bilinear(16, 16 if second == "same" else 64, 32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        a = F.relu(self.conv(x)).mean((2, 3))
        b = a if self.second == "same" else F.relu(self.conv2(x)).flatten(1)
        return self.fc(F.relu(self.fuse(a, b)))


class Einsum(nn.Module):
    """A conv's channels mapped by ``torch.einsum`` with a bare ``weight``, in one of several spellings."""

    def __init__(self, spelling: str = "bchw,oc->bohw", residual: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3, padding=1)
        self.spelling, self.residual = spelling, residual
        transposed = spelling in ("btc,co->bto",)
        self.weight = nn.Parameter(torch.randn(*((16, 24) if transposed else (24, 16))) * 0.2)
        self.side = nn.Conv2d(1, 24, 3, padding=1) if residual else None
        self.fc = nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = F.relu(self.conv(x))
        if self.spelling == "btc,co->bto":  # tokens: the map's positions as a sequence
            return self.fc(torch.einsum(self.spelling, h.flatten(2).transpose(1, 2), self.weight).mean(1))
        if self.spelling == "oc,bchw->bohw":
            y = torch.einsum(self.spelling, self.weight, h)
        elif self.spelling == "bchw,oc->bhwo":
            y = torch.einsum(self.spelling, h, self.weight).permute(0, 3, 1, 2)
        else:
            y = torch.einsum(self.spelling, h, self.weight)
        if self.side is not None:
            y = y + self.side(x)  # a group reaching the einsum's outputs
        return self.fc(F.relu(y).mean((2, 3)))


class Matmul(nn.Module):
    """A conv's pooled channels (or its map positions as tokens) mapped by a bare ``weight`` in one spelling.

    ``linear``/``linear_bias`` call ``F.linear`` (weight ``[24, 16]``, the
    second a bare ``bias`` too); ``matmul``, ``at``, ``mm`` and ``tokens_at``
    use ``torch.matmul``, ``@``, ``torch.mm`` and ``@`` on tokens (weight
    ``[16, 24]``).
    """

    def __init__(self, spelling: str = "at", residual: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3, padding=1)
        self.spelling = spelling
        linear = spelling.startswith("linear")
        self.weight = nn.Parameter(torch.randn(*((24, 16) if linear else (16, 24))) * 0.2)
        self.bias = nn.Parameter(torch.randn(24) * 0.1) if spelling == "linear_bias" else None
        self.side = nn.Linear(16, 24) if residual else None
        self.fc = nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = F.relu(self.conv(x))
        if self.spelling == "tokens_at":
            return self.fc(F.relu(h.flatten(2).transpose(1, 2) @ self.weight).mean(1))
        pooled = h.mean((2, 3))
        y = {"linear": lambda: F.linear(pooled, self.weight),
             "linear_bias": lambda: F.linear(pooled, self.weight, self.bias),
             "matmul": lambda: torch.matmul(pooled, self.weight),
             "at": lambda: pooled @ self.weight,
             "mm": lambda: torch.mm(pooled, self.weight)}[self.spelling]()
        if self.side is not None:
            y = y + self.side(pooled)  # a group reaching the map's outputs
        return self.fc(F.relu(y))


class TwiceMatmul(nn.Module):
    """One bare square ``weight`` applied twice with ``@`` (to the conv's channels, then to its outputs)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv2d(1, 16, 3, padding=1), nn.Linear(16, 10)
        self.weight = nn.Parameter(torch.randn(16, 16) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = F.relu(self.conv(x)).mean((2, 3))
        return self.fc(F.relu(F.relu(h @ self.weight) @ self.weight))


class WeightFirstMatmul(nn.Module):
    """A bare ``weight`` ``[24, 16]`` first in ``torch.matmul``: a map on the data's second-to-last axis."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv2d(1, 16, 3, padding=1), nn.Linear(24 * 8, 10)
        self.weight = nn.Parameter(torch.randn(24, 16) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = F.relu(self.conv(x)).mean(3)  # [b, 16, 8]
        return self.fc(F.relu(torch.matmul(self.weight, h)).flatten(1))


class SharedBiasLinear(nn.Module):
    """Two bare weights applied by ``F.linear`` to two convs' pooled channels, with one bare ``bias``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.conv2, self.fc = nn.Conv2d(1, 16, 3, padding=1), nn.Conv2d(1, 8, 3, padding=1), \
            nn.Linear(24, 10)
        self.weight = nn.Parameter(torch.randn(24, 16) * 0.2)
        self.weight2 = nn.Parameter(torch.randn(24, 8) * 0.2)
        self.bias = nn.Parameter(torch.randn(24) * 0.1)
        self.side = nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        a, b = F.relu(self.conv(x)).mean((2, 3)), F.relu(self.conv2(x)).mean((2, 3))
        y = F.linear(a, self.weight, self.bias) + self.side(b)  # a group reaching the first map's outputs
        return self.fc(F.relu(y) + F.relu(F.linear(b, self.weight2, self.bias)))


class PenalizedMatmul(nn.Module):
    """A bare ``weight`` used with ``@`` and also read whole (its mean added to the logits)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = nn.Conv2d(1, 16, 3, padding=1), nn.Linear(24, 10)
        self.weight = nn.Parameter(torch.randn(16, 24) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        y = self.fc(F.relu(F.relu(self.conv(x)).mean((2, 3)) @ self.weight))
        return y + self.weight.mean()


class Mixer(nn.Module):
    """A 1x1 channel mix by ``torch.einsum`` with its own bare weight."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 16) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return torch.einsum("bchw,oc->bohw", x, self.weight)


class SharedMixer(nn.Module):
    """One :class:`Mixer` applied twice: its weight reads the conv's channels and its own outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.mix, self.fc = nn.Conv2d(1, 16, 3, padding=1), Mixer(), nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.fc(F.relu(self.mix(F.relu(self.mix(F.relu(self.conv(x)))))).mean((2, 3)))


def _net(name: str, cls: type[nn.Module], *args: object, **kwargs: object) -> UserNetwork:
    return UserNetwork(functools.partial(cls, *args, **kwargs), (1, 8, 8), name)


#: Recurrent networks: the conv before the recurrent layer is compressed in each; so is its hidden size
#: unless projected or read through ``pad_packed_sequence`` (:data:`HIDDEN_KEPT_WHOLE`).
RECURRENT = {
    "bilstm": _net("bilstm", ConvRows),
    "lstm": _net("lstm", ConvRows, layers=1, bidirectional=False),
    "lstm_sequence_first": _net("lstm_sequence_first", ConvRows, batch_first=False),
    "lstm_projected": _net("lstm_projected", ConvRows, proj_size=8),
    "lstm_packed": _net("lstm_packed", ConvRows, packed=True),
    "bigru": _net("bigru", ConvRows, "GRU"),
    "rnn": _net("rnn", ConvRows, "RNN", layers=3, bidirectional=False),
}
HIDDEN_KEPT_WHOLE = ("lstm_projected", "lstm_packed")
#: The final state read by the head (an LSTM's, a GRU's without biases, a ReLU RNN's, both directions').
FINAL_STATE = {
    "state_lstm": _net("state_lstm", StateHead),
    "state_gru_without_bias": _net("state_gru_without_bias", StateHead, "GRU", bias=False),
    "state_relu_rnn": _net("state_relu_rnn", StateHead, "RNN", nonlinearity="relu"),
    "state_bilstm": _net("state_bilstm", StateHead, bidirectional=True),
}
#: Straight from the pixels (no gradient reaches the layer's input): its hidden size alone.
PIXEL_ROWS = {
    "pixel_bilstm": _net("pixel_bilstm", PixelRows),
    "pixel_bigru_state": _net("pixel_bigru_state", PixelRows, "GRU", final_state=True),
}
#: Bilinear fusions: the roots compressed.
BILINEAR = {
    "bilinear_same": (_net("bilinear_same", Fused, "same"), ("conv",)),
    "bilinear_flat": (_net("bilinear_flat", Fused, "flat"), ("conv", "conv2")),
}


class RowsIntoLSTM(nn.Module):
    """A conv whose map rows feed ``lstm``; the output is the last step (for torch-pruning alone)."""

    def __init__(self, lstm: nn.LSTM) -> None:
        super().__init__()
        self.conv, self.lstm = nn.Conv2d(1, 8, 3, padding=1), lstm

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.lstm(F.relu(self.conv(x)).permute(0, 2, 1, 3).flatten(2))[0][:, -1]


#: Einsums on a bare weight: the roots compressed, the weight's shape at p50.
EINSUM = {
    "einsum": (_net("einsum", Einsum), ("conv",), (24, 8)),
    "einsum_weight_first": (_net("einsum_weight_first", Einsum, "oc,bchw->bohw"), ("conv",), (24, 8)),
    "einsum_channels_last": (_net("einsum_channels_last", Einsum, "bchw,oc->bhwo"), ("conv",), (24, 8)),
    "einsum_tokens": (_net("einsum_tokens", Einsum, "btc,co->bto"), ("conv",), (8, 24)),
    "einsum_plus_conv": (_net("einsum_plus_conv", Einsum, residual=True), ("conv", "side"), (12, 8)),
}


#: A bare weight used through F.linear or a matmul: the roots compressed, the weight's (and bias') p50 shape.
MATMUL = {
    "linear": (_net("linear", Matmul, "linear"), ("conv",), (24, 8), None),
    "linear_bias": (_net("linear_bias", Matmul, "linear_bias", residual=True), ("conv", "side"), (12, 8),
                    (12,)),
    "matmul": (_net("matmul", Matmul, "matmul"), ("conv",), (8, 24), None),
    "at": (_net("at", Matmul, "at"), ("conv",), (8, 24), None),
    "mm": (_net("mm", Matmul, "mm", residual=True), ("conv", "side"), (8, 12), None),
    "tokens_at": (_net("tokens_at", Matmul, "tokens_at"), ("conv",), (8, 24), None),
}


def _input_columns_sliced(lstm: nn.LSTM, dropped: Sequence[int]) -> int:
    """Input columns torch-pruning alone slices from ``lstm`` when the conv before it loses ``dropped``."""
    tp = torch_pruning()
    net = RowsIntoLSTM(lstm)
    before = lstm.input_size
    dg = tp.DependencyGraph().build_dependency(net, example_inputs=torch.randn(1, 1, 8, 8), verbose=False)
    dg.get_pruning_group(net.conv, tp.prune_conv_out_channels, list(dropped)).prune()
    return before - lstm.input_size


# --- canaries: torch-pruning 1.6.1 as DepL works around it ---


def test_torch_pruning_alone_slices_the_wrong_input_columns_of_a_bidirectional_lstm():
    """Dropping 4 of the conv's 8 channels must drop 4 x 8 = 32 input columns; it drops 20 (28 for one layer).

    The day this fails, torch-pruning traces recurrent layers right and the
    stand-in forward of :func:`extra_pruners.traced_as_layers` may go.
    """
    dropped = [4, 5, 6, 7]
    assert _input_columns_sliced(nn.LSTM(64, 16, batch_first=True), dropped) == 32  # one direction: right
    for layers in (1, 2):
        lstm = nn.LSTM(64, 16, num_layers=layers, batch_first=True, bidirectional=True)
        assert _input_columns_sliced(lstm, dropped) != 32


def test_torch_pruning_reaches_a_recurrent_layers_output_readers_from_its_first_returned_item():
    """A layer's node is the first item of the tuple it returns; pruning its hidden size reaches the head.

    DepL's hidden-size group relies on both: here ``fc`` reads the final
    state ``h_n``, joined to the output (:func:`extra_pruners.traced_as_layers`).
    """
    tp = torch_pruning()
    net = StateHead()
    with extra_pruners.traced_as_layers(net) as layers:
        dg = tp.DependencyGraph().build_dependency(
            net, example_inputs=torch.randn(1, 1, 8, 8), verbose=False,
            customized_pruners=extra_pruners.customized_pruners(net))
    extra_pruners.rewire(dg, layers)
    pruner = extra_pruners.recurrent_pruner()
    group = dg.get_pruning_group(net.rnn, pruner.prune_out_channels, [2, 5])
    readers = [item for item in group.items if item.dep.target.module is net.fc]
    assert [(dg.is_in_channel_pruning_fn(r.dep.handler), list(r.idxs)) for r in readers] == [(True, [2, 5])]


def test_torch_pruning_has_no_pruner_for_a_gru_an_rnn_or_a_bilinear_layer():
    """It traces them as elementwise operations (tying their inputs to their outputs)."""
    ops = torch_pruning().ops
    for layer in (nn.GRU(4, 4), nn.RNN(4, 4), nn.Bilinear(2, 3, 4)):
        assert ops.module2type(layer) == ops.OPTYPE.ELEMENTWISE
    assert ops.module2type(nn.LSTM(4, 4)) == ops.OPTYPE.LSTM


def test_torch_pruning_looks_a_customized_pruner_up_by_the_exact_layer_class():
    """Why :func:`extra_pruners.customized_pruners` names every recurrent class a network uses."""

    class MyLSTM(nn.LSTM):
        pass

    dg = torch_pruning().DependencyGraph()
    pruner = extra_pruners.recurrent_pruner()
    dg.register_customized_layer(nn.LSTM, pruner)
    assert dg.get_pruner_of_module(nn.LSTM(4, 4)) is pruner
    assert dg.get_pruner_of_module(MyLSTM(4, 4)) is not pruner
    layers = nn.ModuleList([MyLSTM(4, 4), nn.GRU(4, 4), nn.Bilinear(2, 2, 2)])
    found = extra_pruners.customized_pruners(layers)
    assert set(found) == {MyLSTM, nn.GRU, nn.Bilinear}


def test_torch_pruning_prunes_both_inputs_of_a_layer_with_one_function():
    """Without :func:`extra_pruners.separate_bilinear_inputs` the two branches of a fusion form one group."""
    tp = torch_pruning()
    for separate in (False, True):
        net = Fused("flat")
        with extra_pruners.traced_as_layers(net) as layers:
            dg = tp.DependencyGraph().build_dependency(
                net, example_inputs=torch.randn(1, 1, 8, 8), verbose=False,
                customized_pruners=extra_pruners.customized_pruners(net))
        if separate:
            extra_pruners.separate_bilinear_inputs(dg, layers)
        group = dg.get_pruning_group(net.conv, tp.prune_conv_out_channels, [0, 1])
        pruned = {item.dep.target.module for item in group.items
                  if dg.is_out_channel_pruning_fn(item.dep.handler)}
        assert (net.conv2 in pruned) is not separate


def test_torch_pruning_ties_an_einsums_input_channels_to_its_reader():
    """The conv's group reaches the einsum's reader (``fc`` reads 24 einsum outputs, not 16 conv channels)."""
    tp = torch_pruning()
    net = Einsum()
    dg = tp.DependencyGraph().build_dependency(net, example_inputs=torch.randn(1, 1, 8, 8), verbose=False)
    group = dg.get_pruning_group(net.conv, tp.prune_conv_out_channels, [0, 1])
    assert any(item.dep.target.module is net.fc for item in group.items)


@pytest.mark.parametrize("spelling", ["linear", "at"])
def test_torch_pruning_ties_a_bare_matmul_weights_input_channels_to_its_reader(spelling):
    """As for an einsum: the conv's group reaches ``fc``, which reads the 24 outputs of the product."""
    tp = torch_pruning()
    net = Matmul(spelling)
    dg = tp.DependencyGraph().build_dependency(net, example_inputs=torch.randn(1, 1, 8, 8), verbose=False)
    group = dg.get_pruning_group(net.conv, tp.prune_conv_out_channels, [0, 1])
    assert any(item.dep.target.module is net.fc for item in group.items)


# --- the tracing stand-ins ---


@pytest.mark.parametrize("net", [ConvRows(), ConvRows("GRU", packed=True), Fused("flat"), Einsum(),
                                 *(Matmul(spelling, residual=True)
                                   for spelling in ("linear_bias", "matmul", "at", "mm", "tokens_at"))],
                         ids=["bilstm", "packed_gru", "bilinear", "einsum", "linear", "matmul", "at", "mm",
                              "tokens_at"])
def test_while_tracing_the_layers_compute_what_they_compute_outside(net):
    functions = (torch.einsum, F.linear, torch.matmul, torch.mm)
    x = torch.randn(2, 1, 8, 8, requires_grad=True)
    want = net.eval()(x)
    with extra_pruners.traced_as_layers(net) as layers:
        got = net(x)
    assert got.grad_fn is not None
    torch.testing.assert_close(got, want)  # a recurrent kernel without gradients rounds otherwise
    assert all("forward" not in vars(m) for m in net.modules())  # the layers' own forward again
    assert torch.einsum is torch.functional.einsum
    assert (torch.einsum, F.linear, torch.matmul, torch.mm) == functions
    assert "__matmul__" not in vars(torch.Tensor)  # inherited again
    if isinstance(net, Matmul):
        assert [(w.entry, len(fns)) for w, fns in layers.linear_maps.items()] == [("weight", 1)]


def test_a_matmul_outside_the_model_or_on_a_weight_given_first_runs_as_it_is():
    """Only a bare parameter of the model, second (``x @ w``), on the last axis of a batch is a linear map."""
    net = WeightFirstMatmul()
    x = torch.randn(2, 1, 8, 8, requires_grad=True)
    outside = nn.Parameter(torch.randn(16, 4))
    with extra_pruners.traced_as_layers(net) as layers:
        net(x)
        torch.randn(3, 16, requires_grad=True) @ outside
        F.linear(torch.randn(16, requires_grad=True), net.weight)  # one vector, no batch
        torch.randn(3, 24) @ net.weight  # data without gradients: no group reaches it
    assert [len(fns) for fns in layers.linear_maps.values()] == []


@pytest.mark.parametrize(("equation", "weight", "dims"), [
    ("bchw,oc->bohw", 1, (1, 0)), ("oc,bchw->bohw", 0, (1, 0)), ("btc,co->bto", 1, (0, 1)),
    ("b c, o c -> b o", 1, (1, 0)), ("bchw,oc->bhwo", 1, (1, 0)),
    ("bchw,oc->bohw", 0, None),      # the data operand is no matrix
    ("bc,oc", 1, None),              # implicit output
    ("...c,oc->...o", 1, None),      # ellipsis
    ("bc,oc->boc", 1, None),         # c not summed: no linear map
    ("bc,cc->bc", 1, None),          # a repeated index (a diagonal)
    ("bch,oc->bo", 1, None),         # sums another index of the data too
    ("bc,oc,od->bd", 1, None),       # three operands
])
def test_an_einsum_is_a_linear_map_only_when_its_weight_sums_one_index_and_makes_one(equation, weight, dims):
    assert extra_pruners.linear_einsum(equation, weight) == dims


# --- variants: derived, checked, exact ---


@pytest.mark.parametrize("name", list(RECURRENT))
def test_the_conv_before_a_recurrent_layer_and_its_hidden_size_are_compressed_and_pass_the_check(name):
    net = RECURRENT[name]
    hidden_whole = name in HIDDEN_KEPT_WHOLE
    check_derived_variants(net, ("conv",) if hidden_whole else ("conv", "rnn"))
    full, half = network_layout(net).sub_shapes(0.0), network_layout(net).sub_shapes(0.5)
    rnn = full_network(net).rnn
    gates, directions = extra_pruners.gates(rnn), extra_pruners.directions(rnn)
    hidden = 16 if hidden_whole else 8
    width = rnn.proj_size or hidden
    assert half["conv.weight"] == (4, 1, 3, 3)
    assert half["rnn.weight_ih_l0"] == (gates * hidden, 32)  # 4 channels x 8 columns read
    assert half["rnn.weight_hh_l0"] == (gates * hidden, width)
    if "rnn.weight_ih_l1" in half:  # deeper layers read every direction's kept units
        assert half["rnn.weight_ih_l1"] == (gates * hidden, width * directions)
    assert half["fc.weight"] == (10, width * directions)
    assert build_skeleton(net, 0.5).rnn.hidden_size == hidden
    if hidden_whole:
        assert all(half[k] == full[k] for k in full if k.startswith("rnn.") and "_ih_l0" not in k)


def test_a_linear_layer_after_a_recurrent_layer_or_added_to_its_outputs_is_compressed_with_it():
    """One after it is its own group; one whose outputs add to the layer's outputs joins the hidden units."""
    after = _net("lstm_then_linear", ConvRows, hidden_linear=True)
    check_derived_variants(after, ("conv", "rnn", "mid"))
    assert network_layout(after).sub_shapes(0.5)["mid.weight"] == (6, 16)
    added = _net("lstm_plus_linear", ConvRows, residual=True)
    check_derived_variants(added, ("conv", "rnn"))
    assert network_layout(added).sub_shapes(0.5)["skip.weight"] == (16, 32)


@pytest.mark.parametrize("name", list(FINAL_STATE))
def test_the_readers_of_a_recurrent_layers_final_state_follow_its_hidden_size(name):
    net = FINAL_STATE[name]
    check_derived_variants(net, ("conv", "rnn"))
    half = network_layout(net).sub_shapes(0.5)
    directions = 2 if name == "state_bilstm" else 1
    assert half["fc.weight"] == (10, 8 * directions)
    assert ("rnn.bias_ih_l0" in half) is ("without_bias" not in name)
    small = build_skeleton(net, 0.5).rnn
    assert small.hidden_size == 8 and type(small) is type(full_network(net).rnn)


@pytest.mark.parametrize("name", list(PIXEL_ROWS))
def test_a_deep_bidirectional_layer_reading_the_pixels_has_its_hidden_size_compressed(name):
    """Its own graph fails torch-pruning's trace; joined to a copy of the input, the layer is one node."""
    net = PIXEL_ROWS[name]
    check_derived_variants(net, ("rnn",))
    assert network_layout(net).sub_shapes(0.5)["head.weight"] == (10, 16)
    assert build_skeleton(net, 0.5).rnn.hidden_size == 8


def test_a_hidden_unit_owns_its_gate_rows_and_columns_in_every_layer_and_direction():
    net = RECURRENT["bilstm"]
    owners = {(ax.entry, ax.dim): ax.owner for ax in network_layout(net).axes}
    group = next(g for g in network_layout(net).groups if g.root == "rnn")
    assert (group.width, group.blocks) == (16, 2)
    unit = group.offset + np.arange(16)
    for suffix in ("", "_reverse"):
        for layer in ("l0", "l1"):
            for entry in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                np.testing.assert_array_equal(owners[(f"rnn.{entry}_{layer}{suffix}", 0)], np.tile(unit, 4))
            np.testing.assert_array_equal(owners[(f"rnn.weight_hh_{layer}{suffix}", 1)], unit)
        np.testing.assert_array_equal(owners[(f"rnn.weight_ih_l1{suffix}", 1)], np.tile(unit, 2))
    np.testing.assert_array_equal(owners[("fc.weight", 1)], np.tile(unit, 2))  # features j and 16 + j


@pytest.mark.parametrize(("kind", "options"), [("LSTM", {}), ("GRU", {}), ("RNN", {}),
                                               ("RNN", {"nonlinearity": "relu"}), ("LSTM", {"bias": False}),
                                               ("GRU", {"bidirectional": True, "num_layers": 2})],
                         ids=["lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_without_bias", "bigru"])
def test_a_hidden_unit_whose_gate_rows_are_zero_stays_exactly_zero(kind, options):
    """Why dropping a unit is sound: its state is 0 at every step once its gate rows are zero.

    Columns left as they are: an LSTM's cell gets ``0.5 c + 0.5 tanh(0)``, a
    GRU's state ``0.5 tanh(0) + 0.5 h``, an RNN's ``tanh(0)`` or ``relu(0)``;
    each starts at 0.
    """
    torch.manual_seed(0)
    layer = getattr(nn, kind)(5, 6, batch_first=True, **options)
    dropped = np.array([1, 4])
    with torch.no_grad():
        for axis in extra_pruners.hidden_axes(layer):
            if not axis.reads:
                np.moveaxis(getattr(layer, axis.entry).numpy(), axis.dim, 0)[
                    axis.coordinates(dropped).ravel()] = 0
        out, state = layer(torch.randn(3, 7, 5) * 3)
    features = np.concatenate([dropped + 6 * d for d in range(extra_pruners.directions(layer))])
    assert torch.count_nonzero(out[..., features]) == 0
    for s in state if isinstance(state, tuple) else (state,):
        assert torch.count_nonzero(s[..., dropped]) == 0
    assert torch.count_nonzero(out) > 0


def test_the_pruner_drops_a_units_rows_and_columns_in_every_layer_and_direction():
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    before = {k: v.detach().clone() for k, v in lstm.named_parameters()}
    extra_pruners.recurrent_pruner().prune_out_channels(lstm, [1, 5])  # unit 1 in both directions
    kept, rows = [0, 2, 3], [g * 4 + j for g in range(4) for j in (0, 2, 3)]
    assert lstm.hidden_size == 3
    torch.testing.assert_close(lstm.weight_ih_l0_reverse, before["weight_ih_l0_reverse"][rows])
    torch.testing.assert_close(lstm.weight_hh_l1, before["weight_hh_l1"][rows][:, kept])
    both_directions = kept + [4 + j for j in kept]
    torch.testing.assert_close(lstm.weight_ih_l1, before["weight_ih_l1"][rows][:, both_directions])
    torch.testing.assert_close(lstm.bias_hh_l0, before["bias_hh_l0"][rows])
    assert lstm(torch.randn(2, 1, 3))[0].shape == (2, 1, 6)


@pytest.mark.parametrize(("layer", "idxs", "message"), [
    (nn.LSTM(3, 4, bidirectional=True), [1], r"features \[1\] drop a hidden unit in one direction only"),
    (nn.LSTM(3, 4, proj_size=2), [1], "DepL keeps a projected recurrent layer's hidden size whole"),
], ids=["one_direction", "projected"])
def test_the_pruner_refuses_a_hidden_size_it_cannot_drop_consistently(layer, idxs, message):
    with pytest.raises(extra_pruners.HiddenSizeKept, match=message):
        extra_pruners.recurrent_pruner().prune_out_channels(layer, idxs)


def test_a_hidden_size_given_an_initial_state_is_kept_whole():
    """The state made in the forward is as wide as the whole hidden size: the conv alone is compressed."""
    net = _net("initial_state", StateHead, initial=True)
    check_derived_variants(net, ("conv",))
    assert build_skeleton(net, 0.5).rnn.hidden_size == 16


def test_a_hidden_size_read_through_pad_packed_sequence_is_kept_whole_with_one_warning_line():
    """torch-pruning loses the channels in pad_packed_sequence's copy: the Check keeps the group whole."""
    (kept,) = kept_whole(RECURRENT["lstm_packed"])
    assert kept.layer == "rnn"
    assert kept.reason() == ("the forward breaks once it loses output channels (RuntimeError: mat1 and mat2 "
                             "shapes cannot be multiplied (1x16 and 32x10); raised in layer 'fc' (Linear))")


def test_a_network_whose_only_width_is_a_hidden_size_kept_whole_is_refused_in_one_line():
    net = _net("rows_into_an_initial_state", RowsWithInitialState)
    with pytest.raises(ScenarioError) as err:
        check_variants(net, network_layout(net), (0.0, 0.5))
    assert str(err.value) == ("model rows_into_an_initial_state: no layer's output channels can be pruned "
                              "(the output channels of layer 'rnn' stay whole: they are a recurrent layer's "
                              "hidden size, projected or given an initial state), so every compressed "
                              "variant would be the full network; use model.compressions=[0]")


@pytest.mark.parametrize("name", list(BILINEAR))
def test_each_input_of_a_bilinear_layer_follows_its_own_branch(name):
    net, roots = BILINEAR[name]
    check_derived_variants(net, roots)
    second = 16 if name == "bilinear_same" else 64
    assert network_layout(net).sub_shapes(0.0)["fuse.weight"] == (32, 16, second)
    assert network_layout(net).sub_shapes(0.5)["fuse.weight"] == (32, 8, second // 2)


@pytest.mark.parametrize("net", [RECURRENT["bilstm"], RECURRENT["bigru"], BILINEAR["bilinear_flat"][0],
                                 EINSUM["einsum_plus_conv"][0]],
                         ids=["bilstm", "bigru", "bilinear", "einsum"])
def test_extract_then_scatter_restores_the_state_exactly(net):
    layout = network_layout(net)
    full = get_state(full_network(net, seed=2))
    structure = layout.structure(full, 0.5)
    sub = extract(full, structure)
    assert {k: v.shape for k, v in sub.items()} == layout.sub_shapes(0.5)
    restored = scatter(full, sub, structure)
    for key, arr in full.items():
        np.testing.assert_array_equal(restored[key], arr)
    onto_zeros = scatter({k: np.zeros_like(v) for k, v in full.items()}, sub, structure)
    assert any(not np.array_equal(onto_zeros[k], full[k]) for k in full)  # the dropped coordinates stay 0


@pytest.mark.parametrize("name", list(EINSUM))
def test_the_conv_before_an_einsum_on_a_bare_weight_is_compressed_and_its_variants_pass_the_check(name):
    net, roots, weight = EINSUM[name]
    check_derived_variants(net, roots)
    assert network_layout(net).sub_shapes(0.5)["weight"] == weight


@pytest.mark.parametrize("name", list(MATMUL))
def test_the_conv_before_a_bare_weight_in_a_matmul_is_compressed_and_its_variants_pass_the_check(name):
    net, roots, weight, bias = MATMUL[name]
    check_derived_variants(net, roots)
    shapes = network_layout(net).sub_shapes(0.5)
    assert shapes["weight"] == weight
    if bias is not None:
        assert shapes["bias"] == bias


def test_a_bare_bias_two_linear_maps_share_follows_the_one_group_both_outputs_join():
    net = _net("shared_bias_linear", SharedBiasLinear)
    check_derived_variants(net, ("conv", "conv2", "side"))
    shapes = network_layout(net).sub_shapes(0.5)
    assert (shapes["weight"], shapes["weight2"], shapes["bias"]) == ((12, 8), (12, 4), (12,))


@pytest.mark.parametrize("name", ["linear_bias", "at", "tokens_at"])
def test_extract_then_scatter_restores_a_bare_matmul_weight_exactly(name):
    test_extract_then_scatter_restores_the_state_exactly(MATMUL[name][0])


@pytest.mark.parametrize(("net", "reason"), [
    (_net("twice_matmul", TwiceMatmul), "the forward breaks once layer 'conv' loses output channels "
                                        "(RuntimeError: mat1 and mat2 shapes cannot be multiplied "
                                        "(1x8 and 16x16))"),
    (_net("weight_first", WeightFirstMatmul), "no layer's output channels can be pruned"),
    # read whole elsewhere too: left to torch-pruning (not sliced by the map's pruner), so the forward breaks
    (_net("penalized_matmul", PenalizedMatmul), "the forward breaks once layer 'conv' loses output channels "
                                                "(RuntimeError: mat1 and mat2 shapes cannot be multiplied "
                                                "(1x8 and 16x24))"),
], ids=["twice", "weight_first", "penalized"])
def test_a_bare_weight_not_used_once_as_a_linear_map_is_refused_in_one_line(net, reason):
    """Used twice, given first, or read whole elsewhere too: never sliced apart, the Check refuses it."""
    with pytest.raises(ScenarioError) as err:
        check_variants(net, network_layout(net), (0.0, 0.5))
    assert "\n" not in str(err.value) and reason in str(err.value)


def test_a_weight_two_einsums_share_is_left_to_the_check_which_refuses_it_naming_the_layer():
    """Its input and output channels are one group (a map applied to its own outputs): never sliced apart."""
    net = _net("shared_mixer", SharedMixer)
    with pytest.raises(ScenarioError) as err:
        check_variants(net, network_layout(net), (0.0, 0.5))
    assert "\n" not in str(err.value)
    assert "layer 'conv' loses output channels" in str(err.value)
    assert "raised in layer 'mix' (Mixer)" in str(err.value)
