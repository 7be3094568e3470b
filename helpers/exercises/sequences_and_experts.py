"""The exercises of notebook 10 (sequences and experts): their inputs, right answers and rules."""

from __future__ import annotations

import math
from typing import Any

import torch

from .core import Calls, Exercise
from .means import no_communication, numel, ops, point_to_point_only
from .point_to_point import messages


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _sent_and_received(calls: Calls) -> tuple[int, int]:
    """How many numbers the point-to-point calls sent and received, batches included."""
    sent = received = 0
    for c in calls:
        if c["op"] == "batch_isend_irecv":
            for op, _, shape in c.get("parts") or ():
                if op == "isend":
                    sent += math.prod(shape)
                else:
                    received += math.prod(shape)
        elif c["kind"] == "p2p" and c["shapes"]:
            if c["op"] in ("send", "isend"):
                sent += numel(c["shapes"][0])
            else:
                received += numel(c["shapes"][0])
    return sent, received


# ---- exercise 1: combine every rank's partial attention result ----------------------------
def _partial_inputs(rank: int, size: int, seed: int) -> list[torch.Tensor]:
    """Rank r's out and lse for the same queries over its own keys: large log-sum-exps on some
    rows (exp overflows float32 above about 88), -inf on some ranks' rows (no key seen there),
    never on every rank's."""
    g = _generator(seed)
    b, heads, rows, width = 1 + seed % 2, 1 + seed % 3, 4 + seed % 5, 2 + seed % 3
    outs = torch.randn(size, b, heads, rows, width, generator=g)
    lses = torch.randn(size, b, heads, rows, generator=g) * 3
    size_of = torch.rand(b, heads, rows, generator=g)  # large: above exp's float32 limit (88);
    lses = torch.where(size_of < 0.5, lses * 20 + 120, lses)  # huge: above float64's (709)
    lses = torch.where(size_of > 0.8, (lses * 20 + 900).clamp(720, 1000), lses)
    blind = torch.rand(size, b, heads, rows, generator=g) < 0.4  # saw no key on that rank
    seen_somewhere = torch.randint(0, size, (b, heads, rows), generator=g)
    blind.scatter_(0, seen_somewhere.unsqueeze(0), False)
    blind[..., 0] = True  # row 0: the last rank alone saw keys; row 1: rank 0 alone; row 2: all
    blind[-1, ..., 0] = False
    blind[..., 1] = True
    blind[0, ..., 1] = False
    blind[..., 2] = False
    lses.masked_fill_(blind, float("-inf"))
    outs.masked_fill_(blind.unsqueeze(-1), 0.0)
    return [outs, lses]


def _combine_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    outs, lses = _partial_inputs(rank, size, seed)
    return outs[rank].to(device), lses[rank].to(device)


def _combine_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    outs, lses = (t.double() for t in _partial_inputs(rank, size, seed))
    weights = torch.softmax(lses, dim=0)  # exp(lse_r - logsumexp over the ranks)
    return (weights.unsqueeze(-1) * outs).sum(0).float()


def _combine_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if p2p := ops(calls, "p2p"):
        return f"called {sorted(set(p2p))}: collectives only, please"
    if size > 1 and not ops(calls, "collective"):
        return "made no collective call: the other ranks' results must come from them"
    return None


# the tolerance: a right answer may round the merged log-sum-exp to float32, whose spacing is
# 2**-14 (6.1e-5) for |lse| in 512..1024 (the huge rows are at most 1000), so each weight
# exp(lse_r - LSE) may be off by up to about 3e-5 relative; the outputs are below 5 in size:
# 1.5e-4, doubled for the sum's own rounding. Wrong answers are off by O(1).
COMBINE_PARTIALS = Exercise(
    "combine_partials", _combine_args, _combine_expected, _combine_means,
    "collectives only, inputs left as they were", cases=2, atol=3e-4)


