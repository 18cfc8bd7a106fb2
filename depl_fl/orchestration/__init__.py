"""Run orchestration without Flower: the run controller, membership, profiles, checkpoints, faults."""
