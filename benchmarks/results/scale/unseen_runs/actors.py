"""List a Ray cluster's nodes and the ClientApp actors it has seen (its GCS actor table)."""

import json
import sys
from collections import Counter

import ray
from ray._private.state import actors

ray.init(address=sys.argv[1], logging_level="ERROR")
nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
clients = [a for a in actors().values() if a["ActorClassName"] == "ClientAppActor"]
print(json.dumps({"alive_nodes": len(nodes), "cluster_cpus": ray.cluster_resources().get("CPU"),
                  "free_cpus": ray.available_resources().get("CPU"),
                  "client_actors_per_node": dict(Counter(a["Address"]["NodeID"][:8] for a in clients)),
                  "actor_states": dict(Counter(a["State"] for a in clients)),
                  "job_ids": sorted({a["JobID"] for a in clients})}))
