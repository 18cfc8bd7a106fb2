"""A fourth zoo of user networks, run as a user runs them: trained with bytes as modelled, or refused.

One short DepL job per network of ``tests/user_nets_fourth.py``
(``python -m depl_fl.main model=custom model.factory=tests.user_nets_fourth:NAME``,
4 clients in process, 3 exploration rounds; the settings of
``benchmarks/byom_zoo_bench.py``) on the bundled 8x8 digits, recorded and
rendered as :mod:`byom_unseen_zoo` does. Writes
``benchmarks/results/byom_zoo/fourth_zoo.{md,json}``.

Usage: ``python benchmarks/byom_fourth_zoo.py [--networks NAME ...] [--from-json]``
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import byom_unseen_zoo
from byom_zoo_bench import COMMON, OUT, run_job, summarise

MODULE = "tests.user_nets_fourth"
#: Network -> what it exercises.
NETWORKS = {
    "pytorch_mnist_net": "PyTorch's MNIST example: `F.max_pool2d`, `F.dropout(training=self.training)`, "
                         "`F.log_softmax` with the default loss",
    "group_norm_resnet": "ResNet basic blocks with `nn.GroupNorm(2, C)`, an empty `nn.Sequential` shortcut",
    "preact_resnet": "pre-activation blocks, a shortcut present on some blocks only (`hasattr`)",
    "wide_resnet": "WideResNet blocks, dropout between the convs, biased convs before BatchNorm",
    "repvgg_net": "RepVGG: 3x3 conv-BN + 1x1 conv-BN + identity BN summed",
    "ghost_net": "GhostNet: primary conv, cheap depthwise conv, `cat(...)[:, :oup]` (odd `oup`)",
    "eca_net": "ECA attention: `nn.Conv1d(1, 1, k)` over the pooled channels as a sequence",
    "cbam_net": "CBAM: one MLP on avg and max pooling, a 7x7 conv on `[mean, max]` over channels",
    "selective_kernel_net": "selective kernels: `torch.stack` of two branches, a softmax over them",
    "functional_conv_net": "`F.conv2d`/`F.linear` on the module's own bare parameters",
    "functional_conv_net@full": "the same network trained whole (`model.compressions=[0]`)",
    "shufflenet_v2_net": "ShuffleNetV2 units: `x.chunk(2, dim=1)`, `nn.ChannelShuffle(2)`",
    "glu_net": "`F.glu(conv(x), dim=1)` and `nn.GLU` on a linear",
    "pixel_unshuffle_net": "`nn.PixelUnshuffle(2)` on the input and on a feature map",
    "conv3d_net": "`nn.Conv3d` and `BatchNorm3d` on `x.unsqueeze(1)`, depth folded into channels",
    "pixel_embedding_net": "`nn.Embedding` of quantised pixels plus a learned positional parameter",
    "unpool_net": "`nn.MaxPool2d(return_indices=True)` feeding `nn.MaxUnpool2d`",
    "scripted_block_net": "a `torch.jit.script`-ed block between eager layers",
    "scripted_net": "the whole network `torch.jit.script`-ed by its factory",
    "compiled_net": "the factory returns `torch.compile(net)` (an `OptimizedModule`)",
    "mask_pruned_net": "`torch.nn.utils.prune.l1_unstructured` on the stem (`weight_orig`, `weight_mask`)",
    "add_module_loop_net": "`nn.Sequential` built with `add_module` in a loop; tanh GELU, Hardswish, SiLU",
    "embedding_head_net": "`forward(x, return_features=False)`, a `Linear(bias=False)` + `BatchNorm1d` neck",
    "coord_conv_net": "CoordConv: coordinate maps from `torch.linspace` concatenated to the input",
    "inception_resnet_net": "Inception-ResNet-A: three branches concatenated, 1x1 conv, scaled residual",
}

#: A network's own overrides (``NAME@label``: the same network under them).
OVERRIDES = {"functional_conv_net@full": ("model.compressions=[0]",)}

#: What trying these networks found and changed (the table is measured after the change).
FINDINGS = """
## What these networks found, and what changed

Before this change (the same jobs on the commit before it, `python benchmarks/byom_fourth_zoo.py
--networks ...` from a checkout of that commit with `tests/user_nets_fourth.py` and this script
copied in), six networks did not run as they do now:

| network | before |
|---|---|
| `scripted_block_net` | exit 1 with a traceback (`TypeError: contains(): incompatible function arguments`, reading a `RecursiveScriptModule`'s buffers while tracing) |
| `scripted_net` | exit 1 with a traceback (`RuntimeError: register_forward_hook is not supported on ScriptModules`) |
| `compiled_net` | refused, wrongly: `no convolution or linear layer to prune` (no forward hook sees the layers a `torch.compile` wrapper runs), with a traceback from torch's compiler in stderr |
| `functional_conv_net` | refused even with `model.compressions=[0]` (`no convolution or linear layer to prune`): it could not be trained at all |
| `eca_net`, `glu_net` | refused without a reason: `no layer's output channels can be pruned, so every compressed variant would be the full network; use model.compressions=[0]` |

`mask_pruned_net` trained before too (the same sizes), its masked stem kept whole by the Check
with a misleading reason (`the forward breaks once layer 'conv1' loses output channels
(ValueError: state names differ from the model: missing ['conv1.weight'] ...)`, then a hint
about hard-coded sizes).

Fixed, in general:

1. **`torch.compile`** (`depl_fl/task/compiled_modules.py`): a wrapper (`OptimizedModule`), the
   network or any submodule, is replaced by the module it wraps when DepL builds the network;
   DepL traces, slices and trains the eager module (entries without `_orig_mod.`). Nothing is
   imported unless the user's code imported torch's compiler.
2. **TorchScript** (`torch.jit.script`/`trace`, the network or a submodule) is refused in one
   line naming the layer, exit 2: its layers run inside TorchScript, out of reach of the hooks
   DepL traces with and of slicing.
3. **`torch.nn.utils.prune`'s mask** (`weight_orig`, a `weight_mask` buffer, a forward
   pre-hook) is a reparametrized weight: its layer's channels are kept whole up front, and a
   network whose every group meets one is refused naming `torch.nn.utils.prune.remove(module,
   'weight')` as the remedy.
