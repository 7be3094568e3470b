"""The exercises of notebook 08 (sharding): their inputs, right answers and rules."""

from __future__ import annotations

import importlib
from typing import Any

import torch

from ..sharding import padded_shard
from .core import Calls, Exercise
from .means import close, collectives_only, no_communication, numel, ops, sent_flat


def _length(seed: int, size: int) -> int:
    """A length for one case at one world size, of one of three kinds by seed % 3: a multiple
    of `size`, a multiple plus a remainder, or shorter than `size` (the texts promise "any
    length", "shorter than the number of ranks, too"; a size of 1 takes the first kind).
    check() draws a learner's 3 cases as 6b, 6b+1, 6b+2 and the tests' as s, s+2, s+4, and the
    run on one rank fewer takes seed + 1: three seeds in a row, or three apart by 2, always
    leave all three remainders mod 3. So every check meets every kind at both sizes, and every
    wrong padding (none, n // size + 1, rounded down) fails, whatever the seed
    (tests/test_exercises.py)."""
    g = torch.Generator().manual_seed(seed)
    kind = 0 if size == 1 else seed % 3
    if kind == 2:
        return int(torch.randint(1, size, (1,), generator=g))
    k = int(torch.randint(1, 9, (1,), generator=g))
    return size * k + (int(torch.randint(1, size, (1,), generator=g)) if kind == 1 else 0)


def _flat(seed: int, size: int) -> torch.Tensor:
    """The same irregular vector on every rank (no zeros in it, so padding shows)."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(_length(seed, size), generator=g) + 0.5


# the notebook's globals that would solve an exercise for the learner (padded_shard is
# exercise 1), or are right only at the full size (n and padded of its steps 3 and 4)
LESSON_NAMES = ("padded_shard", "shard_size", "n", "padded", "padded3", "numel")


def _unchanged(before: torch.Tensor, after: torch.Tensor) -> bool:
    return after.shape == before.shape and torch.equal(after, before)


# ---- exercise 1: my piece of a padded flat vector ----------------------------------------
def _piece_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (_flat(seed, size).to(device),)


def _piece_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return padded_shard(_flat(seed, size), rank, size)


_made: list[torch.Tensor] = []  # the input as it was made, on this rank (for the observer)


_used_helper = [0]  # calls of helpers.sharding.padded_shard during the answer, on this rank


def _counted(*args: Any, **kwargs: Any) -> Any:
    """helpers.sharding.padded_shard, counted, while a check of my_piece runs."""
    _used_helper[0] += 1
    return padded_shard(*args, **kwargs)


def _piece_args_kept(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    _made[:] = [_flat(seed, size)]
    _used_helper[0] = 0
    importlib.import_module("helpers.sharding").padded_shard = _counted
    return _piece_args(rank, size, device, group, seed)


def _piece_cleanup(rank: int, seed: int) -> None:
    """The module as the lesson left it."""
    importlib.import_module("helpers.sharding").padded_shard = padded_shard


def _piece_observed(args: tuple, returned: Any) -> dict[str, bool]:
    return {"kept": _unchanged(_made[0], args[0].cpu()), "helper": _used_helper[0] > 0,
            "graph": isinstance(returned, torch.Tensor) and returned.requires_grad}


def _piece_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if not observed["kept"]:
        return "changed flat: leave the input as it was (pad a copy)"
    if observed["helper"]:
        return "called helpers.sharding.padded_shard, this very function: write it yourself"
    if observed["graph"]:
        return ("returned a tensor that requires grad (flat does not): make the padding "
                "without requires_grad")
    return no_communication(calls, rank, size, observed)


MY_PIECE = Exercise(
    "my_piece", _piece_args_kept, _piece_expected, _piece_means,
    "padded with zeros at the end, every piece the same length, no communication",
    observe=_piece_observed, cases=3, atol=0.0, extra={"lesson_names": LESSON_NAMES},
    cleanup=_piece_cleanup)


# ---- exercise 2: the global gradient norm across shards ----------------------------------
def _norm_shards(size: int, seed: int) -> list[torch.Tensor]:
    """Every rank's shard of one gradient: equal lengths, the last one padded with zeros."""
    g = torch.Generator().manual_seed(seed)
    whole = torch.randn(_length(seed, size) + 3, generator=g) * (1 + seed % 5)
    return [padded_shard(whole, r, size) for r in range(size)]


