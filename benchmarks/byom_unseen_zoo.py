"""Networks the first two zoos lack, run as a user runs them: trained with bytes as modelled, or refused.

One short DepL job per network of ``tests/user_nets_extra.py``
(``python -m depl_fl.main model=custom model.factory=tests.user_nets_extra:NAME``,
4 clients in process, 3 exploration rounds; the settings of
``benchmarks/byom_zoo_bench.py``) on the bundled 8x8 digits. Recorded per
network: what it exercises, the exit status, the refusal's one line, the
variants' sizes and every round's measured bytes against the modelled ones.
Writes ``benchmarks/results/byom_zoo/unseen_networks.{md,json}``.

Usage: ``python benchmarks/byom_unseen_zoo.py [--networks NAME ...]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from byom_zoo_bench import COMMON, OUT, run_job, summarise

MODULE = "tests.user_nets_extra"
#: Network -> what it exercises.
NETWORKS = {
    "dict_output_net": "forward returns `{\"logits\": ..., \"features\": ...}`",
    "hf_output_net": "forward returns a Hugging Face-style dataclass with `.logits` (GELU MLP)",
    "tuple_always_net": "forward returns `(logits, F.normalize(proj(f)))` in both modes",
    "googlenet_aux_net": "GoogLeNet aux classifier (pool, 1x1 conv, FC, dropout) as a namedtuple in training",
    "domain_adversarial_net": "DANN: a domain head behind a custom `torch.autograd.Function`, training only",
    "hard_coded_aux_net": "a training-only aux head reading `x.view(-1, 32 * 4 * 4)`",
    "encoder_decoder_net": "`nn.Upsample`, `ConvTranspose2d` over a skip concat, SiLU, Hardswish head",
    "temperature_scale_net": "a learnable per-channel scale `[C]` indexed to broadcast, a scalar temperature",
    "concat_pool_net": "`F.adaptive_max_pool2d` beside `x.mean((2, 3))`, BatchNorm1d, head `bias=False`",
    "normalized_input_net": "input mean/std and a per-channel gain as float buffers, bias-free head",
    "checkpointed_net": "`torch.utils.checkpoint` around the middle block in training",
    "layer_norm_mlp": "linear layers only: LayerNorm, pre-norm residual GELU MLP",
    "ordered_dict_net": "`nn.Sequential(OrderedDict(...))`, AdaptiveAvgPool2d, Flatten, head `bias=False`",
    "dilated_pad_net": "ReflectionPad2d/ZeroPad2d, dilated convs, `nn.PReLU(num_parameters=C)`, `torch.amax`",
    "regularized_net": "Mish, LocalResponseNorm, Dropout2d, SELU + AlphaDropout",
    "unflatten_net": "a linear stem made maps by `nn.Unflatten(1, (16, 4, 4))`",
    "row_conv1d_net": "`nn.Conv1d` over the image rows as a sequence, `amax` over the length",
    "gray_to_rgb_net": "ignores `in_channels`, repeats a gray input to 3 channels",
    "shared_block_net": "one conv-BN-ReLU block applied twice (shared weights)",
    "unfold_net": "`F.unfold` patches, a linear per patch, reshaped to a map",
    "param_dict_scale_net": "per-channel scales in `nn.ParameterDict`, shifts in `nn.ParameterList`",
    "upsampled_input_net": "`F.interpolate` of the input to 16x16, circular padding, flatten head",
    "einsum_net": "a 1x1 conv as `torch.einsum(\"bchw,oc->bohw\")` on a bare `nn.Parameter`",
    "bilinear_net": "two branches fused by `nn.Bilinear`",
    "bilstm_net": "conv stem, rows through a 2-layer bidirectional LSTM",
    "rgb_only_net": "ignores `in_channels` (a 3-channel stem on 1-channel digits)",
}


def table(rows: list[dict], exercises: dict[str, str] | None = None) -> list[str]:
    """The markdown table: one row per network (what each exercises: ``exercises``, else :data:`NETWORKS`)."""
    exercises = NETWORKS if exercises is None else exercises
    lines = ["| network | exercises | outcome | variants' bytes | rounds (compressed) | bytes measured vs "
             "modelled | refusal |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        sizes = " / ".join(f"{m} {b:,}" for m, b in r["sizes"].items())
        if r["max_deviation"] is None:
            bytes_ = ""
        else:
            bytes_ = ("equal in every round" if r["all_rounds_exact"] else "") + \
                f" (largest deviation {100 * r['max_deviation']:.2f}%)"
        outcome = r["outcome"] + (" **traceback**" if r["traceback"] else "")
        lines.append(f"| `{r['network']}` | {exercises.get(r['network'], '')} | {outcome} | {sizes} "
                     f"| {r['rounds']} ({r['compressed_rounds']}) | {bytes_.strip()} "
                     f"| {r['message'].replace('|', '/')} |")
    return lines


#: What trying these networks changed in DepL (the table is measured after it).
FINDINGS = """
## What these networks found, and what changed

