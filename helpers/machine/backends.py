"""Probe, live, which operations a backend supports on this machine (run on every rank), and
what it runs for one (``backend_works``, notebook 08).

Introduced in notebook 00, used again in notebooks 01 and 02 to skip what a backend lacks.
Every probe runs the operation on known inputs and checks the answer, so "yes" means "runs
and gives the right result here", not "documented". ``P2P_PROBES`` (notebook 01) probe two
point-to-point features that gloo has and nccl lacks: message tags and receiving from any
source. They are written so that a backend without the feature fails fast on every rank,
with no message left unmatched.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable

import torch
import torch.distributed as dist

from ..text import first_line

Probe = Callable[[int, int, torch.device, object], bool]


def global_rank(group: object, group_rank: int) -> int:
    """The global rank of a group's member (send, recv and src= name peers by global rank)."""
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def _ring(rank: int, n: int, device: torch.device, group: object) -> bool:
    """Send right and receive from the left, posted together (an isend, then an irecv, each
    on its own, can deadlock under NCCL: with 2 ranks both neighbours are the same rank)."""
    out, inp = torch.full((2,), float(rank), device=device), torch.zeros(2, device=device)
    ops = [dist.P2POp(dist.isend, out, global_rank(group, (rank + 1) % n), group=group),
           dist.P2POp(dist.irecv, inp, global_rank(group, (rank - 1) % n), group=group)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return bool((inp == (rank - 1) % n).all())


def _all_reduce(op: dist.ReduceOp, expected: Callable[[int], float]) -> Probe:
    """Each rank gives rank + 1. Compared within float32's rounding: from 14 ranks on, the
    product n! has more significant bits than a float32 holds, so it is rounded, and each
    backend may multiply in another order."""
    def probe(rank, n, device, group):
        t = torch.tensor([rank + 1.0], device=device)
        dist.all_reduce(t, op=op, group=group)
        return math.isclose(t.item(), expected(n), rel_tol=1e-6)
    return probe


def _broadcast(rank, n, device, group):
    t = torch.tensor([rank + 1.0], device=device)
    dist.broadcast(t, src=global_rank(group, 0), group=group)
    return t.item() == 1.0


def _reduce(rank, n, device, group):
    t = torch.tensor([rank + 1.0], device=device)
    dist.reduce(t, dst=global_rank(group, 0), group=group)
    return rank != 0 or t.item() == n * (n + 1) / 2


def _all_gather(rank, n, device, group):
    out = [torch.zeros(1, device=device) for _ in range(n)]
    dist.all_gather(out, torch.tensor([rank + 1.0], device=device), group=group)
    return [t.item() for t in out] == [r + 1.0 for r in range(n)]


# torch 2.13 renamed the single-tensor forms; fall back to the older names on older releases
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _all_gather_single_probe(rank, n, device, group):
    out = torch.zeros(n, device=device)
    _all_gather_single(out, torch.tensor([rank + 1.0], device=device), group=group)
    return out.tolist() == [r + 1.0 for r in range(n)]


def _gather(rank, n, device, group):
    out = [torch.zeros(1, device=device) for _ in range(n)] if rank == 0 else None
    dist.gather(torch.tensor([rank + 1.0], device=device), out, dst=global_rank(group, 0),
                group=group)
    return rank != 0 or [t.item() for t in out] == [r + 1.0 for r in range(n)]


def _scatter(rank, n, device, group):
    chunks = [torch.tensor([r + 1.0], device=device) for r in range(n)] if rank == 0 else None
    t = torch.zeros(1, device=device)
    dist.scatter(t, chunks, src=global_rank(group, 0), group=group)
    return t.item() == rank + 1.0


def _reduce_scatter(rank, n, device, group):
    out = torch.zeros(1, device=device)
    dist.reduce_scatter(out, [torch.tensor([r + 1.0], device=device) for r in range(n)],
                        group=group)
    return out.item() == n * (rank + 1.0)


def _reduce_scatter_single_probe(rank, n, device, group):
    out = torch.zeros(1, device=device)
    _reduce_scatter_single(out, torch.arange(1.0, n + 1, device=device), group=group)
    return out.item() == n * (rank + 1.0)


def _all_to_all(rank, n, device, group):
    out = [torch.zeros(1, device=device) for _ in range(n)]
    dist.all_to_all(out, [torch.tensor([10.0 * rank + r], device=device) for r in range(n)],
                    group=group)
    return [t.item() for t in out] == [10.0 * r + rank for r in range(n)]


def _all_to_all_single(rank, n, device, group):
    out = torch.zeros(n, device=device)
    dist.all_to_all_single(out, 10.0 * rank + torch.arange(n, dtype=torch.float, device=device),
                           group=group)
    return out.tolist() == [10.0 * r + rank for r in range(n)]


def _barrier(rank, n, device, group):
    """A barrier on device's backend: the course's group has no device_id, so on GPU ranks a
    barrier without device_ids would run on the group's gloo part (distributed_c10d.barrier)."""
    dist.barrier(group=group, device_ids=[device.index] if device.type == "cuda" else None)
    return True


PROBES: dict[str, Probe] = {
    "batch_isend_irecv": _ring,
    "broadcast": _broadcast,
    "reduce": _reduce,
    "all_reduce SUM": _all_reduce(dist.ReduceOp.SUM, lambda n: n * (n + 1) / 2),
    "all_reduce PRODUCT": _all_reduce(dist.ReduceOp.PRODUCT, lambda n: float(math.factorial(n))),
    "all_reduce MIN": _all_reduce(dist.ReduceOp.MIN, lambda n: 1.0),
    "all_reduce MAX": _all_reduce(dist.ReduceOp.MAX, lambda n: float(n)),
    "all_reduce AVG": _all_reduce(dist.ReduceOp.AVG, lambda n: (n + 1) / 2),
    "all_gather": _all_gather,
    "all_gather_single": _all_gather_single_probe,
    "gather": _gather,
    "scatter": _scatter,
    "reduce_scatter": _reduce_scatter,
    "reduce_scatter_single": _reduce_scatter_single_probe,
    "all_to_all": _all_to_all,
    "all_to_all_single": _all_to_all_single,
    "barrier": _barrier,
}


def _agree(ok: bool, reason: str, device: torch.device, group: object) -> None:
    """Send rank 1's verdict to every rank; if not ok, raise NotImplementedError(reason) on all."""
    verdict = torch.tensor([1.0 if ok else 0.0], device=device)
    dist.broadcast(verdict, src=global_rank(group, 1), group=group)
    if verdict.item() != 1.0:
        raise NotImplementedError(reason)


def _tags(rank, n, device, group):
    """Rank 0 sends tags 1 then 2; rank 1 receives tag 2 first. With tags honoured, no mix-up."""
    first, second = torch.zeros(1, device=device), torch.zeros(1, device=device)
    if rank == 0:
        one = global_rank(group, 1)
        reqs = [dist.isend(torch.tensor([1.0], device=device), one, group=group, tag=1),
                dist.isend(torch.tensor([2.0], device=device), one, group=group, tag=2)]
    elif rank == 1:
        zero = global_rank(group, 0)
        reqs = [dist.irecv(second, zero, group=group, tag=2),
                dist.irecv(first, zero, group=group, tag=1)]
    for req in reqs if rank < 2 else []:
        req.wait()
    ok = rank != 1 or (first.item(), second.item()) == (1.0, 2.0)
    _agree(ok, "tags are ignored: messages are matched in the order they were sent",
           device, group)
    return True


def _recv_any_source(rank, n, device, group):
    """Rank 1 posts a receive with src=None; rank 0 sends only if rank 1 could post it."""
    buf, req, reason = torch.zeros(1, device=device), None, ""
    if rank == 1:
        try:
            req = dist.irecv(buf, src=None, group=group)
        except (RuntimeError, ValueError, NotImplementedError) as e:
            reason = first_line(str(e))[:60]
    _agree(rank != 1 or req is not None, reason or "the receiving rank could not post it",
           device, group)
    if rank == 0:
        dist.send(torch.tensor([7.0], device=device), global_rank(group, 1), group=group)
    if rank == 1:
        req.wait()
        return buf.item() == 7.0
    return True


P2P_PROBES: dict[str, Probe] = {
    "send/recv tags": _tags,
    "recv from any source": _recv_any_source,
}


def probe_support(
    device: torch.device, group: object = None, probes: dict[str, Probe] = PROBES
) -> dict[str, str]:
    """Run every probe on this rank; 'yes', 'WRONG RESULT' or 'no: <the backend's reason>'."""
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    table = {}
    for name, probe in probes.items():
        if n < 2 and (name == "batch_isend_irecv" or name in P2P_PROBES):
            table[name] = "n/a: needs 2 ranks"
            continue
        try:
            table[name] = "yes" if probe(rank, n, device, group) else "WRONG RESULT"
        except (RuntimeError, ValueError, NotImplementedError) as e:
            table[name] = "no: " + first_line(str(e))[:70]
    return table


def backend_works(fn: Callable[[], object]) -> list[str]:
    """The backend's own operations that fn() runs ('gloo:all_reduce', 'nccl:...'), as
    torch.profiler records them: what a collective really is on this backend (notebook 08: on
    gloo, reduce_scatter_single runs as an all-reduce). The profiler's start and stop lines,
    which its C++ writes to the process's standard error, are kept out of the cell's output."""
    from torch.profiler import ProfilerActivity, profile

    sys.stderr.flush()
    saved, quiet = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 2)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(quiet)
    return sorted({e.name for e in prof.events() if e.name.startswith(("gloo:", "nccl:"))})