_norm_made: list[Any] = []  # every rank's shard and this rank, as they were made


def _norm_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    shards = _norm_shards(size, seed)
    _made[:] = [shards[rank]]
    _norm_made[:] = [shards, rank]
    return (_made[0].clone().to(device),)


def _norm_collect(args: tuple, returned: Any) -> Any:
    """The value, or what is wrong with it where a usual mistake explains it."""
    shards, rank = _norm_made
    if not isinstance(returned, float) or len(shards) == 1:
        return returned
    norms = [shard.double().norm().item() for shard in shards]
    whole = sum(n * n for n in norms) ** 0.5
    if abs(returned - whole) <= 1e-4 * max(1.0, whole):
        return returned
    named = {norms[rank]: "this rank's shard's norm only: all-reduce the squares of every "
                          "shard",
             sum(norms): "the sum of the shards' norms: norms do not add; add their squares, "
                         "then take the square root",
             whole * whole: "the sum of the squares: take its square root"}
    for value, fault in named.items():
        if abs(returned - value) <= 1e-4 * max(1.0, abs(value)):
            return fault
    return returned


def _norm_expected(rank: int, size: int, seed: int) -> float:
    return torch.cat(_norm_shards(size, seed)).double().norm().item()


def _norm_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if not observed["kept"]:
        return "changed shard: leave it as it was (square a copy)"
    if p2p := ops(calls, "p2p"):
        return f"called {sorted(set(p2p))}: one all_reduce, no point-to-point call, please"
    collectives = ops(calls, "collective")
    if collectives != ["all_reduce"]:
        return (f"made the collective calls {collectives}: exactly one all_reduce, of this "
                "rank's sum of squares, please (it moves one number, not the gradient)")
    if (n := numel(list(calls[0]["shapes"]))) > 1:
        return (f"all-reduced {n} numbers: one number per rank is enough (this rank's sum of "
                "squares)")
    return None


GLOBAL_NORM = Exercise(
    "global_norm", _norm_args, _norm_expected, _norm_means,
    "one all_reduce of one number per rank", collect=_norm_collect, observe=_piece_observed,
    cases=2, atol=1e-4)


# ---- exercise 3: a ZeRO-2 SGD step on a flat parameter vector ----------------------------
def _step_setup(size: int, seed: int) -> tuple[torch.Tensor, list[torch.Tensor], float]:
    g = torch.Generator().manual_seed(seed)
    n = _length(seed, size)
    params = torch.randn(n, generator=g)
    grads = [torch.randn(n, generator=g) for _ in range(size)]
    return params, grads, 0.1 * (1 + seed % 3)


def _step_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    params, grads, lr = _step_setup(size, seed)
    return params.to(device), grads[rank].to(device), lr


def _step_collect(args: tuple, returned: Any) -> Any:
    if returned is not None:
        return "a value returned: update params in place and return None"
    params, grads, lr = _step_made
    if _unchanged(params, args[0].cpu()):
        return ("params unchanged: write the result into it in place (params.copy_(...)); "
                "assigning to the name params does not change the caller's tensor")
    summed = params - lr * torch.stack(grads).sum(dim=0)
    if len(grads) > 1 and torch.allclose(args[0].cpu(), summed, atol=1e-5):
        return "params - lr * (the sum of the gradients): average them (divide by world_size)"
    return args[0]


def _step_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    params, grads, lr = _step_setup(size, seed)
    return params - lr * torch.stack(grads).mean(dim=0)


def _step_observed(args: tuple, returned: Any) -> dict[str, Any]:
    params, grads, lr = _step_made
    mine = grads[_step_rank[0]]
    return {"grad kept": _unchanged(mine, args[1].cpu()), "numel": args[0].numel(),
            "grad": mine, "updated": params - lr * torch.stack(grads).mean(dim=0)}