Before this change (the same jobs on the commit before it, `python benchmarks/byom_zoo_bench.py
--module tests.user_nets_extra --networks ... --tag before` from a checkout of that commit with
`tests/user_nets_extra.py` copied in), ten networks were refused:

| network | refusal before |
|---|---|
| `dict_output_net` | forward must return one tensor of logits with a row per sample (batch 1) in evaluation mode, got dict |
| `hf_output_net` | ... in evaluation mode, got ClassifierOutput |
| `tuple_always_net` | ... in evaluation mode, got tuple |
| `googlenet_aux_net` | ... (batch 2) in training mode, got GoogLeNetOutputs |
| `domain_adversarial_net`, `hard_coded_aux_net` | ... (batch 2) in training mode, got tuple |
| `einsum_net` | the forward breaks once layer 'conv1' loses output channels (RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x24 and 16x10)) |
| `bilinear_net` | the forward breaks once layer 'conv' loses output channels (RuntimeError: bilinear(): input1 size does not match weight size: got 10 but expected 16) |
| `bilstm_net` | the forward breaks once layer 'conv' loses output channels (RuntimeError: input.size(-1) must be equal to input_size. Expected 44, got 32) |
| `rgb_only_net` | its forward fails on an input of shape (1, 8, 8) in evaluation mode (... expected input[1, 1, 8, 8] to have 3 channels, but got 1 channels instead) |

The first six can be pruned structurally; only their output was not one tensor. Fixed, in general:

1. **The logits in what a forward returns** (`depl_fl/task/network_outputs.py`): a tensor, the
   first item of a tuple or list (a namedtuple too), a mapping's `"logits"`, or an object's
   `.logits` (a dataclass, a Hugging Face `ModelOutput`). A forward hook on the network DepL
   builds puts them in place of the output, so training, evaluation, the loss probe, FLOP
   counting and the Check all read one tensor; the state's entry names are unchanged. An
   auxiliary output gets no gradient from DepL's loss: its weights travel as they are.
2. **Tracing sees every returned tensor**, in evaluation mode and, when training mode returns
   more (GoogLeNet's aux logits), in training mode too; every layer whose output is returned
   keeps its width (the aux logits keep 10 classes). Accepting the outputs without this, the
   GoogLeNet and DANN jobs ran but every compressed client failed (`RuntimeError: Given
   groups=1, weight of size [16, 32, 1, 1], expected input[32, 16, 2, 2] to have 32 channels`:
   the aux conv had not lost the channels of the conv it reads), and the measured `bytes_up`
   fell 24% short of the modelled ones.
3. **The Check runs every variant in training mode too** (buffers, and parameters of the
   user's own modules, restored after): `hard_coded_aux_net`'s training-only head reads
   `x.view(-1, 32 * 4 * 4)`, so `conv2` is kept whole instead of failing every client.
4. **A pruned forward that breaks inside a layer names it**: `...; raised in layer 'lstm'
   (LSTM)`, `raised in layer 'fuse' (Bilinear)`, `raised in layer 'fc' (Linear)` (the einsum's
   reader). These three stayed refused then (one line, exit 2): torch-pruning 1.6.1 maps a
   bidirectional LSTM's input through the concatenation of its two directions and slices 20 of
   64 input columns where 32 go; it has no pruner for `nn.Bilinear`; it does not see a weight
   used through `torch.einsum`. Each is the only prunable group of its network. They train
   since the change below.
5. **A Flower app's own `train` and `test`** (`depl_fl/task/user_update.py`) get the sub-network
   without the logits hook: a loop written for `net(x)["logits"]` or `(logits, aux)` runs as
   written.

Not changed: `rgb_only_net` (a 3-channel stem on 1-channel data) is the user's network and its
refusal says so. Kept whole and reported as such: `unflatten_net`'s linear stem (`nn.Unflatten`
views its outputs as 16 maps of 4x4), `unfold_net`'s patch linear (reshaped to a fixed 16-channel
map), `concat_pool_net`'s second conv. `tuple_always_net`'s embedding `F.normalize(proj(f))`
is not a layer's output as such, so `proj` is compressed and the variants' embedding is
narrower (the logits are exact; DepL never reads the embedding).

Cost: the training-mode probes add about one batch-of-two forward per trace and per checked
variant. ResNet-18 at 32x32, variants 0, 0.5, 0.75, derivation and Check in a fresh process,
one thread, five interleaved runs on the shared 2-core machine: median 1.01 s before, 1.21 s
after.

## Recurrent layers, `nn.Bilinear` and einsum weights: DepL's own pruners

`bilstm_net`, `bilinear_net` and `einsum_net` were refused as in item 4 until this change
(`depl_fl/task/extra_pruners.py`, wired into the graph DepL builds in `depl_fl/task/subnets.py`):

