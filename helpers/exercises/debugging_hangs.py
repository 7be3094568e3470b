"""The exercises of notebook 06 (debugging hangs):
their inputs, right answers and rules."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from .core import Calls, Exercise, judge_cases, value_problem
from .means import blocking_only, ops

# ---- torch's defaults: an answer leaves them as it found them -------------------------------
# (helpers.exercises.trial compares the random generators and the environment; these two are
# changed by a learner who wants the float token held exactly: torch.set_default_dtype)
_defaults_before: dict[str, Any] = {}


def _torch_defaults() -> dict[str, Any]:
    import torch

    found = {"torch's default dtype (torch.set_default_dtype)": torch.get_default_dtype()}
    if hasattr(torch, "get_default_device"):
        found["torch's default device (torch.set_default_device)"] = torch.get_default_device()
    return found


def _set_torch_defaults(defaults: dict[str, Any]) -> None:
    """Put back those that differ (only those: a default device set, even to the CPU, costs
    every later tensor a function-mode dispatch, so the CPU is put back as no default)."""
    import torch

    now = _torch_defaults()
    for name, value in defaults.items():
        if now.get(name) == value:
            continue
        if "dtype" in name:
            torch.set_default_dtype(value)
        elif "device" in name:
            torch.set_default_device(None if value == torch.device("cpu") else value)


def _remember_defaults() -> None:
    """On the rank, before the learner's function (from make_args): torch's defaults."""
    _defaults_before.clear()
    _defaults_before.update(_torch_defaults())


def _defaults_changed() -> list[str]:
    """On the rank, after the learner's function: the defaults it changed, each as 'name, now
    value'; they are put back, so that the next run (and the learner's cells) start as before."""
    now = _torch_defaults()
    changed = [f"{name}, now {str(now[name]).removeprefix('torch.')}"
               for name in _defaults_before if now.get(name) != _defaults_before[name]]
    _set_torch_defaults(_defaults_before)
    return changed


def _put_defaults_back(rank: int, seed: int) -> None:
    """After both runs: the defaults as they were, also where the learner's function raised."""
    if _defaults_before:
        _set_torch_defaults(_defaults_before)


def _defaults_problem(name: str, observed: Any) -> str | None:
    changed = (observed or {}).get("defaults_changed")
    if changed:
        return (f"{name} changed {' and '.join(changed)}: leave "
                f"{'it as it was' if len(changed) == 1 else 'them as they were'} (give a tensor "
                "its own dtype= or device= instead)")
    return None


# ---- exercise 2: a ring exchange with blocking calls only -----------------------------------
def _token(rank: int, seed: int) -> float:
    """Rank's token: a whole number below 2**24, so a float32 tensor carries it exactly."""
    return float(random.Random(seed * 7919 + rank).randint(1, 999_999))


def _ring_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    _remember_defaults()
    return (_token(rank, seed),)


def _left_token(rank: int, size: int, seed: int) -> float:
    return _token((rank - 1) % size, seed)


def _ring_observe(args: tuple, returned: Any) -> dict[str, Any]:
    return {"defaults_changed": _defaults_changed()}


def _ring_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """Blocking send and recv only: one send to the right neighbour, one recv that names the
    left neighbour as its source (the text: "received from it"); torch's defaults untouched."""
    if problem := _defaults_problem("ring_exchange", observed):
        return problem
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
                         observe=_ring_observe, min_size=2, cleanup=_put_defaults_back,
                         timeout=4.0, on_device=False)  # CPU tensors, as its text advises


# ---- exercise 1: skip together ----------------------------------------------------------------
def _bad_ranks(size: int, seed: int) -> list[int]:
    """The ranks whose batch is bad in the case `seed`: none, one, or several (up to all), at
    any position. The kind is the seed's Gray code, modulo 4, so that the four cases of a check
    cover every kind whether their seeds are 8k..8k+3 (drawn) or s, s+2, s+4, s+6 (a seed
    given: the tests'), and the run on one rank fewer (seeds + 1) every kind too."""
    gen = random.Random(seed)
    kind = (seed ^ (seed >> 1)) % 4
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
    _remember_defaults()
    return (rank not in _bad_ranks(size, seed),)


def _skip_expected(rank: int, size: int, seed: int) -> float | None:
    return None if _bad_ranks(size, seed) else float(size)


def _skip_observe(args: tuple, returned: Any) -> dict[str, Any]:
    return {"skipped": returned is None, "defaults_changed": _defaults_changed()}


def _skip_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """Collectives only; one to agree, then the all-reduce of ones only if every batch is fine
    (the verdict reaches this rule only with the right value, so None means a skip)."""
    if problem := _defaults_problem("skip_together", observed):
        return problem
    if p2p := ops(calls, "p2p"):
        return f"called {sorted(set(p2p))}: collectives only, please"
    collectives = ops(calls, "collective")
    if observed["skipped"]:  # a rank's batch was bad: the agreement, and nothing else
        if len(collectives) != 1:
            return (f"made {len(collectives)} collective calls {collectives} although a rank's "
                    "batch was bad: agree first (one collective), then skip the all-reduce on "
                    "every rank")
        return None
    if len(collectives) != 2 or collectives[-1] != "all_reduce":
        return (f"made {len(collectives)} collective calls {collectives} with every batch fine: "
                "one to agree, then the all-reduce of ones")
    return None


