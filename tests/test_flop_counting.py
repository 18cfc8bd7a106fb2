"""FLOP counting: torch's counts, without loading torch's compiler on the server."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from depl_fl.task import variants
from depl_fl.task.variants import sample_macs

ROOT = Path(__file__).resolve().parent.parent


class _HandWrittenAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (layer(x).view(1, 5, 2, 8).transpose(1, 2) for layer in self.qkv)
        return nn.functional.scaled_dot_product_attention(q, k, v)


class _FusedAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x)[0]


NETWORKS = {
    "cnn": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 30 * 30, 10)),
            (3, 32, 32), 3 * 9 * 8 * 30 * 30 + 8 * 30 * 30 * 10),
    "encoder_layer": (lambda: nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval(), (5, 16), None),
    "multihead_attention": (lambda: _FusedAttention().eval(), (5, 16), None),
    "sdpa": (_HandWrittenAttention, (5, 16), 3 * 5 * 16 * 16 + 2 * 2 * 5 * 5 * 8),
}


def _torch_macs(model: nn.Module, shape: tuple[int, ...]) -> int:
    with torch.enable_grad(), FlopCounterMode(display=False, custom_mapping=variants._ATTENTION_KERNELS) as c:
        model(torch.zeros(1, *shape))
    return int(c.get_total_flops()) // 2


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_counts_equal_torchs_flop_counter(name):
    build, shape, expected = NETWORKS[name]
    torch.manual_seed(0)
    model = build()
    got = sample_macs(model, shape)
    assert got == _torch_macs(model, shape)
    assert got > 0
    if expected is not None:
        assert got == expected


_SERVER_COSTS = """
import json, sys
from depl_fl.orchestration.scenario_builder import model_docs
from depl_fl.runs.runconfig import compose_config
from depl_fl.task.partitions import geometry
cfg = compose_config(sys.argv[1:])
geo = geometry(cfg)
docs = model_docs(cfg, geo.num_classes, geo.in_channels, geo.image_size)
print(json.dumps({"variants": len(docs), "flops": [d["flops_per_sample"] for d in docs],
                  "loaded": [m for m in ("torch._dynamo", "sympy") if m in sys.modules]}))
"""


@pytest.mark.parametrize("overrides", [[], ["dataset=synthetic", "model=synthetic_mlp"]],
                         ids=["default", "synthetic_mlp"])
def test_the_servers_variant_costs_do_not_load_torchs_compiler(overrides):
    # torch's compiler and sympy cost the server about 70 MB of peak memory it never uses
    done = subprocess.run([sys.executable, "-c", _SERVER_COSTS, *overrides], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["variants"] >= 2 and all(f > 0 for f in row["flops"])
    assert row["loaded"] == []
