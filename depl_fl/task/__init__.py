"""The learning task a client runs: models, structured pruning, data, local training (torch, no flwr)."""
