"""Synthetic(alpha, beta): the federated softmax-regression data of FedProx and LEAF (numpy only).

Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in
Heterogeneous Networks", MLSys 2020, section 5.1, and its reference generator
(github.com/litian96/FedProx, ``data/synthetic_{0_0,0.5_0.5,1_1}/generate_synthetic.py``
and ``data/synthetic_iid/generate_iid.py``; LEAF's ``data/synthetic`` follows
it). For device k:

* ``u_k ~ N(0, alpha)``, ``W_k ~ N(u_k, 1)`` (shape ``dimension x num_classes``),
  ``b_k ~ N(u_k, 1)``: alpha spreads the local models, hence the label
  distributions;
* ``B_k ~ N(0, beta)``, ``v_k ~ N(B_k, 1)`` (shape ``dimension``): beta spreads
  the feature means;
* ``x ~ N(v_k, Sigma)`` with ``Sigma = diag(j ** -1.2)``, ``j = 1..dimension``;
* ``y = argmax softmax(W_k^T x + b_k)``.

The second argument of ``N`` is the standard deviation, as in the reference
code (``np.random.normal(0, alpha)``). The IID variant shares one model and
one feature mean: ``W, b ~ N(0, 1)`` and ``v = 0`` for every device, as in
``generate_iid.py``. Device k holds ``floor(lognormal(log_mean, log_sigma)) +
min_samples`` training samples (``lognormal(4, 2) + 50`` in the reference):
a heavy-tailed, power-law-like spread of sizes.

Every random draw comes from its own stream, keyed on the seed and the device
index (``numpy.random.default_rng([seed, stream, k])``): device k's data does
not depend on how many devices are generated, so a client generates only its
own samples and the server only the held-out draws. The server's validation
and test splits are extra draws from every device's distribution (about
``held_out_fraction`` of its training count, at least two), pooled over the
devices and halved; no client ever holds them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Stream ids of the seeded draws (one generator per stream and device).
_COUNTS, _MODEL, _TRAIN, _HELD_OUT = 0, 1, 2, 3


@dataclass(frozen=True)
class SyntheticSpec:
    """Parameters of a Synthetic(alpha, beta) federation.

    Parameters
    ----------
    alpha : float
        Spread of the devices' local models (std of ``u_k``); >= 0.
    beta : float
        Spread of the devices' feature means (std of ``B_k``); >= 0.
    iid : bool
        One shared model and feature mean (alpha and beta unused).
    seed : int
        Seed of every draw.
    dimension, num_classes : int
        Feature dimension (60) and classes (10) of the paper.
    log_mean, log_sigma : float
        Parameters of the lognormal of the per-device sample counts.
    min_samples : int
        Added to every count (50 in the reference).
    held_out_fraction : float
        Held-out draws per device relative to its training count (validation
        and test together).
    """

    alpha: float = 1.0
    beta: float = 1.0
    iid: bool = False
    seed: int = 0
    dimension: int = 60
    num_classes: int = 10
    log_mean: float = 4.0
    log_sigma: float = 2.0
    min_samples: int = 50
    held_out_fraction: float = 0.2

    def __post_init__(self) -> None:
        if not (self.alpha >= 0 and self.beta >= 0):
            raise ValueError(f"alpha and beta must be >= 0, got {self.alpha}, {self.beta}")
        if self.dimension < 1 or self.num_classes < 2 or self.min_samples < 1:
            raise ValueError("dimension >= 1, num_classes >= 2 and min_samples >= 1 are needed")
        if not (self.log_sigma >= 0 and 0 < self.held_out_fraction <= 1):
            raise ValueError("log_sigma must be >= 0 and held_out_fraction in (0, 1]")


@dataclass(frozen=True)
class DeviceModel:
    """The distribution of one device: softmax model ``(W, b)`` and feature mean ``v``."""

    weight: np.ndarray
    bias: np.ndarray
    mean: np.ndarray


def _rng(spec: SyntheticSpec, stream: int, device: int | None = None) -> np.random.Generator:
    key = [int(spec.seed), stream] if device is None else [int(spec.seed), stream, int(device)]
    return np.random.default_rng(key)


def sample_counts(spec: SyntheticSpec, num_devices: int) -> np.ndarray:
    """Training samples of devices ``0..num_devices-1``: ``floor(lognormal) + min_samples``."""
    if num_devices < 1:
        raise ValueError(f"need at least one device, got {num_devices}")
    draws = _rng(spec, _COUNTS).lognormal(spec.log_mean, spec.log_sigma, int(num_devices))
    return draws.astype(np.int64) + int(spec.min_samples)


def feature_std(dimension: int) -> np.ndarray:
    """Per-feature standard deviation: ``sqrt(j ** -1.2)``, ``j = 1..dimension``."""
    return np.power(np.arange(1, dimension + 1, dtype=np.float64), -0.6)


def device_model(spec: SyntheticSpec, device: int) -> DeviceModel:
    """Softmax model and feature mean of ``device`` (shared by all devices when ``spec.iid``)."""
    d, c = spec.dimension, spec.num_classes
    if spec.iid:
        rng = _rng(spec, _MODEL)
        return DeviceModel(rng.normal(0.0, 1.0, (d, c)), rng.normal(0.0, 1.0, c), np.zeros(d))
    rng = _rng(spec, _MODEL, device)
    u = rng.normal(0.0, spec.alpha)
    shift = rng.normal(0.0, spec.beta)
    weight = rng.normal(u, 1.0, (d, c))
    bias = rng.normal(u, 1.0, c)
    mean = rng.normal(shift, 1.0, d)
    return DeviceModel(weight, bias, mean)


def draw(model: DeviceModel, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` samples ``x ~ N(v, diag(j ** -1.2))``, ``y = argmax(W^T x + b)`` (float32, int64)."""
    d = model.mean.size
    x = model.mean + rng.standard_normal((int(n), d)) * feature_std(d)
    y = np.argmax(x @ model.weight + model.bias, axis=1)
    return x.astype(np.float32), y.astype(np.int64)


def device_data(spec: SyntheticSpec, device: int, num_devices: int) -> tuple[np.ndarray, np.ndarray]:
    """Training samples ``(x, y)`` of ``device`` (shape ``(n_k, dimension)``)."""
    if not 0 <= device < num_devices:
        raise ValueError(f"device {device} is not in 0..{num_devices - 1}")
    n = int(sample_counts(spec, device + 1)[device])
    return draw(device_model(spec, device), n, _rng(spec, _TRAIN, device))


def held_out_counts(spec: SyntheticSpec, num_devices: int) -> np.ndarray:
    """Held-out draws per device: ``held_out_fraction`` of its training count, at least 2."""
    counts = sample_counts(spec, num_devices)
    return np.maximum(2, np.rint(spec.held_out_fraction * counts).astype(np.int64))


def held_out(spec: SyntheticSpec, num_devices: int
             ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The server's ``(validation, test)`` splits: fresh draws from every device, pooled.

    Each device's held-out draws alternate between the two splits, so both
    weigh the devices like their training counts and no sample is in both.
    """
    xs, ys, halves = [], [], []
    for k, h in enumerate(held_out_counts(spec, num_devices)):
        x, y = draw(device_model(spec, k), int(h), _rng(spec, _HELD_OUT, k))
        xs.append(x)
        ys.append(y)
        halves.append(np.arange(int(h)) % 2)
    x_all, y_all, half = np.concatenate(xs), np.concatenate(ys), np.concatenate(halves)
    val, test = half == 0, half == 1
    return (x_all[val], y_all[val]), (x_all[test], y_all[test])
