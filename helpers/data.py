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


def mlp(hidden: int = 64, seed: int | None = None) -> nn.Sequential:
    """A two-layer perceptron for digits; with seed, the same initial weights on every call."""
    if seed is not None:
        torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(N_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, N_CLASSES))


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of x that the model classifies as y."""
    return (model(x).argmax(dim=1) == y).float().mean().item()
