"""Rules about the means, read from the record of a rank's calls: point-to-point only, one
collective, no communication, ... (each returns what is wrong, or None).

Introduced in notebook 01, whose exercises ask for point-to-point calls only."""

from __future__ import annotations

import math
from typing import Any

import torch

from .core import Calls


def ops(calls: Calls, kind: str) -> list[str]:
    return [c["op"] for c in calls if c["kind"] == kind]


def _only(calls: Calls, kind: str, other: str, plural: str, one: str) -> str | None:
    """Calls of `kind` only, and at least one of them."""
    if found := ops(calls, other):
        return f"called {sorted(set(found))}: {plural} only, please"
    if not ops(calls, kind):
        return f"made no {one}: the values must come from the other ranks"
    return None


def point_to_point_only(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    return _only(calls, "p2p", "collective", "point-to-point calls", "point-to-point call")


def blocking_only(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := point_to_point_only(calls, rank, size, observed):
        return problem
    if other := sorted({c["op"] for c in calls} - {"send", "recv"}):
        return f"called {other}: blocking dist.send and dist.recv only, please"
    return None


def one_collective(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if p2p := ops(calls, "p2p"):
        return f"called {sorted(set(p2p))}: one collective, no point-to-point call, please"
    collectives = ops(calls, "collective")
    if len(collectives) != 1:
        return f"made {len(collectives)} collective calls {collectives}: exactly one, please"
    return None


def one_all_reduce(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := one_collective(calls, rank, size, observed):
        return problem
    if (op := ops(calls, "collective")[0]) != "all_reduce":
        return f"called {op}: one all_reduce is all it takes (and it moves the least data)"
    return None


def collectives_only(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    return _only(calls, "collective", "p2p", "collectives", "collective call")


def no_communication(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if calls:
        return f"called {sorted({c['op'] for c in calls})}: this needs no communication"
    return None


def numel(shape: Any) -> int:
    if isinstance(shape, list):
        return sum(numel(s) for s in shape)
    return math.prod(shape)


def sent_flat(sent: Any) -> torch.Tensor | None:
    """What a call sent (its entry's "sent", copied as the call was made: a check's payload
    rules), as one flat tensor, the list forms' tensors joined; None if unknown."""
    if isinstance(sent, torch.Tensor):
        return sent.reshape(-1)
    if isinstance(sent, list) and sent and all(isinstance(t, torch.Tensor) for t in sent):
        return torch.cat([t.reshape(-1) for t in sent])
    return None


def close(got: torch.Tensor, want: torch.Tensor, rtol: float = 1e-5) -> bool:
    """Same shape, and equal within 1e-5 plus rtol of the largest expected magnitude."""
    got, want = got.double(), want.double()
    if got.shape != want.shape:
        return False
    if not want.numel():
        return True
    scale = want.abs().max().item()
    return bool((got - want).abs().max() <= 1e-5 + rtol * scale)
