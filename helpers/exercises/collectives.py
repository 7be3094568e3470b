"""The exercises of notebook 02 (collectives):
their inputs, right answers and rules."""

from __future__ import annotations

import math
from typing import Any

import torch

from .core import Calls, Exercise
from .means import (
    one_all_reduce,
    point_to_point_only,
)
from .point_to_point import ring_value

_SENDS = ("send", "isend", "send_object_list")  # the other point-to-point calls receive


def _messages(calls: Calls) -> tuple[list[tuple[Any, Any]], list[tuple[Any, Any]]]:
    """(peer, shape) of every message a rank sent and of every one it received, the parts of
    batch_isend_irecv included; peers are global ranks (a receive from any source: None)."""
    sent: list[tuple[Any, Any]] = []
    received: list[tuple[Any, Any]] = []
    for c in calls:
        if c["kind"] != "p2p":
            continue
        if c["op"] == "batch_isend_irecv":
            for op, peer, shape in c.get("parts") or ():
                (sent if op == "isend" else received).append((peer, tuple(shape)))
        else:
            shape = tuple(c["shapes"][0]) if c.get("shapes") else None
            (sent if c["op"] in _SENDS else received).append((c["peer"], shape))
    return sent, received


# ---- exercise 1: the mean of all ranks, with one all_reduce, leaving x as it was ----------
_given: dict[str, torch.Tensor] = {}  # a copy of the x last handed to the learner (this rank)


def _mean_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    x = ring_value(rank, seed).to(device)
    _given["x"] = x.clone()
    return (x,)


def _mean_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return sum(ring_value(r, seed) for r in range(size)) / size


def _mean_observe(args: tuple, returned: Any) -> dict[str, bool]:
    before = _given.pop("x", None)
    return {"x_changed": before is not None and not torch.equal(args[0].cpu(), before.cpu())}


def _mean_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := one_all_reduce(calls, rank, size, observed):
        return problem
    if observed and observed.get("x_changed"):
        return ("changed the caller's x: all_reduce works in place, so give it a copy "
                "(x.clone()) and leave x as it was")
    return None


MEAN_OF_ALL = Exercise("mean_of_all", _mean_args, _mean_expected, _mean_means,
                       "one all_reduce, and x left as it was", observe=_mean_observe)


# ---- exercise 2: a ring all-gather, world_size - 1 steps of one chunk each --------------
def chunk_length(size: int, seed: int) -> int:
    """2 to 4 numbers, never the same at two world sizes in a row: a check runs at n ranks
    with a seed, then at n - 1 with the seed + 1, so an answer that assumes one chunk length
    fails one of them (seed + 2 * size moves by 2 - 1 = 1 between the two runs, never by 3)."""
    return 2 + (seed + 2 * size) % 3


def gather_input(rank: int, seed: int = 0, length: int = 2) -> torch.Tensor:
    """The chunk rank `rank` contributes in notebook 02's ring all-gather exercise."""
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    signs = torch.tensor([1.0, -1.0]).repeat(length)[:length]
    return (rank + 1.0) * signs + torch.randint(0, 9, (1,), generator=gen)


def _gather_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (gather_input(rank, seed, chunk_length(size, seed)).to(device),)


def _gather_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return torch.cat([gather_input(r, seed, chunk_length(size, seed)) for r in range(size)])


def _gather_observe(args: tuple, returned: Any) -> dict[str, Any]:
    return {"chunk": tuple(args[0].shape)}


def _ring_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """Point-to-point only; n-1 sends, all to one neighbour, and n-1 receives, all from the
    other (either direction round the ring), each message one chunk."""
    if problem := point_to_point_only(calls, rank, size, observed):
        return problem
    sent, received = _messages(calls)
    right, left = (rank + 1) % size, (rank - 1) % size
    to = {p for p, _ in sent}
    if not to <= {right, left} or len(to) > 1:
        others = sorted(str(p) for p in to - {right, left}) or sorted(str(p) for p in to)
        return (f"sent to rank(s) {', '.join(others)}: around the ring a rank sends only to one "
                f"neighbour (rank {right} on the right, or rank {left} on the left), every step")
    frm = {p for p, _ in received}
    expected_from = left if to == {right} else right
    if to and frm - {expected_from}:
        named = sorted("any source" if p is None else f"rank {p}" for p in frm - {expected_from})
        return (f"received from {', '.join(named)}: around the ring a rank receives only from "
                f"the neighbour on the other side (rank {expected_from})")
    if (len(sent), len(received)) != (size - 1, size - 1):
        return (f"sent {len(sent)} and received {len(received)} messages: with {size} ranks the "
                f"ring takes exactly {size - 1} steps of one send and one receive each")
    chunk = (observed or {}).get("chunk")
    if chunk is not None and (big := [s for _, s in sent + received
                                      if s is not None and math.prod(s) != math.prod(chunk)]):
        return (f"passed messages of shape {list(big[0])}: each step passes one chunk "
                f"(shape {list(chunk)}) to the next rank")
    return None


