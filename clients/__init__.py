"""Flower client side of DepL: the ClientApp and its pure local-update step."""
