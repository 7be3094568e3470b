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


def test_mlp_depth_adds_hidden_layers_and_keeps_the_default_model():
    default = mlp(seed=3)
    assert [tuple(p.shape) for p in default.parameters()] == [(64, 64), (64,), (10, 64), (10,)]
    deep = mlp(hidden=16, depth=3, seed=3)
    assert [tuple(p.shape) for p in deep.parameters()] == [
        (16, 64), (16,), (16, 16), (16,), (16, 16), (16,), (10, 16), (10,)
    ]
    assert deep(torch.zeros(2, 64)).shape == (2, 10)
    try:
        mlp(depth=0)
    except ValueError as e:
        assert "depth" in str(e)
    else:
        raise AssertionError("mlp(depth=0) should raise")


def test_digits_are_scikit_learns_read_without_importing_it():
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    from helpers.data import digits_file

    x_sk, y_sk = load_digits(return_X_y=True)
    x_tr, y_tr, x_te, y_te = digits()
    order = torch.randperm(len(y_sk), generator=torch.Generator().manual_seed(0))
    x_all, y_all = torch.cat([x_te, x_tr]), torch.cat([y_te, y_tr])  # test rows come first
    assert torch.equal(x_all, torch.tensor(x_sk, dtype=torch.float32)[order] / 16.0)
    assert torch.equal(y_all, torch.tensor(y_sk)[order])
    assert digits_file().name == "digits.csv.gz"
    code = "import sys, helpers.data as d; d.digits(); print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", "reading the digits imported scikit-learn"
