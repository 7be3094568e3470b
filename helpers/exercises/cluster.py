"""The exercises of notebook 00 (meet your cluster):
their inputs, right answers and rules."""

from __future__ import annotations

import types
from typing import Any

from .core import Calls, Exercise, no_args
from .means import (
    one_collective,
)

# what "count the ranks without asking" rules out: the size, and the list of the group's ranks
FORBIDDEN = ("world_size", "get_world_size", "get_process_group_ranks")


def _size(rank: int, size: int, seed: int) -> int:
    return size


def names_read(fn: Any, namespace: dict[str, Any]) -> set[str]:
    """The global and attribute names the code of fn reads (co_names), with those of the
    functions nested in it and of the notebook's functions it calls by name, transitively."""
    seen: set[int] = set()
    names: set[str] = set()
    pending = [fn.__code__] if isinstance(fn, types.FunctionType) else []
    while pending:
        code = pending.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        names.update(code.co_names)
        pending += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        pending += [value.__code__ for name in code.co_names
                    if isinstance(value := namespace.get(name), types.FunctionType)
                    and value.__globals__ is namespace]
    return names


def _names_of_answer(args: tuple, returned: Any) -> list[str]:
    """On the rank, after the call: which of FORBIDDEN the learner's count_ranks reads."""
    from IPython import get_ipython

    namespace = get_ipython().user_ns
    return sorted(names_read(namespace.get("count_ranks"), namespace) & set(FORBIDDEN))


def _count_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := one_collective(calls, rank, size, observed):
        return problem
    if observed:
        return (f"count_ranks reads {' and '.join(observed)}: that is asking; let the "
                "collective alone count the ranks")
    return None


COUNT_RANKS = Exercise(
    "count_ranks", no_args, _size, _count_means,
    "one collective, and neither world_size nor dist.get_world_size() read",
    observe=_names_of_answer)
