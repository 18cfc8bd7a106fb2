"""Files written atomically (results.json, checkpoints, caches) get the permissions the umask gives."""

from __future__ import annotations

import os
import stat

import pytest

from depl_fl.diskcache import atomic_write, current_umask


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_atomic_write_follows_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        assert current_umask() == mask
        path = tmp_path / "results.json"
        atomic_write(path, lambda fh: fh.write("{}"), binary=False, durable=False)
    finally:
        os.umask(old)
    assert path.read_text() == "{}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
