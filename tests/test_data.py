"""The shared data set and model are deterministic and sane."""

import torch

from helpers.data import accuracy, digits, mlp


def test_digits_split_is_fixed_disjoint_and_complete():
    x_tr, y_tr, x_te, y_te = digits()
    assert x_tr.shape[1] == 64 and len(x_tr) + len(x_te) == 1797
    assert 0.0 <= x_tr.min() and x_tr.max() <= 1.0 and set(y_tr.tolist()) == set(range(10))
    again = digits()
    assert torch.equal(x_tr, again[0]) and torch.equal(y_te, again[3])
    rows_tr = {tuple(r) for r in x_tr.tolist()}
    rows_te = {tuple(r) for r in x_te.tolist()}
    assert len(rows_tr & rows_te) < 5  # a few digit images are exact duplicates in the data set


def test_mlp_seed_gives_identical_weights_and_untrained_accuracy_is_chance():
    a, b = mlp(seed=1), mlp(seed=1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    x_tr, y_tr, x_te, y_te = digits()
    assert accuracy(a, x_te, y_te) < 0.3