def _payload_problem(scattered: dict[str, Any], gathered: dict[str, Any], rank: int,
                     size: int, observed: Any) -> str | None:
    """What the reduce-scatter and the all-gather carried: this rank's gradient (any scale, as
    dividing by world_size first is right), padded with zeros; then its updated shard."""
    n, shard = observed["numel"], -(-observed["numel"] // size)
    sent = sent_flat(scattered.get("sent"))
    if sent is not None and sent.numel() == shard * size:
        grad = observed["grad"].double()
        body, pad = sent[:n].double(), sent[n:]
        scale = (body @ grad).item() / max((grad @ grad).item(), 1e-30)
        if not close(body, scale * grad) or scale == 0:
            return ("reduce-scattered something other than this rank's gradient (padded): the "
                    "reduce-scatter carries the gradient, so that each rank gets its shard of "
                    "the sum")
        if pad.numel() and bool(pad.ne(0).any()):
            return (f"padded the gradient with {pad.tolist()}, not zeros: pad it with zeros "
                    "(a padding that is not zero is summed into the last shard)")
    sent = sent_flat(gathered.get("sent"))
    mine = observed["updated"][rank * shard:min(n, (rank + 1) * shard)]
    if sent is not None and sent.numel() == shard and not close(sent[:mine.numel()], mine):
        return ("all-gathered something other than this rank's updated shard of the parameters "
                "(its averaged gradient?): update your shard first, then all-gather the "
                "updated shards, so that the gradient never travels whole")
    return None


_step_made: list[Any] = []  # params, every rank's gradient and lr, as they were made
_step_rank: list[int] = [0]


def _step_args_kept(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    _step_made[:] = _step_setup(size, seed)
    _step_rank[0] = rank
    return _step_args(rank, size, device, group, seed)


GATHERS = ("all_gather_single", "all_gather_into_tensor", "all_gather")
SCATTERS = ("reduce_scatter_single", "reduce_scatter_tensor", "reduce_scatter")


def _step_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if not observed["grad kept"]:
        return "changed grad: leave this rank's gradient as it was (work on a padded copy)"
    if problem := collectives_only(calls, rank, size, observed):
        return problem
    made = ops(calls, "collective")
    if "all_reduce" in made:
        return ("called all_reduce: reduce-scatter the gradient instead (each rank needs the "
                "average of its own shard only; on NCCL half the traffic of an all-reduce, while "
                "on gloo the reduce-scatter is itself an all-reduce: the ZeRO-2 pattern is what "
                "is asked)")
    scatters = [op for op in made if op in SCATTERS]
    gathers = [op for op in made if op in GATHERS]
    if len(scatters) != 1 or len(gathers) != 1 or len(made) != 2:
        return (f"made the collective calls {made}: one reduce-scatter of the gradient, then "
                "one all-gather of the updated shards, please")
    if made.index(scatters[0]) > made.index(gathers[0]):
        return f"made {made}: reduce-scatter first, then all-gather the updated shards"
    n, scattered = observed["numel"], calls[made.index(scatters[0])]
    padded = -(-n // size) * size
    if (got := numel(list(scattered["shapes"]))) != padded + padded // size:
        return (f"reduce-scattered {got} elements in all (input and output), expected "
                f"{padded + padded // size}: pad {n} elements to {padded}, the next multiple "
                f"of {size}, no further")
    gathered = list(calls[made.index(gathers[0])]["shapes"])
    if (sent := numel(gathered[-1:])) != padded // size:  # the input: its last tensor argument
        return (f"all-gathered {sent} numbers from each rank: each rank sends only its updated "
                f"shard of the parameters, {padded // size} numbers (the gradient never travels "
                "whole: the reduce-scatter has summed each rank's shard of it)")
    return _payload_problem(scattered, calls[made.index(gathers[0])], rank, size, observed)


ZERO_SGD_STEP = Exercise(
    "zero_sgd_step", _step_args_kept, _step_expected, _step_means,
    "one reduce-scatter, then one all-gather, params updated in place",
    collect=_step_collect, observe=_step_observed, cases=3, atol=1e-5,
    extra={"lesson_names": LESSON_NAMES}, writes=(0,))  # params, updated in place

