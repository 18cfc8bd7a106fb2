"""Flower server side of DepL: DepLStrategy, the ServerApp and their pure helpers."""
