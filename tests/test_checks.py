"""Exercise checkers catch planted wrong answers and name the wrong ranks."""

import pytest
import torch

from helpers.checks import check_ranks, wrong_ranks


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
