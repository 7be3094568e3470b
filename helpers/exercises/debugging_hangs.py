"""The exercises of notebook 06 (debugging hangs):
their inputs, right answers and rules."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from .core import Calls, Exercise, judge_cases
from .means import blocking_only, ops


# ---- exercise 2: a ring exchange with blocking calls only -----------------------------------
def _token(rank: int, seed: int) -> float:
    """Rank's token: a whole number below 2**24, so a float32 tensor carries it exactly."""
    return float(random.Random(seed * 7919 + rank).randint(1, 999_999))


def _ring_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (_token(rank, seed),)


def _left_token(rank: int, size: int, seed: int) -> float:
    return _token((rank - 1) % size, seed)


def _ring_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """Blocking send and recv only: one send to the right neighbour, one recv that names the
    left neighbour as its source (the text: "received from it")."""
    if problem := blocking_only(calls, rank, size, observed):
        return problem
    right, left = (rank + 1) % size, (rank - 1) % size
    sends = [c["peer"] for c in calls if c["op"] == "send"]
    recvs = [c["peer"] for c in calls if c["op"] == "recv"]
    if sends != [right] or recvs != [left]:
        return (f"sent to {sends} and received from {recvs}: one dist.send to the right "
                f"neighbour (rank {right}) and one dist.recv with src= the left neighbour "
                f"(rank {left}), please")
    return None


RING_EXCHANGE = Exercise("ring_exchange", _ring_args, _left_token, _ring_means,
                         "blocking send to the right and recv from the left, no deadlock",
                         min_size=2, timeout=4.0)


# ---- exercise 1: skip together ----------------------------------------------------------------
def _bad_ranks(size: int, seed: int) -> list[int]:
    """The ranks whose batch is bad in the case `seed`: none, one, or several (up to all), at
    any position. The four cases of a check (seeds 8k..8k+3) cover every kind."""
    gen = random.Random(seed)
    kind = seed % 4
    if kind in (0, 3):  # every batch is fine
        return []
    how_many = 1 if kind == 1 else gen.randint(min(2, size), size)
    return sorted(gen.sample(range(size), how_many))


def _skip_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    import torch

    if torch.device(device).type == "cuda":
        # connect the group's NCCL communicator on every rank first: it is made by the first
        # collective, and that wait has no timeout (pytorch#88103), so a wrong answer in which
        # some ranks only call the all-reduce would hang instead of failing within seconds
        import torch.distributed as dist

        dist.all_reduce(torch.zeros(1, device=device), group=group)
    return (rank not in _bad_ranks(size, seed),)


def _skip_expected(rank: int, size: int, seed: int) -> float | None:
    return None if _bad_ranks(size, seed) else float(size)


def _skipped(args: tuple, returned: Any) -> bool:
    return returned is None


def _skip_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """Collectives only; one to agree, then the all-reduce of ones only if every batch is fine
    (the verdict reaches this rule only with the right value, so None means a skip)."""
    if p2p := ops(calls, "p2p"):
        return f"called {sorted(set(p2p))}: collectives only, please"
    collectives = ops(calls, "collective")
    if observed:  # a rank's batch was bad: the agreement, and nothing else
        if len(collectives) != 1:
            return (f"made {len(collectives)} collective calls {collectives} although a rank's "
                    "batch was bad: agree first (one collective), then skip the all-reduce on "
                    "every rank")
        return None
    if len(collectives) != 2 or collectives[-1] != "all_reduce":
        return (f"made {len(collectives)} collective calls {collectives} with every batch fine: "
                "one to agree, then the all-reduce of ones")
    return None


SKIP_TOGETHER = Exercise("skip_together", _skip_args, _skip_expected, _skip_means,
                         "every rank skips, or none; agreed before the all-reduce",
                         observe=_skipped, cases=4, timeout=4.0)


# ---- exercise 3: the first mismatch, in the notebook ------------------------------------------
KINDS = ("agree", "truncated", "skipped, then went on", "other op", "other shape",
         "two truncated", "two other shapes")
