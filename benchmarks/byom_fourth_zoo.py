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

#: What trying these networks found (the table is measured after any change).
FINDINGS = """
## What these networks found

(see the report of the change that added this page)
"""


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
                saved[name] = summarise(name, run_job(name, Path(tmp) / f"job{i}", MODULE))
                print(name, saved[name]["outcome"], saved[name]["max_deviation"], flush=True)
        rows = [saved[n] for n in NETWORKS if n in saved]
        OUT.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows, indent=1) + "\n")
    page = render(rows, command)
    (OUT / "fourth_zoo.md").write_text(page)
    print(page)


if __name__ == "__main__":
    main()
