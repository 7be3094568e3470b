"""Rules about the means, read from the record of a rank's calls: point-to-point only, one
collective, no communication, ... (each returns what is wrong, or None).

Introduced in notebook 01, whose exercises ask for point-to-point calls only."""

from __future__ import annotations

import math
from typing import Any

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
