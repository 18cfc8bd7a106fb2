"""DepL for Flower: dependable federated training of compressed models.

The core (scenario/plan model, Monte Carlo semantics, planner, estimation) is
pure Python + numpy/scipy/pydantic and imports neither flwr nor torch; the
torch parts (models, pruning, data) and the Flower glue (``strategies``,
``clients``) are imported only where they are used.
"""

__version__ = "0.1.0"
