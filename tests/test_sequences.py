"""helpers/sequences_and_experts.py without a cluster: who holds which positions of a sequence
(contiguous and head-tail) at every world size a node has, an expert's capacity, and the two
figures of notebook 10."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from helpers.figures import plot_positions, plot_routing
from helpers.sequences_and_experts import (
    contiguous_positions,
    expert_capacity,
    head_tail_positions,
    owners,
)

SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 16]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("layout", [contiguous_positions, head_tail_positions])
def test_every_position_is_held_by_exactly_one_rank(layout, n):
    length = 8 * n
    held = torch.cat([layout(r, n, length) for r in range(n)])
    assert sorted(held.tolist()) == list(range(length))
    assert all(len(layout(r, n, length)) == length // n for r in range(n))


@pytest.mark.parametrize("n", SIZES)
def test_head_tail_gives_rank_r_chunks_r_and_2n_minus_1_minus_r(n):
    chunk = 3
    for r in range(n):
        got = head_tail_positions(r, n, 2 * n * chunk).tolist()
        tail = 2 * n - 1 - r
        assert got == list(range(r * chunk, (r + 1) * chunk)) + list(
            range(tail * chunk, (tail + 1) * chunk))


@pytest.mark.parametrize("n", SIZES)
def test_head_tail_balances_causal_work_and_contiguous_does_not(n):
    """The number of (query, key) pairs causal attention computes per rank: equal for every rank
    with head-tail, growing with the rank for contiguous pieces (what notebook 10 measures)."""
    length = 4 * n

    def work(positions: torch.Tensor) -> int:
        return sum(int(p) + 1 for p in positions)  # a query at position p sees p + 1 keys

    head_tail = [work(head_tail_positions(r, n, length)) for r in range(n)]
    contiguous = [work(contiguous_positions(r, n, length)) for r in range(n)]
    assert len(set(head_tail)) == 1 and sum(head_tail) == sum(contiguous)
    assert contiguous == sorted(contiguous) and (n == 1 or contiguous[-1] > contiguous[0])


def test_a_length_that_does_not_split_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="multiple of 8"):
        head_tail_positions(0, 4, 36)
    with pytest.raises(ValueError, match="multiple of 3"):
        contiguous_positions(0, 3, 10)
    with pytest.raises(ValueError, match="from 1 up"):
        contiguous_positions(0, 0, 8)


def test_owners_names_the_rank_of_each_position_and_refuses_gaps():
    layout = [head_tail_positions(r, 2, 8) for r in range(2)]
    assert owners(layout) == [0, 0, 1, 1, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="position 2"):
        owners([torch.tensor([0, 1]), torch.tensor([3])])


def test_expert_capacity_is_switch_transformers_rounded_up():
    assert expert_capacity(16, 2, 8, 1.25) == 5  # 1.25 x 16 x 2 / 8 = 5
    assert expert_capacity(10, 1, 4, 1.0) == 3  # 2.5, rounded up
    assert expert_capacity(16, 2, 8, 4.0) == 16  # as many as the assignments: nothing dropped
    with pytest.raises(ValueError, match="positive"):
        expert_capacity(16, 0, 8, 1.0)


def test_plot_positions_one_row_per_layout_and_a_legend_entry_per_rank():
    fig = plot_positions({"a": [0, 0, 1, 1], "b": [0, 1, 1, 0]})
    assert len(fig.axes) == 2 and [ax.get_title(loc="left") for ax in fig.axes] == ["a", "b"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["rank 0", "rank 1"]


def test_plot_routing_one_panel_per_router_with_lines_between_ranks():
    counts = [[3, 0, 1, 2], [0, 4, 2, 1]]
    fig = plot_routing({"router": counts, "skewed": counts}, per_rank=2)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["router", "skewed"]
    assert all(len(ax.lines) == 1 for ax in panels)  # one line: between rank 0's and rank 1's
    assert panels[0].images[0].get_array().tolist() == counts
    assert {ax.images[0].get_clim() for ax in panels} == {(0, 4)}  # one scale for both
