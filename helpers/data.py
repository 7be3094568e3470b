"""The course's data and model: scikit-learn's digits (shipped with the package) and a small MLP.

Introduced in notebook 03 and reused by 04 and 05, so that every notebook trains the same
model on the same data. Nothing is downloaded.
"""

from __future__ import annotations

import torch
from sklearn.datasets import load_digits
from torch import nn

N_FEATURES, N_CLASSES = 64, 10


def digits(test_fraction: float = 0.25, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_test, y_test): 8x8 digit images as 64 floats in [0, 1], and labels.

    The split is a fixed shuffle (seed), so every rank and every run sees the same split.
    """
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32) / 16.0
    y = torch.tensor(y, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = int(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def mlp(hidden: int = 64, seed: int | None = None, depth: int = 1) -> nn.Sequential:
    """A perceptron for digits with `depth` hidden layers; with seed, the same weights every call.

    The default (one hidden layer) is the course model. Notebooks 03 and 04 time gradient
    averaging on a deeper one, because the cost of communication grows with the number of
    parameter tensors.
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1 hidden layer, got {depth}")
    if seed is not None:
        torch.manual_seed(seed)
    layers: list[nn.Module] = [nn.Linear(N_FEATURES, hidden), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(hidden, hidden), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(hidden, N_CLASSES))


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of x that the model classifies as y."""
    return (model(x).argmax(dim=1) == y).float().mean().item()
