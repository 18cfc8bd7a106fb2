"""Networks users bring, through the job a user runs: each trains with bytes as modelled, or is refused.

For every network of the zoo (``tests/user_nets.py``), one short DepL job
(``python -m depl_fl.main model=custom model.factory=tests.user_nets:NAME``,
4 clients in process, 3 exploration rounds then the plan) on the bundled
8x8 digits. Recorded per network: the exit status (0: target reached or plan
run, 3: no dependable plan, both after training rounds; 2: refused before
the first round), the refusal's one line, whether stderr holds a traceback,
the variants' sizes, and per round the measured bytes (``bytes_down``,
``bytes_up``) against the modelled ones. Writes
``benchmarks/results/byom_zoo/zoo.{md,json}``.

Usage: ``python benchmarks/byom_zoo_bench.py [--networks NAME ...]``

``--module tests.user_nets_more`` runs the second zoo (:data:`MORE_NETWORKS`,
each with its own overrides, e.g. a user loss) into ``zoo_more.{md,json}``;
``--set KEY=VALUE ...`` adds overrides to every job (another backend, other
compressions) and ``--tag NAME`` writes ``NAME.{md,json}`` instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "byom_zoo"
NETWORKS = ["convnext_net", "mobilenet_v3_tiny", "efficientnet_tiny", "cls_token_vit", "separate_qkv_vit",
            "mixer_net", "mixer_net_square", "unet_tiny", "spatial_attention_net", "token_linear_net",
            "loop_tied_net", "channel_buffer_net", "conv_lstm_net", "row_lstm", "detach_net",
            "detached_layer_net", "no_grad_layer_net", "inplace_net", "shaped_scale_net", "gated_net",
            "split_net",
            "tracked_instance_norm_net", "counting_net", "non_persistent_buffer_net", "transpose_tied_net",
            "parameter_matmul_net", "shared_weight_net", "aux_head_net", "quickstart_net_8",
            "channel_shuffle_net", "hard_coded_stack_net", "spatial_layer_norm_net"]
#: The second zoo (``tests/user_nets_more.py``): network -> its own overrides. The factory signatures
#: and refusals come last.
MORE_NETWORKS: dict[str, list[str]] = {
    **{name: [] for name in (
        "vgg_net", "densenet_tiny", "squeezenet_tiny", "inception_net", "activation_mix_net", "padding_net",
        "instance_norm_net", "fpn_net", "pixel_conv1d_net", "module_dict_net", "frozen_stem_net",
        "frozen_middle_net", "bottleneck_net", "batch_norm_variants_net", "depth_multiplier_net",
        "pixel_shuffle_net", "actnorm_net", "sequential_cnn")},
    "log_softmax_net": ["model.loss=tests.user_nets_more:nll_loss"],
    "weight_norm_net": [], "spectral_norm_net": [], "legacy_weight_norm_net": [],
    "weight_norm_net@full": ["model.compressions=[0]"],
    "partial_weight_norm_net": [], "partial_spectral_norm_net": [],
    **{name: [] for name in ("classes_only", "keyword_factory", "with_extra_defaults", "other_names",
                             "VGGNet", "positional_only", "needs_width", "positional_other_name",
                             "raising_factory", "not_a_module", "module_instance",
                             "NOT_CALLABLE", "missing_attr")},
}
# without_tracking=thorough: the exploration the committed figures were measured with (every
# client; the default without tracking explores on the cheapest clusters)
COMMON = ["num_clients=4", "simulation=inprocess", "profile.explore.rounds=3", "profile.explore.max_rounds=3",
          "profile.explore.switch_rounds=[2]", "target.loss=1.0", "target.prob=0.8", "target.max_rounds=12",
          "tracking.enabled=false", "profile.explore.without_tracking=thorough", "output.plot=false",
          "model=custom", "model.compressions=[0.0,0.5,0.75]"]


def with_overrides(common: list[str], extra: tuple[str, ...]) -> list[str]:
    """``common`` with each key that ``extra`` sets replaced by ``extra``'s value (Hydra takes a key once)."""
    keys = {o.partition("=")[0] for o in extra}
    return [o for o in common if o.partition("=")[0] not in keys] + list(extra)


def run_job(name: str, work: Path, module: str = "tests.user_nets", extra: tuple[str, ...] = ()) -> dict:
    """One job; its exit status, its ``depl-fl:`` lines, a traceback flag, its rounds and wall time.

    ``name`` may carry a ``@label`` suffix (the same network under other overrides).
    """
    # the checkout first, then whatever the caller's path holds (packages carried beside an image's torch)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "depl_fl.main", *with_overrides(COMMON, extra),
                           f"model.factory={module}:{name.partition('@')[0]}", f"hydra.run.dir={work}",
                           f"profile.cache_dir={work / 'cache'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    results = work / "results.json"
    doc = json.loads(results.read_text()) if results.exists() else {}
    return {"rc": proc.returncode, "traceback": "Traceback" in proc.stderr,
            "wall_s": time.monotonic() - start,
            "lines": [line for line in proc.stderr.splitlines() if line.startswith("depl-fl:")],
            "rounds": doc.get("rounds", []), "models": (doc.get("scenario") or {}).get("models", [])}


