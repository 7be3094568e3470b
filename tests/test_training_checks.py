"""The training checker names exactly the wrong ranks, on the exercises' planted mistakes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.data import accuracy, digits, mlp
from helpers.training_checks import check_close_per_rank

WORLD = 4


def _grad(model, x, y) -> torch.Tensor:
    """Flat gradient of the mean cross-entropy of model on (x, y)."""
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()


@pytest.fixture(scope="module")
def uneven():
    """Exercise 03's set-up, in one process: rank r holds 8(r+1) samples."""
    x, y, _, _ = digits()
    sizes = [8 * (r + 1) for r in range(WORLD)]
    starts = [sum(sizes[:r]) for r in range(WORLD)]
    model = mlp(seed=0)
    local = [_grad(model, x[s:s + n], y[s:s + n]) for s, n in zip(starts, sizes)]
    expected = _grad(model, x[:sum(sizes)], y[:sum(sizes)])
    return sizes, local, expected


def test_weighted_average_passes(uneven, capsys):
    sizes, local, expected = uneven
    weighted = sum(n * g for n, g in zip(sizes, local)) / sum(sizes)
    check_close_per_rank([weighted.clone() for _ in range(WORLD)], expected, "gradient")
    assert "correct on all 4 ranks" in capsys.readouterr().out


def test_plain_average_and_no_average_are_caught(uneven):
    sizes, local, expected = uneven
    plain = sum(local) / WORLD  # notebook 03's average_gradients: wrong for uneven shards
    with pytest.raises(AssertionError, match=r"rank\(s\) \[0, 1, 2, 3\]"):
        check_close_per_rank([plain] * WORLD, expected, "gradient")
    with pytest.raises(AssertionError, match=r"rank\(s\) \[0, 1, 2, 3\]"):
        check_close_per_rank(local, expected, "gradient")  # the stub: nothing averaged


def test_only_the_wrong_rank_is_named(uneven):
    sizes, local, expected = uneven
    got = [expected.clone() for _ in range(WORLD)]
    got[2] = got[2] * 1.01
    with pytest.raises(AssertionError) as info:
        check_close_per_rank(got, expected, "gradient")
    message = str(info.value)
    assert "rank(s) [2]" in message and "rank 2: gradient is off by up to" in message
    assert "rank 0" not in message and "rank 3" not in message


def test_none_wrong_shape_and_nan_are_caught(uneven):
    _, _, expected = uneven
    got = [None, expected[:10], expected.clone(), expected.clone()]
    got[3][0] = float("nan")
    with pytest.raises(AssertionError) as info:
        check_close_per_rank(got, expected, "gradient")
    message = str(info.value)
    assert "rank(s) [0, 1, 3]" in message
    assert "rank 0: gradient is None" in message
    assert f"rank 1: gradient has shape (10,), expected ({len(expected)},)" in message
    assert "rank 3: gradient is off by up to nan" in message


def test_exercise_04_padded_and_averaged_accuracies_are_caught():
    _, _, x_test, y_test = digits()
    model = mlp(seed=0)
    exact = accuracy(model, x_test, y_test)
    with torch.no_grad():
        right = (model(x_test).argmax(dim=1) == y_test).float()
    shares = [torch.arange(r, len(x_test), WORLD) for r in range(WORLD)]
    mean_of_accuracies = sum(right[s].mean().item() for s in shares) / WORLD
    padded = torch.cat([torch.arange(len(x_test)), torch.arange(-len(x_test) % WORLD)])
    with_padding = right[padded].mean().item()  # DistributedSampler repeats a few samples
    assert len({exact, mean_of_accuracies, with_padding}) == 3
    check_close_per_rank([exact] * WORLD, exact, "test accuracy", atol=1e-6, rtol=0)
    for wrong in (mean_of_accuracies, with_padding, 0.0):
        with pytest.raises(AssertionError, match=r"rank\(s\) \[0, 1, 2, 3\]"):
            check_close_per_rank([wrong] * WORLD, exact, "test accuracy", atol=1e-6, rtol=0)
