"""The scenario/plan contract: file model, validation and the cost and loss semantics (numpy only)."""