1. **Each such layer reads its inputs directly in torch-pruning's graph.** While the graph is
   built, every `nn.LSTM`, `nn.GRU`, `nn.RNN` and `nn.Bilinear` computes its output without
   gradients and hands it on joined to each input by one elementwise reduction, so torch-pruning
   links the layer to the tensors it reads instead of walking into the graph the layer builds
   inside (where a bidirectional LSTM's concatenation of its directions sent the conv's
   channels to the wrong input columns). The outputs are unchanged.
2. **DepL's pruners** (torch-pruning's `customized_pruners`, one per layer class the network
   uses) slice the weights that read the inputs: a recurrent layer's first-layer input weights,
   both directions, any depth, packed sequences, `proj_size`; its hidden size is a group of its
   own (kept whole when projected, given an initial state, or read through a packed sequence). A bilinear layer's weight along each input's own
   dimension, one pruning function per input: torch-pruning prunes every input of a layer with
   one function, which tied the two branches into one group (`bilinear_net` now compresses
   `conv` and `mlp` apart, `fuse.weight` 32x16x24 to 32x8x12 at p50). DepL's probe of the
   entries and dimensions a pruning function removes reads them as for any layer, so the
   layout, extract-then-scatter and the Check are unchanged.
3. **`torch.einsum` with one bare parameter that is a linear map** (parsed from the equation:
   two operands, an explicit output, no ellipsis; the weight sums one index with the other
   operand and makes one output index) is handled the same way: its weight is sliced along the
   summed index when the channels before it are dropped, and along the made index when a group
   reaches its output (`"bchw,oc->bohw"`, `"oc,bchw->bohw"`, `"btc,co->bto"`, a channels-last
   output permuted back, an einsum added to a conv's output, in `tests/test_extra_pruners.py`).
   `einsum_net`'s `mix` goes from 24x16 to 24x8 at p50. Never a silent mis-slice: a weight two
   einsum calls use (a map applied to its own outputs) is left as torch-pruning traces it,
   and the Check refuses it in one line naming the layer; any einsum spelled another way
   (`from torch import einsum`, three operands) is traced as before and the Check decides.
4. **Canary tests** (`tests/test_extra_pruners.py`) pin torch-pruning 1.6.1 as worked around:
   alone it still slices 20 (two layers) or 28 (one layer) of a bidirectional LSTM's input
   columns where 32 go (a one-direction LSTM: 32, right); it has no pruner for `nn.GRU`,
   `nn.RNN`, `nn.Bilinear`; it looks customized pruners up by the exact class; it prunes both
   inputs of a layer with one function; it ties an einsum's input channels to its reader.

Kept as before: `rgb_only_net` (the user's network does not fit the data).

Cost: ResNet-18's derivation (no such layer) as before; see `python
benchmarks/byom_derivation_bench.py --repeats 3` in `benchmarks/results/byom_zoo/extra_pruners.md`.
"""  # noqa: E501 (markdown table rows)


def render(rows: list[dict], command: str) -> str:
    """The whole markdown page: the settings, the table, what changed, the command."""
    lines = ["# Networks of kinds the first two zoos lack: trained with bytes as modelled, or refused", "",
             f"One short DepL job per network (`python -m depl_fl.main model=custom "
             f"model.factory={MODULE}:NAME`, " + " ".join(f"`{o}`" for o in COMMON if o != "model=custom")
             + ") on the bundled 8x8 digits. Exit 3 (no dependable plan) comes after the exploration "
             "rounds, which train every variant; exit 0 reached the target. Bytes: every round's "
             "measured `bytes_down`/`bytes_up` against `modelled_bytes_down`/`_up`.", "", *table(rows), "",
             FINDINGS.strip(), "", f"Command: `{command}` (`--from-json` renders this page again from "
             "`unseen_networks.json` without running the jobs)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", help="factory names of tests.user_nets_extra")
    parser.add_argument("--from-json", action="store_true", help="render the page from the saved JSON")
    args = parser.parse_args()
    command = "python benchmarks/byom_unseen_zoo.py" + (" --networks " + " ".join(args.networks)
                                                       if args.networks else "")
    if args.from_json:
        rows = json.loads((OUT / "unseen_networks.json").read_text())
    else:
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for i, name in enumerate(args.networks or list(NETWORKS)):
                rows.append(summarise(name, run_job(name, Path(tmp) / f"job{i}", MODULE)))
                print(rows[-1]["network"], rows[-1]["outcome"], rows[-1]["max_deviation"], flush=True)
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "unseen_networks.json").write_text(json.dumps(rows, indent=1) + "\n")
    page = render(rows, command)
    (OUT / "unseen_networks.md").write_text(page)
    print(page)


if __name__ == "__main__":
    main()