OPS = ("all_reduce", "broadcast", "all_gather")


def _kind_for(kind: str, size: int) -> str:
    """The kind itself where the world size allows it, else the nearest one that needs no
    majority (with 2 ranks a changed call has none)."""
    if size < 3 and kind not in ("agree", "truncated"):
        return "truncated"
    if size < 5 and kind == "two other shapes":
        return "two truncated"
    return kind


def planted_traces(seed: int, size: int, kind: str | None = None, start: int | None = None,
                   blame_rank_0: bool = False) -> tuple[dict[int, list[dict[str, Any]]], Any]:
    """Call records of `size` ranks, entries shaped as the course's call record makes them
    (``shapes`` a tuple of shape tuples), with a planted fault of the given kind (KINDS; drawn
    from the seed if None), and the right answer: (sequence number, sorted ranks to blame),
    or None where every rank made the same calls. Sequence numbers start at `start` (drawn if
    None: a record may begin above 0, as the flight recorder's does), rank 0 is among the ranks
    to blame if blame_rank_0, and the ranks come in any order."""
    gen = random.Random(seed)
    kind = _kind_for(kind if kind is not None else gen.choice(KINDS), size)
    n = gen.randint(3, 7)
    calls = [(gen.choice(OPS), ((gen.choice((4, 8, 16)),),)) for _ in range(n)]
    if start is None:
        start = 0 if gen.random() < 0.5 else gen.randint(1, 80)
    bad_seq = gen.randrange(n - 1) if kind == "skipped, then went on" else gen.randrange(n)
    culprits = sorted(gen.sample(range(size), 2 if kind.startswith("two") else 1))
    if blame_rank_0 and 0 not in culprits:
        culprits = sorted([0, *culprits[1:]])
    records: dict[int, list[tuple[str, Any]]] = {r: list(calls) for r in range(size)}
    for r in culprits if kind != "agree" else []:
        mine = records[r]
        if kind in ("truncated", "two truncated"):
            del mine[bad_seq:]
        elif kind == "skipped, then went on":
            del mine[bad_seq]
        elif kind == "other op":
            op, shapes = mine[bad_seq]
            mine[bad_seq] = (gen.choice([o for o in OPS + ("barrier",) if o != op]), shapes)
        else:  # another shape
            op, ((length,),) = mine[bad_seq]
            mine[bad_seq] = (op, ((length * 10 + 1,),))
    answer: Any = None
    if kind != "agree":
        first = bad_seq
        if kind == "skipped, then went on":  # the later calls shift down by one: the first
            mine = records[culprits[0]]      # difference is where a shifted call differs
            first = next((j for j in range(bad_seq, n - 1) if mine[j] != calls[j]), n - 1)
        answer = (start + first, culprits)
    order = list(range(size))
    gen.shuffle(order)
    traces = {r: [{"op": op, "kind": "collective", "seq": start + i, "group": "world",
                   "shapes": shapes, "dtype": "float32", "state": "done"}
                  for i, (op, shapes) in enumerate(records[r])] for r in order}
    return traces, answer


def check_first_mismatch(first_mismatch: Callable[[dict], Any], trials: int = 30,
                         seed: int | None = None) -> None:
    """Notebook 06's exercise runs in the notebook: try the learner's function on records of
    2 to 8 ranks drawn afresh for every check, every kind of fault (KINDS) among them."""
    base = random.randrange(2**30) if seed is None else seed
    gen = random.Random(base)
    cases = []
    for i in range(trials):
        size = 2 + i % 7
        traces, right = planted_traces(base + i, size, KINDS[i % len(KINDS)],
                                       start=0 if i % 2 else gen.randint(1, 80),
                                       blame_rank_0=i % 5 == 0)
        cases.append((f"{size} ranks, records #{i}", (traces,), right))

    def in_order(traces: dict) -> Any:  # the ranks may come in any order
        got = first_mismatch(traces)
        if isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], list):
            got = (got[0], sorted(got[1]))
        return got

    judge_cases("first_mismatch", in_order, cases, "sets of call records of 2 to 8 ranks")
