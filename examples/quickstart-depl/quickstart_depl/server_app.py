"""ServerApp: DepL plans, compresses and tracks the app's own network."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from depl_fl.console import log_to
from depl_fl.task.subnets import UserNetwork
from quickstart_depl.task import Net, load_data, test
from strategies.user_app import depl_strategy, evaluate_fn, initial_arrays

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    log_to(sys.stdout)  # DepL's own lines: exploration, plan, one per round ([depl] ...)
    cfg = context.run_config
    network = UserNetwork(Net, (1, 8, 8), "Net")
    _, testloader = load_data(0, 1)
    overrides = [f"train.local_epochs={int(cfg['local-epochs'])}", *str(cfg["depl-overrides"]).split()]
    if cfg["cache-dir"]:
        overrides.append(f"profile.cache_dir={cfg['cache-dir']}")
    strategy = depl_strategy(network, num_clients=int(cfg["num-clients"]), compressions=(0.0, 0.5),
                             overrides=overrides)
    result = strategy.start(grid, initial_arrays(network),
                            evaluate_fn=evaluate_fn(strategy, test, testloader))
    records = strategy.controller.records
    if not records:
        print("no training round: the exploration rounds met the target")
    for rec in records:
        print(f"round {rec['round']}: {rec['model']}, loss {rec['loss']:.3f}, "
              f"bytes down {rec['bytes_down']} (modelled {rec['modelled_bytes_down']})")
    if cfg["out-file"]:
        Path(str(cfg["out-file"])).write_text(json.dumps(
            {"rounds": records, "profile": strategy.profiler.records,
             "clients": {cid: {"cluster": p["cluster"], "cluster-source": p.get("cluster-source", "node")}
                         for cid, p in strategy.properties.items()},
             "final_loss": records[-1]["loss"] if records else None}, default=str))
    del result
