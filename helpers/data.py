"""The course's data and model: scikit-learn's digits (shipped with the package) and a small MLP.

Introduced in notebook 03 and reused by 04 and 05, so that every notebook trains the same
model on the same data. Nothing is downloaded.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch import nn

N_FEATURES, N_CLASSES = 64, 10


def digits_file() -> Path:
    """The digits as scikit-learn ships them (1797 rows: 64 pixel values 0..16, then the label).

    Read directly: importing scikit-learn takes about a second, on every rank.
    """
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("scikit-learn is not installed: run `make install` (it ships the "
                          "digits data set the course trains on)")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall scikit-learn (`make clean install`)")
    return path


def digits(test_fraction: float = 0.25, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_test, y_test): 8x8 digit images as 64 floats in [0, 1], and labels.

    The split is a fixed shuffle (seed), so every rank and every run sees the same split.
    """
    with gzip.open(digits_file(), "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x = torch.from_numpy(table[:, :-1].copy()) / 16.0
    y = torch.from_numpy(table[:, -1].astype(np.int64))
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
