"""The user's own network, data and train/test functions (quickstart-pytorch's signatures).

The data are scikit-learn's bundled 8x8 digits, so the app runs offline. The
one change from quickstart-pytorch's ``Net``: the forward flattens with
``torch.flatten(x, 1)`` instead of ``x.view(-1, 16 * 5 * 5)``, a size that
cannot shrink when DepL prunes ``conv2``'s channels (with the hard-coded size,
``conv2`` is kept whole in every variant, named in one warning line, and only
the other layers are compressed).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    """A small CNN for 1x8x8 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    return x, data.target.astype(np.int64)


def load_data(partition_id: int, num_partitions: int) -> tuple[DataLoader, DataLoader]:
    """This partition's train loader and the shared test loader (last 20% of the digits)."""
    x, y = _digits()
    order = np.random.default_rng(0).permutation(len(y))
    cut = int(0.8 * len(y))
    train_idx = np.array_split(order[:cut], num_partitions)[partition_id]
    test_idx = order[cut:]
    train = TensorDataset(torch.from_numpy(x[train_idx]), torch.from_numpy(y[train_idx]))
    test = TensorDataset(torch.from_numpy(x[test_idx]), torch.from_numpy(y[test_idx]))
    gen = torch.Generator().manual_seed(partition_id)
    return DataLoader(train, batch_size=32, shuffle=True, generator=gen), DataLoader(test, batch_size=256)


def train(net: nn.Module, trainloader: DataLoader, epochs: int, device: str) -> float:
    """Train ``net`` in place; the mean train loss."""
    net.to(device).train()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    total, count = 0.0, 0
    for _ in range(epochs):
        for images, labels in trainloader:
            optimizer.zero_grad()
            loss = F.cross_entropy(net(images.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(labels)
            count += len(labels)
    return total / max(count, 1)


def test(net: nn.Module, testloader: DataLoader, device: str) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``net`` on ``testloader``."""
    net.to(device).eval()
    loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for images, labels in testloader:
            logits = net(images.to(device))
            loss += float(F.cross_entropy(logits, labels.to(device), reduction="sum"))
            correct += int((logits.argmax(1) == labels.to(device)).sum())
            count += len(labels)
    return loss / count, correct / count