4. **A network left with no prunable group says why**: the first layer whose channels stay
   whole and what torch-pruning traced them to (a layer of another width after `F.glu`, a
   one-channel Conv1d or gate they are tied to, a split, a recurrent hidden size DepL keeps
   whole), and how many other layers are in that case.
5. **A network with no convolution or linear layer** (its weights bare parameters used through
   `F.conv2d`/`F.linear`) has no group to compress instead of failing the derivation: it trains
   whole with `model.compressions=[0]`, and compressed variants are refused saying why.

Refused, and why that is right or what is missing:

- `eca_net`: ECA's Conv1d runs along the channels, so dropping a channel makes its neighbours
  adjacent: no sub-network computes the network with that channel silenced. Refused with
  compressions; `model.compressions=[0]` trains it.
- `glu_net`: **a gap in DepL**, not the user's: `F.glu`/`nn.GLU` halve the channels and
  torch-pruning 1.6.1 maps the `2C` outputs onto the `C` inputs after them; slicing value `j`
  with gate `C + j` would be sound (a two-block group, as a bidirectional LSTM's) but is not
  done. Refused with compressions, naming the layers.
- `functional_conv_net`: convs on bare parameters through `F.conv2d` are not layers DepL can
  root a channel group at (a bare weight through `F.linear`, `matmul` or `einsum` is sliced
  only as the reader of a group): a gap. Refused with compressions in one line; trains whole
  with `model.compressions=[0]` (as do `eca_net` and `glu_net`).
- `scripted_block_net`, `scripted_net`: TorchScript, as above.

Kept whole (one warning line or silently), the rest compressed: `ghost_net`'s second ghost module
(`cat(...)[:, :31]` cuts its concatenation), `cbam_net`'s `conv2` (CBAM's one-channel spatial gate
is broadcast over it, and the gate reads its channel mean: a narrower mean is another function),
`shufflenet_v2_net`'s stem (split by `chunk`), `pixel_unshuffle_net`'s `conv2` (PixelUnshuffle
spreads each channel over four), `unpool_net`'s `enc` and `mid` (MaxUnpool2d's indices),
`mask_pruned_net`'s stem, `pixel_embedding_net`'s embedding width (`nn.Embedding` roots no group).

Cost: ResNet-18's derivation unchanged (`python benchmarks/byom_derivation_bench.py --repeats 3
--networks resnet18` on the shared 2-core machine at load 4.9, old vs new code interleaved: 12
groups and the same sizes; median CPU 1.31 s before, 1.36 s after; wall 4.09 s / 4.13 s; again on the
final commit at load 4.2: CPU 1.26 s / 1.33 s, wall 2.13 s / 1.49 s: within the machine's noise).

`eca_net`'s and `functional_conv_net`'s rows were measured again (`python
benchmarks/byom_fourth_zoo.py --networks eca_net functional_conv_net functional_conv_net@full`, the
other rows kept from the JSON) once their refusals changed (the one-channel gate case; no layer at
all) and the whole network trained.
"""  # noqa: E501 (markdown table rows)


def render(rows: list[dict], command: str) -> str:
    """The whole markdown page: the settings, the table, the findings, the command."""
    lines = ["# A fourth zoo of user networks: trained with bytes as modelled, or refused", "",
             f"One short DepL job per network (`python -m depl_fl.main model=custom "
             f"model.factory={MODULE}:NAME`, " + " ".join(f"`{o}`" for o in COMMON if o != "model=custom")
             + ") on the bundled 8x8 digits, seed as configured (`seed=0`). Exit 3 (no dependable plan) "
             "comes after the exploration rounds, which train every variant; exit 0 reached the target. "
             "Bytes: every round's measured `bytes_down`/`bytes_up` against `modelled_bytes_down`/`_up`.",
             "", *byom_unseen_zoo.table(rows, NETWORKS), "", FINDINGS.strip(), "",
             f"Command: `{command}` (`--from-json` renders this page again from `fourth_zoo.json` "
             "without running the jobs)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", help=f"factory names of {MODULE}")
    parser.add_argument("--from-json", action="store_true", help="render the page from the saved JSON")
    args = parser.parse_args()
    command = "python benchmarks/byom_fourth_zoo.py" + (" --networks " + " ".join(args.networks)
                                                       if args.networks else "")
    path = OUT / "fourth_zoo.json"
    if args.from_json:
        rows = json.loads(path.read_text())
    else:
        # rows of networks not run now are kept from the saved JSON (a rerun of a few replaces theirs)
        saved = {r["network"]: r for r in json.loads(path.read_text())} if path.exists() and args.networks \
            else {}
        with tempfile.TemporaryDirectory() as tmp:
            for i, name in enumerate(args.networks or list(NETWORKS)):
                job = run_job(name, Path(tmp) / f"job{i}", MODULE, OVERRIDES.get(name, ()))
                saved[name] = summarise(name, job)
                print(name, saved[name]["outcome"], saved[name]["max_deviation"], flush=True)
        rows = [saved[n] for n in NETWORKS if n in saved]
        OUT.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows, indent=1) + "\n")
    page = render(rows, command)
    (OUT / "fourth_zoo.md").write_text(page)
    print(page)


if __name__ == "__main__":
    main()
