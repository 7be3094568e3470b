"""The checkers of the ring exercises (notebooks 01 and 02) on planted wrong answers."""

from __future__ import annotations

import pytest
import torch

from helpers.ring_checks import check_ring_all_gather, check_shift, gather_input, shift_input


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
