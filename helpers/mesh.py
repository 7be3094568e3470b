"""A device mesh of several dimensions: its shapes, its groups, and what each axis costs.

Introduced in notebook 11. ``valid_shapes`` lists the (pp, dp, tp) shapes a world size allows
for a model, ``mesh_shape`` picks the one the notebook trains on, ``axis_groups`` gives the
ranks that talk along one axis (as ``init_device_mesh`` lays ranks out: row-major, the last
axis varying fastest). ``CommRecord`` records every collective and point-to-point call that
reaches PyTorch's dispatcher (those of FSDP2, DTensor and the pipeline schedules too, which
``helpers.calls.trace`` does not see: they do not all go through ``torch.distributed``'s
Python functions), with its group and size; ``sent_by_axis`` turns the record into the bytes
a rank sends along each axis. ``SavedActivations`` measures the activations autograd keeps
for backward, at their peak.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .timing import bus_factor

AXES = ("pp", "dp", "tp")
Shape = tuple[int, int, int]


def valid_shapes(world_size: int, layers: int, heads: int, ranks_per_host: int | None = None,
                 stages_per_rank: int = 2) -> list[Shape]:
    """Every (pp, dp, tp) with pp * dp * tp = world_size that the model allows: tp divides the
    heads (each rank attends with whole heads) and stays inside a host (it divides
    ranks_per_host, where given); pp * stages_per_rank divides the blocks (equal stages)."""
    shapes = []
    for tp in range(1, world_size + 1):
        for pp in range(1, world_size // tp + 1):
            if world_size % (tp * pp):
                continue
            if heads % tp or (ranks_per_host and ranks_per_host % tp):
                continue
            if layers % (pp * stages_per_rank):
                continue
            shapes.append((pp, world_size // (tp * pp), tp))
    return sorted(shapes)


def mesh_shape(world_size: int, layers: int, heads: int,
               ranks_per_host: int | None = None) -> Shape:
    """The shape notebook 11 trains on: every dimension it can show. Tensor parallelism of 2
    where the heads and the host allow it, then a pipeline of 2, the rest data parallel:
    8 -> (2, 2, 2), 4 -> (2, 1, 2), 6 -> (1, 3, 2), 3 -> (1, 3, 1), 16 -> (2, 4, 2)."""
    shapes = valid_shapes(world_size, layers, heads, ranks_per_host)
    if not shapes:
        raise ValueError(f"no mesh of {world_size} ranks fits {layers} blocks and {heads} heads")
    return max(shapes, key=lambda s: (s[2] == 2, s[0] == 2, -s[2], -s[0]))


def axis_groups(shape: Sequence[int], axis: int) -> list[list[int]]:
    """The groups of ranks along one axis of a mesh of this shape: the ranks that differ only
    in their coordinate on `axis`, each group sorted, groups in the order of their first rank."""
    ranks = torch.arange(math.prod(shape)).reshape(tuple(shape))
    rows = ranks.movedim(axis, -1).reshape(-1, shape[axis])
    return sorted(rows.tolist())


def coordinates(rank: int, shape: Sequence[int]) -> tuple[int, ...]:
    """A rank's coordinates on a mesh of this shape (row-major: the last axis fastest)."""
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(rank), tuple(shape)))


class CommRecord(TorchDispatchMode):
    """While active, records each communication operation this process dispatches: its name,
    the ranks of its group, and its size in bytes (the largest tensor it takes or gives: the
    whole of a gather or a scatter). It uses PyTorch's own table of the operations' arguments
    (torch.distributed._tools.fake_collectives, a private module of 2.13)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        from torch.distributed import get_process_group_ranks
        from torch.distributed._tools.fake_collectives import CollectiveOp, collective_ops

        result = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if func in collective_ops and name not in ("wait_tensor", "barrier", "monitored_barrier"):
            group = CollectiveOp.get_process_group(func, args)
            tensors = [t for t in torch.utils._pytree.tree_leaves((args, result))
                       if isinstance(t, torch.Tensor)]
            size = max(t.numel() * t.element_size() for t in tensors)
            self.calls.append({"op": name, "group": group.group_name, "bytes": size,
                               "ranks": tuple(get_process_group_ranks(group)),
                               "dtype": str(tensors[0].dtype)})
        return result


KINDS = {"all_reduce": "all_reduce", "allreduce_": "all_reduce",
         "all_gather_into_tensor": "all_gather", "_allgather_base_": "all_gather",
         "allgather_": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
         "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_": "reduce_scatter"}


def sent(call: dict[str, Any]) -> float:
    """Bytes one rank sends for a recorded call, as a ring moves them: the size times the
    bus factor (notebook 02) for a collective; a send's size; nothing for a receive."""
    if call["op"] == "send":
        return float(call["bytes"])
    if call["op"] in ("recv_", "recv_any_source_"):
        return 0.0
    if call["op"] not in KINDS:
        raise ValueError(f"no rule for the bytes of {call['op']}")
    return call["bytes"] * bus_factor(KINDS[call["op"]], len(call["ranks"]))


