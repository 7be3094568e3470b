"""helpers/sharding.py without a cluster: unequal shares of the batch and the loss that keeps
their average right."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers.sharding import (
    GLOBAL_BATCH,
    global_batch,
    my_batch,
    net,
    rows_of,
    share_loss,
)


@pytest.mark.parametrize("world_size", [*range(1, 9), 16, 24, 25])
def test_the_shares_cover_the_batch_once_and_differ_by_one_row_at_most(world_size):
    shares = [rows_of(r, world_size) for r in range(world_size)]
    assert shares[0].start == 0 and shares[-1].stop == GLOBAL_BATCH
    assert all(a.stop == b.start for a, b in zip(shares, shares[1:]))
    sizes = {s.stop - s.start for s in shares}
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5, 7, 8, 16])
def test_the_average_of_the_ranks_gradients_is_the_global_means(world_size):
    """What DDP computes from share_loss, done by hand: the average over ranks of each share's
    gradient equals the gradient of the mean over the whole batch, at unequal shares too."""
    model = net()
    x, y = global_batch(0)
    nn.functional.cross_entropy(model(x), y).backward()
    whole = [p.grad.clone() for p in model.parameters()]
    total = [torch.zeros_like(p) for p in model.parameters()]
    for rank in range(world_size):
        model.zero_grad()
        xr, yr = my_batch(0, rank, world_size)
        share_loss(model(xr), yr, world_size).backward()
        total = [t + p.grad for t, p in zip(total, model.parameters())]
    for t, w in zip(total, whole):
        torch.testing.assert_close(t / world_size, w)


def test_a_ranks_own_mean_would_be_wrong_where_the_shares_are_unequal():
    model, world_size = net(), 5
    x, y = global_batch(0)
    nn.functional.cross_entropy(model(x), y).backward()
    whole = next(model.parameters()).grad.clone()
    total = torch.zeros_like(whole)
    for rank in range(world_size):
        model.zero_grad()
        xr, yr = my_batch(0, rank, world_size)
        nn.functional.cross_entropy(model(xr), yr).backward()
        total += next(model.parameters()).grad
    assert not torch.allclose(total / world_size, whole)
