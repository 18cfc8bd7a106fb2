"""One torch thread while a test module runs (import ``one_thread`` into the module to use it)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Run each test of the importing module with one torch thread, then restore the count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