def summarise(name: str, job: dict) -> dict:
    """Outcome, sizes and the largest bytes deviation of a job's rounds."""
    rounds = [r for r in job["rounds"] if "bytes_down" in r]
    dev = max((abs(r[f"bytes_{d}"] - r[f"modelled_bytes_{d}"]) / r[f"modelled_bytes_{d}"]
               for r in rounds for d in ("down", "up")), default=None)
    outcomes = {0: "trains", 3: "trains (no dependable plan)", 2: "refused"}
    outcome = outcomes.get(job["rc"], f"exit {job['rc']}")
    return {"network": name, "rc": job["rc"], "outcome": outcome, "traceback": job["traceback"],
            "message": job["lines"][-1] if job["rc"] == 2 and job["lines"] else "",
            "sizes": {m["id"]: int(m["size_bytes"]) for m in job["models"]}, "rounds": len(rounds),
            "compressed_rounds": sum(r["model"] != "full" for r in rounds),
            "last_loss": rounds[-1]["loss"] if rounds else None, "max_deviation": dev,
            "all_rounds_exact": bool(rounds) and all(r[f"bytes_{d}"] == r[f"modelled_bytes_{d}"]
                                                     for r in rounds for d in ("down", "up")),
            "wall_s": round(job.get("wall_s", 0.0), 1)}


def table(rows: list[dict]) -> list[str]:
    lines = ["| network | outcome | variants' bytes | rounds (with a compressed variant) | last loss "
             "| largest bytes deviation | refusal |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        sizes = " / ".join(f"{m} {b:,}" for m, b in r["sizes"].items())
        dev = "" if r["max_deviation"] is None else f"{100 * r['max_deviation']:.2f}%"
        loss = "" if r["last_loss"] is None else f"{r['last_loss']:.3f}"
        outcome = r["outcome"] + (" **traceback**" if r["traceback"] else "")
        lines.append(f"| `{r['network']}` | {outcome} | {sizes} | {r['rounds']} ({r['compressed_rounds']}) "
                     f"| {loss} | {dev} | {r['message'].replace('|', '/')} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", default="tests.user_nets", help="the module holding the factories")
    parser.add_argument("--networks", nargs="+", help="factory names (NAME or NAME@label)")
    parser.add_argument("--set", nargs="+", default=[], dest="overrides", help="overrides for every job")
    parser.add_argument("--tag", help="output name (default zoo, or zoo_more for tests.user_nets_more)")
    args = parser.parse_args()
    more = args.module == "tests.user_nets_more"
    own = MORE_NETWORKS if more else {}
    networks = args.networks or (list(MORE_NETWORKS) if more else NETWORKS)
    tag = args.tag or ("zoo_more" if more else "zoo")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(networks):
            extra = (*own.get(name, []), *args.overrides)
            rows.append(summarise(name, run_job(name, Path(tmp) / f"job{i}", args.module, extra)))
            rows[-1]["overrides"] = list(extra)
            print(rows[-1]["network"], rows[-1]["outcome"], rows[-1]["max_deviation"], rows[-1]["wall_s"],
                  flush=True)
    command = "python benchmarks/byom_zoo_bench.py" + ("" if args.module == "tests.user_nets" else
                                                       f" --module {args.module}")
    if args.networks:
        command += " --networks " + " ".join(args.networks)
    if args.overrides:
        command += " --set " + " ".join(f"'{o}'" for o in args.overrides)
    if args.tag:
        command += f" --tag {args.tag}"
    compressions = next(o for o in reversed([*COMMON, *args.overrides])
                        if o.startswith("model.compressions="))
    lines = ["# Networks users bring: trained with bytes as modelled, or refused in one line", "",
             "One short DepL job per network (`python -m depl_fl.main model=custom "
             f"model.factory={args.module}:NAME`, "
             + " ".join(f"`{o}`" for o in with_overrides(COMMON[:-2], tuple(args.overrides))
                        if not o.startswith("model.compr"))
             + f", `{compressions}`) on the bundled 8x8 digits. Bytes: every round's measured "
             "`bytes_down`/`bytes_up` against the modelled `modelled_bytes_down`/`_up` (the variant's "
             "`size_bytes` per planned client). Exit 3 (no dependable plan) comes after the "
             "exploration rounds, which train every variant.", "", *table(rows), ""]
    if any(r["overrides"] for r in rows):
        lines += ["Per-network overrides: " + "; ".join(f"`{r['network']}`: " + " ".join(
            f"`{o}`" for o in r["overrides"]) for r in rows if r["overrides"]), ""]
    lines += [f"Command: `{command}`"]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{tag}.json").write_text(json.dumps(rows, indent=1) + "\n")
    (OUT / f"{tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