def sent_by_axis(calls: Sequence[dict[str, Any]], groups: dict[str, Sequence[int]]
                 ) -> dict[str, float]:
    """Bytes sent along each axis, for calls of a CommRecord on one rank. groups maps each axis
    to the ranks of this rank's group on it. Calls are matched by their ranks, not by the group
    object: DTensor may run a call on the group of an earlier mesh of the same layout (meshes
    that hold the same ranks under the same names compare equal). A call on one rank moves
    nothing."""
    by_ranks = {tuple(sorted(ranks)): axis for axis, ranks in groups.items() if len(ranks) > 1}
    out = {axis: 0.0 for axis in groups}
    for call in calls:
        if len(call["ranks"]) < 2:
            continue
        axis = by_ranks.get(tuple(sorted(call["ranks"])))
        if axis is None:
            raise ValueError(f"{call['op']} on ranks {call['ranks']}: not a group of the mesh")
        out[axis] += sent(call)
    return out


def local_bytes(tensors: Any) -> int:
    """Bytes this rank holds of the tensors: a DTensor's local part only."""
    from torch.distributed.tensor import DTensor

    return sum((t.to_local() if isinstance(t, DTensor) else t).numel() * t.element_size()
               for t in tensors if t is not None)


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor itself, or a DTensor's local part (a view of the same storage)."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        with torch.no_grad():
            return t.to_local()
    return t


class _Held:
    """One saved tensor, counted while autograd keeps it (its storage once, however many
    saved tensors share it)."""

    def __init__(self, tensor: torch.Tensor, meter: SavedActivations, key: int | None):
        self.tensor, self.meter, self.key = tensor, meter, key

    def __del__(self) -> None:
        if self.key is not None:
            self.meter.release(self.key)


class SavedActivations(torch.autograd.graph.saved_tensors_hooks):
    """While active, the bytes of the tensors autograd keeps for backward, live and at their
    peak, as notebook 10's saved_bytes counts them: each storage once (a tensor and its views
    count as one), the parameters of `modules` not counted (their storages at the time they are
    saved: FSDP2 gathers a parameter into new memory for each use), a DTensor's local part only.
    A storage counts from the forward that first saves it until autograd frees its last saved
    tensor (after the backward of its micro-batch)."""

    def __init__(self, modules: Any = ()) -> None:
        self.modules = list(modules)
        self.live = self.peak = 0
        self.holders: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        super().__init__(self._pack, lambda held: held.tensor)

    def __enter__(self) -> SavedActivations:
        super().__enter__()
        return self

    def _pack(self, t: torch.Tensor) -> _Held:
        storage = _local(t).untyped_storage()
        key = storage.data_ptr()
        params = {_local(p).untyped_storage().data_ptr() for m in self.modules
                  for p in m.parameters()}
        if key in params or key == 0:
            return _Held(t, self, None)
        if self.holders.get(key, 0) == 0:
            self.sizes[key] = storage.nbytes()
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
        self.holders[key] = self.holders.get(key, 0) + 1
        return _Held(t, self, key)

    def release(self, key: int) -> None:
        self.holders[key] -= 1
        if self.holders[key] == 0:
            self.live -= self.sizes.pop(key)
            del self.holders[key]


def on_fake_group(schedule: Any) -> None:
    """Let a pipeline schedule run on the fake process group (one process playing one rank).
    Before its first step a schedule of PipelineStages takes a vote over point-to-point
    messages: 1 from every stage that was given the shapes it takes and gives, and the product
    passed along; a product of 1 means no stage need ask its neighbour for shapes. On the fake
    group a receive delivers nothing (a buffer of zeros stays zeros), so the vote would read 0
    and every stage would ask. Every stage of notebook 11 is given its shapes: this sets what
    the vote would have found (torch/distributed/pipelining/schedules.py, _warmup_p2p, 2.13;
    private, and may change)."""
    from torch.distributed.pipelining.stage import InferenceMode

    def static(stages: list[Any], has_backward: bool, p2p_done: bool) -> None:
        for stage in stages:
            stage._inference_mode = InferenceMode.STATIC

    schedule._warmup_p2p = static


@contextlib.contextmanager
def fake_group(world_size: int, rank: int) -> Iterator[None]:
    """This process as rank `rank` of `world_size` on PyTorch's fake process group, for the
    duration of the block (notebook 11, step 9). Afterwards the group is destroyed, and DTensor's
    cache of sharding decisions is cleared: it keys them by meshes, and meshes of the same
    layout compare equal, so a decision cached under one fake group would name that group's
    (destroyed) process groups under the next."""
    import torch.distributed as dist
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()
        _clear_sharding_prop_cache()
