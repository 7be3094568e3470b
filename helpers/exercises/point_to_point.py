"""The exercises of notebook 01 (point to point):
their inputs, right answers and rules."""

from __future__ import annotations

from typing import Any

import torch

from .core import Calls, Exercise
from .means import (
    blocking_only,
    point_to_point_only,
)

SENDS = ("send", "isend", "send_object_list")  # the other point-to-point calls receive

# the lesson's own globals, computed at the cluster's size: an answer that reads them instead
# of its own is told so by a NameError in the run on one rank fewer
LESSON_NAMES = ("partner", "has_partner", "right", "left")


def messages(calls: Calls) -> tuple[list[Any], list[Any]]:
    """The peers (global ranks) of every message a rank sent and of every one it received,
    batch_isend_irecv's parts included; a receive from any source has peer None."""
    sent: list[Any] = []
    received: list[Any] = []
    for c in calls:
        if c["kind"] != "p2p":
            continue
        if c["op"] == "batch_isend_irecv":
            for op, peer, _ in c.get("parts") or ():
                (sent if op == "isend" else received).append(peer)
        else:
            (sent if c["op"] in SENDS else received).append(c["peer"])
    return sent, received


def posted_together(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """Point-to-point only, and non-blocking calls only inside batch_isend_irecv (step 5: an
    isend or irecv posted on its own, next to a call the other way, can deadlock under NCCL)."""
    if problem := point_to_point_only(calls, rank, size, observed):
        return problem
    if alone := sorted({c["op"] for c in calls if c["op"] in ("isend", "irecv")}):
        return (f"called {alone} one by one: post non-blocking calls together with "
                "dist.batch_isend_irecv, or order blocking send/recv by parity (step 5)")
    return None


def ring_neighbours(calls: Calls, rank: int, size: int, count: int | None = None) -> str | None:
    """Every message goes to the right neighbour and comes from the left one (count of each,
    if given)."""
    right, left = (rank + 1) % size, (rank - 1) % size
    sent, received = messages(calls)
    if wrong := sorted({str(p) for p in sent if p != right}):
        return (f"sent to rank(s) {', '.join(wrong)}: around the ring a rank sends only to "
                f"its right neighbour, rank {right}")
    if wrong := sorted({"any source" if p is None else str(p) for p in received if p != left}):
        return (f"received from {', '.join(wrong)}: around the ring a rank receives only from "
                f"its left neighbour, rank {left}")
    if count is not None and (len(sent), len(received)) != (count, count):
        return (f"sent {len(sent)} and received {len(received)} messages: the ring takes "
                f"exactly {count} steps of one send and one receive each")
    return None


def layout(seed: int, n: int) -> tuple[int, ...]:
    """The shape of an exercise's n numbers, by seed: (n,), (1, n) or (n, 1). The count stays
    fixed (a buffer of the wrong size makes gloo end the receiving process), the shape does
    not, so an answer that builds its buffers with a fixed shape, not from its input, fails."""
    return ((n,), (1, n), (n, 1))[seed % 3]


def _pair_value(rank: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(0, 100, (2,), generator=gen).float().reshape(layout(seed, 2))


def _swap_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (_pair_value(rank, seed).to(device),)


def _swap_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    partner = rank ^ 1
    return _pair_value(partner if partner < size else rank, seed)


def _swap_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """Blocking send and recv only: one message to the partner and one from it (a receive
    from any source, gloo's recv without src, is the partner's too)."""
    partner = rank ^ 1
    if partner >= size:
        return None if not calls else (f"rank {rank} has no partner at world size {size}, "
                                       f"but called {sorted({c['op'] for c in calls})}")
    if problem := blocking_only(calls, rank, size, observed):
        return problem
    sent, received = messages(calls)
    if sent != [partner] or len(received) != 1 or received[0] not in (partner, None):
        to = ", ".join(str(p) for p in sent) or "no rank"
        frm = ", ".join("any source" if p is None else str(p) for p in received) or "no rank"
        return (f"sent to {to} and received from {frm}: a swap is one send to the partner, "
                f"rank {partner}, and one receive from it")
    return None


SWAP_WITH_PARTNER = Exercise(
    "swap_with_partner", _swap_args, _swap_expected, _swap_means,
    "blocking send and recv only, one message each way with the partner, and no call on a "
    "rank without a partner", min_size=2,
    extra={"lesson_names": LESSON_NAMES})


def shift_input(rank: int, seed: int = 0) -> torch.Tensor:
    """The tensor rank `rank` starts with in notebook 01's shift exercise."""
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    value = torch.arange(3.0) + 10 * rank + torch.randint(0, 5, (1,), generator=gen).float()
    return value.reshape(layout(seed, 3))


def _shift_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (shift_input(rank, seed).to(device),)


def _shift_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return shift_input((rank - 1) % size, seed)


def _shift_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    return posted_together(calls, rank, size, observed) or ring_neighbours(calls, rank, size)


SHIFT_RIGHT = Exercise(
    "shift_right", _shift_args, _shift_expected, _shift_means,
    "point-to-point only, to the right neighbour and from the left, in a form that cannot "
    "deadlock", min_size=2, extra={"lesson_names": LESSON_NAMES})


def ring_value(rank: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(-50, 50, (3,), generator=gen).float().reshape(layout(seed, 3))


def _ring_sum_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (ring_value(rank, seed).to(device),)


def _ring_sum_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return sum(ring_value(r, seed) for r in range(size))


def _ring_sum_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    return (posted_together(calls, rank, size, observed)
            or ring_neighbours(calls, rank, size, count=size - 1))


RING_SUM = Exercise("ring_sum", _ring_sum_args, _ring_sum_expected, _ring_sum_means,
                    "point-to-point only, around the ring in world_size - 1 steps", min_size=2,
                    extra={"lesson_names": LESSON_NAMES})
