"""The kept Monte Carlo draws: the same values and generator states as drawing afresh."""

from __future__ import annotations

import numpy as np
import pytest

from depl_fl.contract import draws


@pytest.fixture(autouse=True)
def _empty_memo():
    draws.clear()
    yield
    draws.clear()


def _sequence(rng: np.random.Generator, fresh: bool) -> list[np.ndarray]:
    """Normal, Student-t and 2-D normal draws in turn, from the memo or straight from ``rng``."""
    out = []
    for shape in (5000, (3, 2000), 4096):
        out.append(rng.standard_normal(shape) if fresh else draws.standard_normal(rng, shape))
        out.append(rng.standard_t(3.4, shape) if fresh else draws.standard_t(rng, 3.4, shape))
    return out


def test_kept_draws_equal_fresh_ones_and_leave_the_generator_where_a_draw_would() -> None:
    after = np.random.default_rng(11)
    expected = _sequence(after, fresh=True)
    follow = after.random(4)
    for _ in range(3):  # the first pass fills the memo, the next ones read it
        rng = np.random.default_rng(11)
        got = _sequence(rng, fresh=False)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
        assert np.array_equal(rng.random(4), follow)  # the stream goes on as after fresh draws
    assert draws.kept_bytes() == sum(a.nbytes for a in expected)


def test_a_kept_draw_is_shared_and_read_only() -> None:
    a = draws.standard_normal(np.random.default_rng(2), 2048)
    b = draws.standard_normal(np.random.default_rng(2), 2048)
    assert a is b and not a.flags.writeable
    with pytest.raises(ValueError):
        a += 1.0


def test_the_kind_and_shape_are_part_of_the_key() -> None:
    normal = draws.standard_normal(np.random.default_rng(3), 2048)
    t = draws.standard_t(np.random.default_rng(3), 5.0, 2048)
    t_other = draws.standard_t(np.random.default_rng(3), 6.0, 2048)
    square = draws.standard_normal(np.random.default_rng(3), (2, 1024))
    assert not np.array_equal(normal, t) and not np.array_equal(t, t_other)
    assert square.shape == (2, 1024) and np.array_equal(square.ravel(), normal)


def test_small_draws_and_other_generators_are_not_kept() -> None:
    draws.standard_normal(np.random.default_rng(4), draws.MIN_SIZE - 1)
    other = np.random.Generator(np.random.MT19937(4))
    values = draws.standard_normal(other, 4096)
    assert draws.kept_bytes() == 0 and values.flags.writeable
    assert np.array_equal(values, np.random.Generator(np.random.MT19937(4)).standard_normal(4096))


def test_the_memo_keeps_at_most_its_byte_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(draws, "MAX_BYTES", 3 * 8 * 2048)
    for seed in range(10):
        draws.standard_normal(np.random.default_rng(seed), 2048)
        assert draws.kept_bytes() <= draws.MAX_BYTES
    assert draws.kept_bytes() == 3 * 8 * 2048
    first = draws.standard_normal(np.random.default_rng(0), 2048)  # evicted: drawn again, same values
    assert np.array_equal(first, np.random.default_rng(0).standard_normal(2048))
