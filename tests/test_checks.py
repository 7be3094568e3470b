"""Exercise checkers catch planted wrong answers and name the wrong ranks (helpers.checks)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.checks import (
    check_close_per_rank,
    check_from_left,
    check_ranks,
    check_ring_all_gather,
    check_shift,
    gather_input,
    shift_input,
    weights_fingerprint,
    wrong_ranks,
)
from helpers.data import accuracy, digits, mlp


def test_check_ranks_passes_a_right_answer(capsys):
    check_ranks([4, 4, 4, 4], [4] * 4, "n_ranks")
    assert "correct on all 4 ranks" in capsys.readouterr().out


def test_notebook_00_exercise_checker_names_the_wrong_ranks():
    planted = [4, 3, 4, None]  # rank 1 off by one, rank 3 never set it
    with pytest.raises(AssertionError) as err:
        check_ranks(planted, [4] * 4, "n_ranks")
    message = str(err.value)
    assert "rank(s) [1, 3]" in message
    assert "rank 1: n_ranks is 3, expected 4" in message and "rank 3: n_ranks is None" in message
    assert "rank 0" not in message and "rank 2" not in message


def test_tensors_compare_by_value_shape_and_tolerance():
    got = [torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-3]), torch.tensor([1.0])]
    assert wrong_ranks(got, [torch.tensor([1.0, 2.0])] * 3) == [1, 2]
    assert wrong_ranks(got[:2], [torch.tensor([1.0, 2.0])] * 2, atol=1e-2) == []
    with pytest.raises(AssertionError, match="got values from 2 ranks, expected 3"):
        check_ranks([1, 1], [1, 1, 1], "x")


# ---- rings (notebooks 01, 02, 06) --------------------------------------------------
def _right_shift(n: int) -> list[torch.Tensor]:
    return [shift_input((r - 1) % n) for r in range(n)]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_check_shift_accepts_the_right_answer(n, capsys):
    check_shift(_right_shift(n))
    assert f"correct on all {n} ranks" in capsys.readouterr().out


def test_check_shift_names_the_one_wrong_rank():
    got = _right_shift(4)
    got[2] = shift_input(2)  # rank 2 kept its own tensor
    with pytest.raises(AssertionError, match=r"rank\(s\) \[2\]") as err:
        check_shift(got)
    assert "rank 2: shifted is [20.0, 21.0, 22.0], expected [10.0, 11.0, 12.0]" in str(err.value)


def test_check_shift_catches_a_shift_to_the_left_on_every_rank():
    left = [shift_input((r + 1) % 3) for r in range(3)]
    with pytest.raises(AssertionError, match=r"rank\(s\) \[0, 1, 2\]"):
        check_shift(left)


def test_check_shift_names_ranks_that_hold_nothing():
    got = _right_shift(3)
    got[0] = None  # the stub's placeholder on rank 0
    with pytest.raises(AssertionError, match=r"rank\(s\) \[0\]"):
        check_shift(got)


def test_check_shift_does_not_trust_overwritten_inputs():
    # receiving into `mine` on every rank: the checker still knows what the inputs were
    got = [torch.zeros(3) for _ in range(2)]
    with pytest.raises(AssertionError, match=r"rank\(s\) \[0, 1\]"):
        check_shift(got)


def test_check_ring_all_gather():
    n = 3
    right = torch.cat([gather_input(r) for r in range(n)])
    check_ring_all_gather([right.clone() for _ in range(n)])
    wrong_order = torch.cat([gather_input(r) for r in reversed(range(n))])
    with pytest.raises(AssertionError, match=r"rank\(s\) \[1\]") as err:
        check_ring_all_gather([right, wrong_order, right])
    assert "rank 1: gathered is [3.0, -3.0, 2.0, -2.0, 1.0, -1.0]" in str(err.value)
    own_only = [gather_input(r) for r in range(n)]  # nothing was gathered: wrong shape
    with pytest.raises(AssertionError, match=r"rank\(s\) \[0, 1, 2\]"):
        check_ring_all_gather(own_only)


def test_from_left_checker_accepts_the_left_neighbour_on_every_rank():
    check_from_left([3.0, 0.0, 1.0, 2.0])
    check_from_left([1, torch.tensor([0.0])])  # ints and one-element tensors are fine


def test_from_left_checker_names_each_wrong_rank():
    with pytest.raises(AssertionError, match=r"wrong on rank\(s\) \[2\]") as err:
        check_from_left([2.0, 0.0, 2.0])  # planted: rank 2 kept its own value
    assert "rank 2: from_left is 2.0, expected 1.0" in str(err.value)
    with pytest.raises(AssertionError, match=r"not a number on rank\(s\) \[0, 1\]"):
        check_from_left([None, None])


# ---- training (notebooks 03, 04) ---------------------------------------------------
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


# ---- checkpoints (notebook 05) -----------------------------------------------------
def test_weights_checker_names_the_wrong_ranks():
    expected = weights_fingerprint(mlp(seed=0))
    right = [weights_fingerprint(mlp(seed=0)) for _ in range(4)]
    check_ranks(right, [expected] * 4, "weights of plain")
    wrong = list(right)
    wrong[1] = weights_fingerprint(mlp(seed=3))   # loaded something else
    wrong[3] = weights_fingerprint(None)          # never loaded
    with pytest.raises(AssertionError, match=r"wrong on rank\(s\) \[1, 3\]"):
        check_ranks(wrong, [expected] * 4, "weights of plain")
    assert weights_fingerprint(nn.Identity()).numel() == 0 == weights_fingerprint(None).numel()
