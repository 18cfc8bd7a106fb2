"""A minimal numpy Flower app: one linear least-squares step per round on every node."""