RING_ALL_GATHER = Exercise("ring_all_gather", _gather_args, _gather_expected, _ring_means,
                           "point-to-point only, around the ring in world_size - 1 steps of "
                           "one chunk", observe=_gather_observe, min_size=2)


# ---- exercise 3: a broadcast along the binomial tree of the text ------------------------
def _tree_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    value = ring_value(0, seed) if rank == 0 else torch.zeros_like(ring_value(0, seed))
    return (value.to(device),)


def _tree_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return ring_value(0, seed)


def tree_parent(rank: int) -> int | None:
    """The rank that sends to `rank` in the tree of exercise 3: rank - 2**floor(log2 rank)."""
    return None if rank == 0 else rank - 2 ** (rank.bit_length() - 1)


def tree_children(rank: int, size: int) -> list[int]:
    """The ranks `rank` sends to in exercise 3's tree: rank + 2**k for every 2**k > rank."""
    k = rank.bit_length()  # the first round in which rank holds the data and sends
    return [rank + 2 ** j for j in range(k, max(k, (size - 1).bit_length()))
            if rank + 2 ** j < size]


def _send_order(calls: Calls) -> list[Any]:
    """The peers a rank sent to, in the order of its calls (the sends of one
    batch_isend_irecv, posted together, in the order of their peers)."""
    order: list[Any] = []
    for c in calls:
        if c["kind"] == "p2p" and c["op"] == "batch_isend_irecv":
            order += sorted(peer for op, peer, _ in c.get("parts") or () if op == "isend")
        elif c["kind"] == "p2p" and c["op"] in _SENDS:
            order.append(c["peer"])
    return order


def _tree_observe(args: tuple, returned: Any) -> dict[str, bool]:
    return {"returned_t": returned is args[0]}


def _tree_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if any(c["kind"] == "collective" for c in calls):
        return "used a collective: point-to-point calls only, please"
    sent, received = _messages(calls)
    rounds = math.ceil(math.log2(size)) if size > 1 else 0
    if len(sent) > rounds:
        return (f"sent {len(sent)} messages: with {size} ranks a tree needs at most {rounds} "
                "rounds, so at most that many sends from any rank")
    parent = tree_parent(rank)
    frm = [p for p, _ in received]
    if parent is None and frm:
        return f"rank 0 received from {frm}: rank 0 holds the data and receives nothing"
    if parent is not None and frm != [parent]:
        named = ", ".join("any source" if p is None else f"rank {p}" for p in frm)
        return (f"received {f'from {named}' if frm else 'nothing'}: in the tree rank {rank} "
                f"receives once, from rank {parent} ({rank} - {rank - parent}), in round "
                f"{(rank - parent).bit_length() - 1}")
    children = tree_children(rank, size)
    if sorted(p for p, _ in sent) != children:
        return (f"sent to {sorted(p for p, _ in sent)}: in the tree rank {rank} sends to "
                f"{children} (rank + 2**k for each round k with 2**k > rank)")
    if (order := _send_order(calls)) != children:
        return (f"sent to {order}, in that order: in the tree rank {rank} sends to {children}, "
                "nearest first, one per round (a far child served first makes the near one, "
                "and its own children, wait a round longer)")
    if observed and not observed.get("returned_t", True):
        return "returned another tensor: fill t itself and return t"
    return None


TREE_BROADCAST = Exercise("tree_broadcast", _tree_args, _tree_expected, _tree_means,
                          "point-to-point only, along the tree, in ceil(log2 n) rounds",
                          observe=_tree_observe, min_size=2, writes=(0,))  # t is filled