# ---- exercise 2: ring attention, without a mask -------------------------------------------
def _ring_setup(size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every rank's q (its own number of rows), and every rank's k and v (L_k rows each)."""
    g = _generator(seed)
    b, heads, width, keys = 1 + seed % 2, 1 + seed % 3, 2 + seed % 3, 1 + seed % 4
    queries = [2 + (seed + 3 * r) % 4 for r in range(size)]
    q = [torch.randn(b, heads, n, width, generator=g) for n in queries]
    k = torch.randn(size, b, heads, keys, width, generator=g)
    v = torch.randn(size, b, heads, keys, width, generator=g)
    return q, k, v


def _ring_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    q, k, v = _ring_setup(size, seed)
    return q[rank].to(device), k[rank].to(device), v[rank].to(device)


def _ring_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    q, k, v = _ring_setup(size, seed)
    keys, values = (torch.cat(list(t.double()), dim=2) for t in (k, v))  # every rank's, in order
    scores = q[rank].double() @ keys.transpose(-2, -1) * q[rank].shape[-1] ** -0.5
    return (scores.softmax(-1) @ values).float()


def _ring_observed(args: tuple, returned: Any) -> dict[str, Any]:
    return {"numbers": args[1].numel() + args[2].numel()}


def _ring_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """Point-to-point only, right neighbour out and left in, (size - 1) x (k and v) numbers."""
    if size == 1:
        return no_communication(calls, rank, size, observed) and (
            "one rank alone holds every key already: it sends and receives nothing")
    if problem := point_to_point_only(calls, rank, size, observed):
        return problem
    right, left = (rank + 1) % size, (rank - 1) % size
    sent, received = messages(calls)
    if wrong := sorted({str(p) for p in sent if p != right}):
        return f"sent to rank(s) {', '.join(wrong)}: a ring sends only to the right, rank {right}"
    if wrong := sorted({"any source" if p is None else str(p) for p in received if p != left}):
        return (f"received from {', '.join(wrong)}: a ring receives only from the left, "
                f"rank {left}")
    numbers, want = _sent_and_received(calls), (size - 1) * observed["numbers"]
    if numbers != (want, want):
        return (f"sent {numbers[0]} and received {numbers[1]} numbers: each rank's k and v go "
                f"around the ring once, {size - 1} steps of {observed['numbers']} numbers "
                f"({want} each way)")
    return None


RING_ATTENTION = Exercise(
    "ring_attention", _ring_args, _ring_expected, _ring_means,
    "point-to-point only: k and v to the right and from the left, world_size - 1 times",
    observe=_ring_observed, cases=2, atol=1e-5, alone=True)


# ---- exercise 3: send the tokens to their experts -----------------------------------------
def _dispatch_setup(size: int, seed: int) -> tuple[int, list[torch.Tensor], list[torch.Tensor]]:
    """experts_per_rank, and every rank's tokens and experts; one expert never chosen (when
    there are two or more), and the number of tokens differing from rank to rank."""
    g = _generator(seed)
    per_rank, d = 1 + seed % 3, 2 + seed % 3
    experts = per_rank * size
    unused = int(torch.randint(0, experts, (1,), generator=g))
    tokens, chosen = [], []
    for r in range(size):
        count = 12 + (seed + 5 * r) % 29  # above 16 rows: an unstable sort shows
        tokens.append(torch.randn(count, d, generator=g))
        pick = torch.randint(0, max(experts - 1, 1), (count,), generator=g)
        chosen.append(pick + (pick >= unused).long() if experts > 1 else pick)
    return per_rank, tokens, chosen


def _dispatch_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    per_rank, tokens, chosen = _dispatch_setup(size, seed)
    return tokens[rank].to(device), chosen[rank].to(device), per_rank


def _dispatch_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    per_rank, tokens, chosen = _dispatch_setup(size, seed)
    mine = range(rank * per_rank, (rank + 1) * per_rank)
    return torch.cat([tokens[s][chosen[s] == e] for e in mine for s in range(size)])


def _dispatch_observed(args: tuple, returned: Any) -> dict[str, Any]:
    return {"tokens": args[0].numel(), "per_rank": args[2]}


def _dispatch_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """Two all_to_all_single: one number per expert, then each token once."""
    if p2p := ops(calls, "p2p"):
        return f"called {sorted(set(p2p))}: two all_to_all_single calls and nothing else, please"
    made = ops(calls, "collective")
    if made != ["all_to_all_single", "all_to_all_single"]:
        return (f"made the collective calls {made}: two all_to_all_single, the counts first, "
                "then the rows")
    counts, rows = (numel(c["shapes"][1]) if len(c["shapes"]) > 1 else None for c in calls)
    if counts != observed["per_rank"] * size:
        return (f"the first all_to_all_single sent {counts} numbers: one per expert, "
                f"{observed['per_rank'] * size} here")
    if rows != observed["tokens"]:
        return (f"the second all_to_all_single sent {rows} numbers: each of this rank's tokens "
                f"once, {observed['tokens']} numbers here")
    return None


DISPATCH_TO_EXPERTS = Exercise(
    "dispatch", _dispatch_args, _dispatch_expected, _dispatch_means,
    "two all_to_all_single calls: the counts per expert, then each token once",
    observe=_dispatch_observed, cases=2)
