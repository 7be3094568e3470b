"""helpers.mesh and helpers.gpt (notebook 11): mesh shapes and groups against PyTorch's own
DeviceMesh (on the fake process group), the byte counts, the saved-activation meter, and the
model's pipeline stages."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from helpers.gpt import GPT, Config, batch, corpus, keep_stage, stage_layers
from helpers.mesh import (
    AXES,
    CommRecord,
    SavedActivations,
    axis_groups,
    coordinates,
    fake_group,
    mesh_shape,
    sent,
    sent_by_axis,
    valid_shapes,
)
from helpers.model_parallel import one_f_one_b_order, play_ranks


@pytest.mark.parametrize(("world", "shape"), [(8, (2, 2, 2)), (4, (2, 1, 2)), (6, (1, 3, 2)),
                                              (3, (1, 3, 1)), (2, (1, 1, 2)), (16, (2, 4, 2)),
                                              (1, (1, 1, 1))])
def test_the_notebooks_shape_shows_every_axis_it_can(world, shape):
    assert mesh_shape(world, layers=4, heads=4) == shape
    assert shape in valid_shapes(world, 4, 4)


def test_valid_shapes_follow_the_heads_the_host_and_the_blocks():
    shapes = valid_shapes(8, layers=4, heads=4)
    assert all(math.prod(s) == 8 and 4 % s[2] == 0 and 4 % (2 * s[0]) == 0 for s in shapes)
    assert (1, 1, 8) not in shapes and (4, 2, 1) not in shapes  # 8 heads' worth; 8 stages
    assert all(s[2] <= 2 for s in valid_shapes(8, 4, 4, ranks_per_host=2))
    assert mesh_shape(8, 4, 4, ranks_per_host=1) == (2, 4, 1)  # tp cannot leave a host
    assert mesh_shape(5, layers=4, heads=4) == (1, 5, 1)  # data parallel alone always fits
    with pytest.raises(ValueError, match="no mesh of 4 ranks fits 3 blocks"):
        mesh_shape(4, layers=3, heads=4)  # 3 blocks make no 2 equal stages


@pytest.mark.parametrize("shape", [(2, 2, 2), (2, 1, 2), (1, 3, 2), (4, 2, 2)])
def test_axis_groups_and_coordinates_are_those_of_init_device_mesh(shape):
    from torch.distributed import get_process_group_ranks
    from torch.distributed.device_mesh import init_device_mesh

    world = math.prod(shape)
    for rank in range(world):
        with fake_group(world, rank):
            mesh = init_device_mesh("cpu", shape, mesh_dim_names=AXES)
            for i, axis in enumerate(AXES):
                got = get_process_group_ranks(mesh[axis].get_group())
                assert [g for g in axis_groups(shape, i) if rank in g] == [got], (rank, axis)
            assert tuple(mesh.get_coordinate()) == coordinates(rank, shape)


def test_the_bytes_of_a_call_are_a_rings():
    assert sent({"op": "all_reduce", "ranks": (0, 1, 2, 3), "bytes": 400}) == 600
    assert sent({"op": "_allgather_base_", "ranks": (0, 1), "bytes": 400}) == 200
    assert sent({"op": "_reduce_scatter_base_", "ranks": (0, 2, 4), "bytes": 300}) == 200
    assert sent({"op": "send", "ranks": (0, 2), "bytes": 64}) == 64
    assert sent({"op": "recv_", "ranks": (0, 2), "bytes": 64}) == 0
    with pytest.raises(ValueError, match="no rule for the bytes of alltoall_base_"):
        sent({"op": "alltoall_base_", "ranks": (0, 1), "bytes": 8})


def test_calls_are_put_on_their_axis_by_their_ranks():
    calls = [{"op": "all_reduce", "ranks": (1, 0), "bytes": 100},
             {"op": "send", "ranks": (0, 4), "bytes": 10},
             {"op": "all_reduce", "ranks": (0,), "bytes": 1000}]  # one rank: moves nothing
    groups = {"pp": [0, 4], "dp": [0, 2], "tp": [0, 1]}
    assert sent_by_axis(calls, groups) == {"pp": 10.0, "dp": 0.0, "tp": 100.0}
    with pytest.raises(ValueError, match=r"on ranks \(0, 3\): not a group of the mesh"):
        sent_by_axis([{"op": "send", "ranks": (0, 3), "bytes": 1}], groups)


def test_the_record_sees_functional_and_c10d_collectives_with_their_sizes():
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    with fake_group(4, 1), CommRecord() as record:
        t = torch.ones(10)
        dist.all_reduce(t)  # c10d, through torch.distributed
        funcol.all_reduce(torch.ones(3, 2), "sum", dist.group.WORLD).wait()  # DTensor's kind
        dist.all_gather_into_tensor(torch.empty(8), torch.ones(2))
    ops = [(c["op"], c["bytes"], c["ranks"]) for c in record.calls]
    assert ops == [("allreduce_", 40, (0, 1, 2, 3)), ("all_reduce", 24, (0, 1, 2, 3)),
                   ("_allgather_base_", 32, (0, 1, 2, 3))], ops


def test_the_meter_counts_saved_activations_until_backward_frees_them():
    layer = nn.Linear(16, 8)
    x = torch.randn(4, 16, requires_grad=True)
    with SavedActivations([layer]) as saved:
        y = torch.relu(layer(x))  # saves x (4 x 16) and the weight (not counted); relu saves y
        z = y * y  # saves y again: counted once
        held = saved.live
        z.sum().backward()
    assert held == saved.peak == (4 * 16 + 4 * 8) * 4, (held, saved.peak)
    assert saved.live == 0  # backward freed them
    with SavedActivations() as unfiltered:  # no module named: the weight counts too
        layer(x).sum().backward()
    assert unfiltered.peak == (4 * 16 + 16 * 8) * 4, unfiltered.peak


def test_a_stage_keeps_its_blocks_under_their_whole_model_names():
    cfg = Config(vocab=11)
    whole = set(GPT(cfg).state_dict())
    parts = [keep_stage(GPT(cfg), s, 4) for s in range(4)]
    names = [set(p.state_dict()) for p in parts]
    assert set().union(*names) == whole and sum(len(n) for n in names) == len(whole)
    assert "tok.weight" in names[0] and "head.weight" in names[3]
    assert "layers.2.q.weight" in names[2]
    assert list(stage_layers(1, 2, 4)) == [2, 3]
    with pytest.raises(ValueError, match="4 blocks do not split into 3 equal stages"):
        stage_layers(0, 3, 4)


def test_the_stages_in_order_compute_the_whole_model():
    cfg = Config(vocab=11)
    torch.manual_seed(0)
    whole = GPT(cfg)
    x = torch.randint(0, 11, (2, cfg.seq))
    out = x
    for s in range(4):
        torch.manual_seed(0)
        out = keep_stage(GPT(cfg), s, 4)(out)
    torch.testing.assert_close(out, whole(x))


def test_the_text_and_its_batches_are_the_same_in_every_process():
    data, chars = corpus()
    assert len(data) > 40_000 and len(chars) < 128 and int(data.max()) == len(chars) - 1
    x, y = batch(data, 3, rows=5, seq=7)
    x2, y2 = batch(data, 3, rows=5, seq=7)
    assert torch.equal(x, x2) and torch.equal(y, y2) and x.shape == (5, 7)
    assert torch.equal(x[:, 1:], y[:, :-1])  # the targets: the next character


@pytest.mark.parametrize(("p", "m"), [(2, 4), (3, 6), (4, 8)])
def test_one_rank_per_stage_plays_as_schedule_slots(p, m):
    orders = [[(k, i, s) for k, i in one_f_one_b_order(s, p, m)] for s in range(p)]
    length = play_ranks(orders, p)
    assert (length - 3 * m) / length == pytest.approx((p - 1) / (m + p - 1))
