"""torchvision's networks through DepL's variant path: derived, sliced, checked, and run on a device.

For every network of :mod:`benchmarks.torchvision_nets` (untrained, 10 classes, 3 input
channels), in a fresh process of its own with torch on one thread (as a Flower process
derives them): the job's one-time derivation of the variants 0 / 0.25 / 0.5 / 0.75
(:func:`depl_fl.task.variants.checked_variant_costs`: torch-pruning's graph, the layout,
the sub-networks and the forward check against the silenced full network) and its wall
time; each variant's parameters, bytes on the wire and training FLOPs against the full
network's; that extracting a variant from a seeded full state and scattering it back
restores the full state exactly; the groups kept whole. With ``--device cuda``, the 0.5
variant's sub-network loaded with the sliced state computes on the GPU what it computes on
the CPU (largest absolute difference of the logits) and takes one SGD step there.
A network DepL refuses is recorded with its one-line refusal. Writes
``OUT/torchvision_zoo.{md,json}``.

torchvision does not import beside this project's CPU torch; run where it does (a GPU
machine's image), with this checkout on ``PYTHONPATH``.

Usage: ``python benchmarks/torchvision_zoo.py --out DIR [--device cuda] [--workers 8]
[--networks resnet18 ...]``
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing as mp
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: network -> input side (32 unless a network's pooling needs more)
NETWORKS = {"resnet18": 32, "resnet50": 32, "resnext50_32x4d": 32, "mobilenet_v2": 32,
            "mobilenet_v3_small": 32,
            "efficientnet_b0": 32, "efficientnet_v2_s": 32, "shufflenet_v2_x0_5": 32, "squeezenet1_1": 32,
            "densenet121": 32, "regnet_x_400mf": 32, "regnet_y_400mf": 32, "mnasnet0_5": 32,
            "convnext_tiny": 32, "googlenet": 32, "vgg11_bn": 32, "alexnet": 64, "swin_t": 32,
            "vit_small_32": 32}
COMPRESSIONS = (0.0, 0.25, 0.5, 0.75)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def measure(name: str, side: int, device: str, module: str = "benchmarks.torchvision_nets") -> dict:
    """One network's derivation, slicing round trip and device check (run in a fresh process)."""
    sys.path[:0] = [str(ROOT)]
    import numpy as np
    import torch

    torch.set_num_threads(1)
    import importlib

    factories = importlib.import_module(module)
    from depl_fl.errors import ScenarioError
    from depl_fl.task.geometry import with_compressions
    from depl_fl.task.models import set_state
    from depl_fl.task.slicing import extract, scatter
    from depl_fl.task.subnets import UserNetwork, build_skeleton, full_network, kept_whole, network_layout
    from depl_fl.task.variants import checked_variant_costs

    row: dict = {"network": name, "input": [3, side, side]}
    net = UserNetwork(functools.partial(getattr(factories, name), num_classes=10, in_channels=3),
                      (3, side, side), name=name)
    start = time.perf_counter()
    try:
        costs = checked_variant_costs(net, COMPRESSIONS)
    except ScenarioError as exc:
        row.update(outcome="refused", line=_first_line(exc), derive_s=time.perf_counter() - start)
        return row
    except Exception as exc:  # a defect: keep its traceback
        row.update(outcome="error", line=_first_line(exc), traceback=traceback.format_exc()[-3000:])
        return row
    row["derive_s"] = time.perf_counter() - start
    cut = with_compressions(net, COMPRESSIONS)
    layout = network_layout(cut)
    row["groups"] = len(layout.groups)
    row["kept_whole"] = [k.layer for k in kept_whole(cut)]
    full = {k: v.detach().cpu().numpy() for k, v in full_network(cut, seed=1).state_dict().items()}
    full_cost = costs[0.0]
    row["variants"] = {}
    exact = True
    for c in COMPRESSIONS:
        structure = layout.structure(full, c)
        sub = extract(full, structure)
        back = scatter(full, sub, structure)
        exact &= all(np.array_equal(back[k], full[k]) for k in full)
        cost = costs[c]
        flops = cost.train_flops_per_sample / full_cost.train_flops_per_sample
        row["variants"][str(c)] = {"params": cost.params, "bytes": cost.size_bytes, "flops_vs_full": flops}
    row["roundtrip_exact"] = bool(exact)
    if device != "cpu":
        structure = layout.structure(full, 0.5)
        sub = extract(full, structure)
        model = build_skeleton(cut, 0.5)
        set_state(model, sub)
        x = torch.randn(8, 3, side, side, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            on_cpu = model.eval()(x)
            on_device = model.to(device).eval()(x.to(device)).cpu()
        row["device_max_abs_diff"] = float((on_cpu - on_device).abs().max())
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        y = torch.randint(0, 10, (8,), generator=torch.Generator().manual_seed(1))
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        row["device_step_loss"] = float(loss.detach())
    row["outcome"] = "derived"
    return row


def _job(args: tuple[str, int, str, str]) -> dict:
    name, side, device, module = args
    try:
        return measure(name, side, device, module)
    except Exception as exc:
        return {"network": name, "outcome": "error", "line": _first_line(exc),
                "traceback": traceback.format_exc()[-3000:]}


def table(rows: list[dict]) -> str:
    lines = ["| network | input | outcome | derive s | groups (kept whole) | params full / 0.5 / 0.75 | "
             "bytes 0.5 / full | FLOPs 0.5 / full | extract-scatter exact | GPU vs CPU (0.5) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["outcome"] != "derived":
            lines.append(f"| {r['network']} | {'x'.join(map(str, r.get('input', [])))} | {r['outcome']}: "
                         f"{r.get('line', '')} | | | | | | | |")
            continue
        v = r["variants"]
        diff = r.get("device_max_abs_diff")
        gpu = "" if diff is None else f"{diff:.1e}, step loss {r['device_step_loss']:.3f}"
        lines.append(
            f"| {r['network']} | {'x'.join(map(str, r['input']))} | derived | {r['derive_s']:.1f} | "
            f"{r['groups']} ({len(r['kept_whole'])}) | {v['0.0']['params']:,} / {v['0.5']['params']:,} / "
            f"{v['0.75']['params']:,} | {v['0.5']['bytes'] / v['0.0']['bytes']:.3f} | "
            f"{v['0.5']['flops_vs_full']:.3f} | {'yes' if r['roundtrip_exact'] else 'NO'} | "
            f"{gpu} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for all networks together")
    parser.add_argument("--networks", nargs="*", default=list(NETWORKS))
    parser.add_argument("--module", default="benchmarks.torchvision_nets",
                        help="where the factories live (another zoo's module runs its networks at 32x32)")
    args = parser.parse_args()
    import torch

    jobs = [(n, NETWORKS.get(n, 32), args.device, args.module) for n in args.networks]
    rows: dict[str, dict] = {}
    pool = mp.get_context("spawn").Pool(args.workers, maxtasksperchild=1)
    pending = {job[0]: pool.apply_async(_job, (job,)) for job in jobs}
    deadline = time.monotonic() + args.timeout
    for name, result in pending.items():
        try:
            rows[name] = result.get(timeout=max(0.0, deadline - time.monotonic()))
        except mp.TimeoutError:
            side = NETWORKS.get(name, 32)
            rows[name] = {"network": name, "input": [3, side, side], "outcome": "unfinished",
                          "line": f"not derived within the run's {args.timeout:.0f} s"}
    pool.terminate()
    rows = [rows[job[0]] for job in jobs]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"python": platform.python_version(), "torch": torch.__version__, "device": args.device,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "compressions": COMPRESSIONS, "workers": args.workers}
    try:
        import torchvision
        meta["torchvision"] = torchvision.__version__
    except Exception:
        meta["torchvision"] = None
    (out / "torchvision_zoo.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    text = table(rows)
    (out / "torchvision_zoo.md").write_text(f"{json.dumps(meta)}\n\n{text}\n")
    print(text)
    for r in rows:
        if r["outcome"] == "error":
            print(f"--- {r['network']}\n{r.get('traceback', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
