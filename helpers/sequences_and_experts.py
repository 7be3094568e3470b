"""Which rank holds which positions of a sequence, and how many tokens an expert takes
(notebook 10: sequence and context parallelism, mixture of experts).

Pure functions of the rank and the world size, so that the layouts the notebook draws and
the checkers use are the same, and can be tested without a cluster (tests/test_sequences.py).
"""

from __future__ import annotations

import math

import torch


def _check(world_size: int, length: int, parts: int) -> None:
    if world_size < 1:
        raise ValueError(f"world_size={world_size}: give a number of ranks from 1 up")
    if length < 1 or length % parts:
        raise ValueError(f"a sequence of {length} positions does not split into {parts} equal "
                         f"chunks: make its length a multiple of {parts}")


def contiguous_positions(rank: int, world_size: int, length: int) -> torch.Tensor:
    """The positions rank holds when the sequence is cut into world_size equal runs, in order
    (sequence parallelism, and ring attention's plain layout)."""
    _check(world_size, length, world_size)
    per_rank = length // world_size
    return torch.arange(rank * per_rank, (rank + 1) * per_rank)


def head_tail_positions(rank: int, world_size: int, length: int) -> torch.Tensor:
    """The positions rank holds when the sequence is cut into 2 x world_size chunks and rank r
    takes chunk r and chunk 2·world_size-1-r: a chunk near the start (few keys before it) with
    one near the end (many), so that causal attention gives every rank the same work."""
    _check(world_size, length, 2 * world_size)
    chunk = length // (2 * world_size)
    tail = 2 * world_size - 1 - rank
    return torch.cat([torch.arange(rank * chunk, (rank + 1) * chunk),
                      torch.arange(tail * chunk, (tail + 1) * chunk)])


def owners(layout: list[torch.Tensor]) -> list[int]:
    """The rank holding each position, from every rank's positions (for a picture); every
    position from 0 up must be held by one rank exactly."""
    held = {p: rank for rank, positions in enumerate(layout) for p in positions.tolist()}
    if len(held) != sum(len(p) for p in layout):
        raise ValueError("a position is held by two ranks")
    if missing := [p for p in range(max(held, default=-1) + 1) if p not in held]:
        raise ValueError(f"position {missing[0]} is held by no rank")
    return [held[p] for p in range(len(held))]


def expert_capacity(tokens: int, k: int, experts: int, factor: float) -> int:
    """How many of one group's token-to-expert assignments an expert takes: tokens x k /
    experts, times the capacity factor, rounded up (Switch Transformer's capacity is tokens /
    experts x factor, with its k = 1; the k and the rounding are notebook 10's choices)."""
    if min(tokens, k, experts) < 1 or factor <= 0:
        raise ValueError(f"tokens={tokens}, k={k}, experts={experts}, factor={factor}: "
                         "give positive numbers")
    return math.ceil(factor * tokens * k / experts)
