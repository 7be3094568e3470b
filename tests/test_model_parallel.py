"""helpers/model_parallel.py without a cluster: the schedules, the bubble formula, RPC's parts,
and the tensor-parallel layers on a group of one (a single-rank gloo group)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from helpers.model_parallel import (
    bubble_fraction,
    gpipe_order,
    hidden_width,
    library_micro_batches,
    make_part,
    mesh_2d,
    one_f_one_b_order,
    schedule_slots,
    tensor_parallel_mlp,
)


@pytest.mark.parametrize(("stages", "m"), [(2, 1), (3, 2), (4, 4), (4, 8), (3, 7)])
def test_1f1b_runs_every_micro_batch_once_each_way_and_holds_at_most_p_minus_r(stages, m):
    for stage in range(stages):
        order = one_f_one_b_order(stage, stages, m)
        assert sorted(order) == sorted(gpipe_order(m))
        in_flight, most = 0, 0
        for kind, i in order:
            assert kind == "F" or ("F", i) in order[:order.index(("B", i))]
            in_flight += 1 if kind == "F" else -1
            most = max(most, in_flight)
        assert most == min(stages - stage, m)


def test_the_last_stage_alternates_and_the_bubble_is_the_formula():
    assert one_f_one_b_order(2, 3, 2) == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]
    assert bubble_fraction(4, 1) == 0.75 and bubble_fraction(4, 8) == 3 / 11


@pytest.mark.parametrize("stages", [2, 3, 4, 5])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 8])
def test_on_the_ideal_machine_both_schedules_idle_exactly_the_formulas_share(stages, m):
    from fractions import Fraction

    for orders in ([gpipe_order(m)] * stages,
                   [one_f_one_b_order(s, stages, m) for s in range(stages)]):
        for forward, backward in ((1, 2), (1, 1), (2, 3)):
            slots, busy = schedule_slots(orders, forward, backward)
            assert busy == m * (forward + backward)
            assert Fraction(slots - busy, slots) == Fraction(stages - 1, m + stages - 1)


def test_orders_that_cannot_finish_are_named_and_uneven_work_is_refused():
    both_backward_first = [[("B", 0), ("F", 0)], [("B", 0), ("F", 0)]]
    with pytest.raises(RuntimeError, match=r"deadlock.*0: \('B', 0, 0\), 1: \('B', 0, 1\)"):
        schedule_slots(both_backward_first)
    with pytest.raises(ValueError, match="different amounts of work"):
        schedule_slots([gpipe_order(2), gpipe_order(3)])
    # no warm-up on stage 0 (it alternates as the last stage does): it finishes, but idles more
    from fractions import Fraction

    slots, busy = schedule_slots([one_f_one_b_order(1, 2, 4)] * 2)
    assert Fraction(slots - busy, slots) > Fraction(1, 5)


def test_a_part_is_the_same_for_the_same_seed_and_leaves_the_global_generator_alone():
    before = torch.get_rng_state()
    a, b = make_part(3, 4, 6), make_part(3, 4, 6)
    assert torch.equal(torch.get_rng_state(), before)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_the_split_block_on_one_rank_is_the_block():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        full = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
        x = torch.randn(3, 4)
        torch.testing.assert_close(tensor_parallel_mlp(full)(x), full(x))
    finally:
        dist.destroy_process_group()


# ---- shapes chosen from the world size: 1 to 16 GPUs per node, 1 to 4 nodes -------------
@pytest.mark.parametrize("world_size", [*range(1, 17), 24, 32, 64])
def test_the_hidden_width_splits_equally_and_stays_near_48(world_size):
    h = hidden_width(world_size)
    assert h % world_size == 0 and h >= world_size
    assert h == 48 if 48 % world_size == 0 else abs(h - 48) <= world_size / 2


@pytest.mark.parametrize("per_node", range(1, 17))
@pytest.mark.parametrize("nodes", range(1, 5))
def test_the_2d_mesh_uses_every_rank_and_keeps_tensor_parallel_inside_a_node(per_node, nodes):
    n = per_node * nodes
    shape = mesh_2d(n, per_node)
    sides = [(n // t, t) for t in range(2, n) if n % t == 0 and n // t > 1]
    if not sides:
        assert shape is None, (n, shape)
        return
    dp, tp = shape
    assert dp * tp == n and dp > 1 and tp > 1
    if any(per_node % t == 0 for _, t in sides):
        assert per_node % tp == 0, f"{nodes} x {per_node}: tp={tp} crosses a node"


@pytest.mark.parametrize("n, per_node, shape", [
    (1, 1, None), (2, 2, None), (3, 3, None), (5, 5, None), (7, 7, None), (4, 4, (2, 2)),
    (6, 6, (2, 3)), (8, 8, (2, 4)), (9, 9, (3, 3)), (12, 12, (3, 4)), (16, 16, (4, 4)),
    (8, 2, (4, 2)), (8, 4, (2, 4)), (16, 8, (4, 4)), (16, 2, (8, 2)), (4, 1, (2, 2)),
    (6, 3, (2, 3))])
def test_the_2d_mesh_for_each_node(n, per_node, shape):
    assert mesh_2d(n, per_node) == shape


@pytest.mark.parametrize("stages", [*range(1, 17), 33])
def test_the_library_gets_at_least_as_many_micro_batches_as_stages(stages):
    m = library_micro_batches(stages)
    assert m >= stages and m >= 4 and m & (m - 1) == 0 and (m == 4 or m < 2 * stages)
