"""The exercises of notebook 06 (debugging hangs):
their inputs, right answers and rules."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from .core import Calls, Exercise, judge_cases, no_args
from .means import (
    blocking_only,
    ops,
)


def _left_expected(rank: int, size: int, seed: int) -> float:
    return float((rank - 1) % size)


RING_EXCHANGE = Exercise("ring_exchange", no_args, _left_expected, blocking_only,
                         "blocking send and recv only, no deadlock", min_size=2, timeout=4.0)


def _skip_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    bad = (seed // 2) % size if seed % 2 else None  # odd seeds: one rank has a bad batch
    return (rank != bad,)


def _skip_expected(rank: int, size: int, seed: int) -> float | None:
    return None if seed % 2 else float(size)


def _skip_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if p2p := ops(calls, "p2p"):
        return f"called {sorted(set(p2p))}: collectives only, please"
    return None


SKIP_TOGETHER = Exercise("skip_together", _skip_args, _skip_expected, _skip_means,
                         "every rank skips, or none", cases=4, timeout=4.0)


def planted_traces(seed: int, size: int) -> tuple[dict[int, list[dict[str, Any]]], Any]:
    """Call records of `size` ranks in which one rank skipped or changed one collective, and
    the right answer for them: (sequence number, sorted list of the ranks that differ from
    what most ranks did). A changed call needs 3 ranks or more to have a majority."""
    gen = random.Random(seed)
    ops = [gen.choice(["all_reduce", "broadcast", "all_gather"]) for _ in range(gen.randint(3, 7))]
    bad_rank, bad_seq = gen.randrange(size), gen.randrange(len(ops))
    how = gen.choice(["skipped", "other op", "other shape"]) if size >= 3 else "skipped"
    traces = {}
    for r in range(size):
        entries = []
        for seq, op in enumerate(ops):
            shapes = [[4]]
            if r == bad_rank and seq == bad_seq:
                if how == "skipped":
                    break
                if how == "other op":
                    op = "barrier" if op != "barrier" else "all_reduce"
                else:
                    shapes = [[40]]
            entries.append({"op": op, "kind": "collective", "seq": seq, "group": "world",
                            "shapes": shapes, "state": "done"})
        traces[r] = entries
    return traces, (bad_seq, [bad_rank])


def check_first_mismatch(first_mismatch: Callable[[dict], Any], trials: int = 30) -> None:
    """Notebook 06's exercise runs in the notebook: try the learner's function on planted
    records of 2 to 8 ranks, and on records that agree (the answer is then None)."""
    cases = []
    for seed in range(trials):
        size = 2 + seed % 7
        traces, right = planted_traces(seed, size)
        if seed % 5 == 4:  # every rank made the same calls
            traces, right = {r: traces[(right[1][0] + 1) % size] for r in range(size)}, None
        cases.append((f"{size} ranks, records #{seed}", (traces,), right))

    def in_order(traces: dict) -> Any:  # the ranks may come in any order
        got = first_mismatch(traces)
        if isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], list):
            got = (got[0], sorted(got[1]))
        return got

    judge_cases("first_mismatch", in_order, cases, "planted records of 2 to 8 ranks")
