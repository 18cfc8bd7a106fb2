"""ServerApp: FedAvg of a 10-weight linear model, timing every round (send, receive, average)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

app = ServerApp()


def _wait_for_nodes(grid: Grid, count: int, timeout_s: float = 120.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while len(nodes := sorted(grid.get_node_ids())) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(nodes)} of {count} nodes connected")
        time.sleep(0.2)
    return nodes


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run ``num-rounds`` rounds on ``num-nodes`` nodes; write the round wall times to ``out-file``."""
    cfg = context.run_config
    nodes = _wait_for_nodes(grid, int(cfg["num-nodes"]))
    w = np.zeros(10)
    times = []
    for rnd in range(1, int(cfg["num-rounds"]) + 1):
        t0 = time.perf_counter()
        content = RecordDict({"arrays": ArrayRecord({"w": Array(w)}),
                              "config": ConfigRecord({"server-round": rnd})})
        messages = [Message(content, dst_node_id=n, message_type=MessageType.TRAIN, group_id=str(rnd))
                    for n in nodes]
        replies = [r for r in grid.send_and_receive(messages, timeout=600) if not r.has_error()]
        weights = np.array([float(r.content["metrics"]["num-examples"]) for r in replies])
        stacked = np.stack([r.content["arrays"]["w"].numpy() for r in replies])
        w = (weights[:, None] * stacked).sum(axis=0) / weights.sum()
        times.append(time.perf_counter() - t0)
        print(f"[minimal] round {rnd}: {len(replies)}/{len(nodes)} replies, {times[-1]:.2f} s", flush=True)
    if str(cfg.get("out-file", "")):
        Path(str(cfg["out-file"])).write_text(json.dumps({"round_wall_s": times}) + "\n")