SKIP_TOGETHER = Exercise("skip_together", _skip_args, _skip_expected,
                         _skip_means, "every rank skips, or none; agreed before the all-reduce",
                         observe=_skip_observe, cases=4, cleanup=_put_defaults_back,
                         timeout=4.0)


# ---- exercise 3: the first mismatch, in the notebook ------------------------------------------
KINDS = ("agree", "truncated", "skipped, then went on", "other op", "other shape",
         "two truncated", "two other shapes", "one truncated, one other op")
OPS = ("all_reduce", "broadcast", "all_gather")


def _kind_for(kind: str, size: int) -> str:
    """The kind itself where the world size allows it, else the nearest one that needs no
    majority (with 2 ranks a changed call has none)."""
    if size < 3 and kind not in ("agree", "truncated"):
        return "truncated"  # (one truncated and one other op need a third that did neither)
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
    both = kind.startswith("two") or kind == "one truncated, one other op"
    culprits = sorted(gen.sample(range(size), 2 if both else 1))
    if blame_rank_0 and 0 not in culprits:
        culprits = sorted([0, *culprits[1:]])
    changed = None  # "one truncated, one other op": the first is to blame, the second differs
    if kind == "one truncated, one other op":
        culprits, changed = culprits[:1], culprits[1]
    records: dict[int, list[tuple[str, Any]]] = {r: list(calls) for r in range(size)}
    for r in culprits if kind != "agree" else []:
        mine = records[r]
        if kind in ("truncated", "two truncated", "one truncated, one other op"):
            del mine[bad_seq:]
        elif kind == "skipped, then went on":
            del mine[bad_seq]
        elif kind == "other op":
            op, shapes = mine[bad_seq]
            mine[bad_seq] = (gen.choice([o for o in OPS + ("barrier",) if o != op]), shapes)
        else:  # another shape
            op, ((length,),) = mine[bad_seq]
            mine[bad_seq] = (op, ((length * 10 + 1,),))
    if changed is not None:  # another call, where the truncated rank made none: not to blame
        op, shapes = calls[bad_seq]
        records[changed][bad_seq] = (gen.choice([o for o in OPS + ("barrier",) if o != op]), shapes)
    answer: Any = None
    if kind != "agree":
        first = bad_seq
        if kind == "skipped, then went on":  # the later calls shift down by one: the first
            mine = records[culprits[0]]      # difference is where a shifted call differs
            first = next((j for j in range(bad_seq, n - 1) if mine[j] != calls[j]), n - 1)
        answer = (start + first, culprits)
    order = list(range(size))
    gen.shuffle(order)
    # as in a real record, each rank's calls also took their own time: an answer that compares
    # whole entries, not the operation and shapes, blames ranks that did nothing wrong (drawn
    # from a generator of its own, so that the records and answers of a seed stay the same)
    clock = random.Random(seed * 7919 + size)
    traces = {r: [{"op": op, "kind": "collective", "seq": start + i, "group": "world",
                   "shapes": shapes, "dtype": "float32", "state": "done",
                   "seconds": round(clock.uniform(1e-5, 0.05), 6)}
                  for i, (op, shapes) in enumerate(records[r])] for r in order}
    return traces, answer


def _mismatch_problem(got: Any, right: Any) -> str | None:
    """value_problem, with a plainer word where only the order of the ranks is wrong (the text
    asks for the sorted list, and the records come with the ranks in any order)."""
    if (isinstance(got, tuple) and isinstance(right, tuple) and len(got) == len(right) == 2
            and isinstance(got[1], list) and got[0] == right[0] and got[1] != right[1]):
        try:
            unsorted = sorted(got[1]) == right[1]
        except TypeError:
            unsorted = False
        if unsorted:
            return (f"({got[0]!r}, {got[1]}): the right ranks, not sorted (the records come "
                    f"with the ranks in any order); expected ({right[0]!r}, {right[1]})")
    return value_problem(got, right)


def check_first_mismatch(first_mismatch: Callable[[dict], Any], trials: int = 30,
                         seed: int | None = None) -> None:
    """Notebook 06's exercise runs in the notebook: try the learner's function on records of
    2 to 8 ranks drawn afresh for every check, every kind of fault (KINDS) among them, each
    kind at several world sizes (every seventh case shifts the sizes by three), the ranks in
    any order; the ranks to blame must come back sorted, as the text asks."""
    base = random.randrange(2**30) if seed is None else seed
    gen = random.Random(base)
    cases, unsorted_shown = [], False
    for i in range(trials):
        size = 2 + (i + 3 * (i // len(KINDS))) % 7
        traces, right = planted_traces(base + i, size, KINDS[i % len(KINDS)],
                                       start=0 if i % 2 else gen.randint(1, 80),
                                       blame_rank_0=i % 5 == 0)
        if right is not None and len(right[1]) > 1 and not unsorted_shown:
            traces = dict(sorted(traces.items(), reverse=True))  # a list made in the records'
            unsorted_shown = True  # order is unsorted here, whatever the draw
        cases.append((f"{size} ranks, records #{i}", (traces,), right))
    judge_cases("first_mismatch", first_mismatch, cases, "sets of call records of 2 to 8 ranks",
                problem=_mismatch_problem)
