"""The exercises of notebook 03 (gradient averaging by hand):
their inputs, right answers and rules."""

from __future__ import annotations

import random
from typing import Any

import torch
import torch.nn.functional as F

from ..data import digits, mlp
from .core import Calls, Exercise
from .means import (
    collectives_only,
    numel,
)


def _loss_and_count(rank: int, seed: int) -> tuple[float, int]:
    gen = random.Random(seed * 1000 + rank)
    return round(gen.uniform(0.5, 3.0), 3), gen.randint(1, 40)


def _global_mean_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return _loss_and_count(rank, seed)


def _global_mean_expected(rank: int, size: int, seed: int) -> float:
    pairs = [_loss_and_count(r, seed) for r in range(size)]
    return sum(m * c for m, c in pairs) / sum(c for _, c in pairs)


GLOBAL_MEAN = Exercise("global_mean", _global_mean_args, _global_mean_expected,
                       collectives_only, "collectives only", atol=1e-6)


def _weighted_rows(rank: int, size: int, seed: int) -> slice:
    sizes = [4 + (seed + 7 * r) % 13 for r in range(size)]
    start = sum(sizes[:rank])
    return slice(start, start + sizes[rank])


def _weighted_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    x, y, _, _ = digits()
    rows = _weighted_rows(rank, size, seed)
    model = mlp(hidden=16, seed=seed % 1000).to(device)
    F.cross_entropy(model(x[rows].to(device)), y[rows].to(device)).backward()
    model.weights_before = [p.detach().clone() for p in model.parameters()]  # a plain attribute
    return model, rows.stop - rows.start


def _weights_changed(args: tuple, returned: Any) -> str | None:
    """The exercise changes gradients only: say so if a parameter changed (an SGD step...)."""
    model = args[0]
    for (name, p), before in zip(model.named_parameters(), model.weights_before):
        if not torch.equal(p.detach(), before):
            return (f"changed the parameter {name}: leave the weights as they are, only the "
                    "gradients change")
    return None


def _weighted_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    return collectives_only(calls, rank, size, observed) or observed


def _flat_gradient(args: tuple, returned: Any) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in args[0].parameters()]).cpu()


def _weighted_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    x, y, _, _ = digits()
    end = _weighted_rows(size - 1, size, seed).stop
    model = mlp(hidden=16, seed=seed % 1000)
    F.cross_entropy(model(x[:end]), y[:end]).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


WEIGHTED_AVERAGE = Exercise(
    "weighted_average_gradients", _weighted_args, _weighted_expected, _weighted_means,
    "collectives only, weights untouched", collect=_flat_gradient, observe=_weights_changed,
    atol=1e-6)


# exercise 3's model is deep enough that its parameter tensors (2 per layer, 66 in all)
# outnumber the 64 numbers a rank may pass in: a fingerprint per tensor, which grows with the
# model, is caught
SYNC_DEPTH = 32


def _sync_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    model = mlp(hidden=8, depth=SYNC_DEPTH, seed=seed % 1000).to(device)
    case = seed % 4  # 0: in sync; 1-3: one rank differs, in one of three ways
    pick = random.Random(seed)  # which rank differs, and where: any rank, any tensor
    if case and rank == pick.randrange(size):
        params = list(model.parameters())
        p = params[pick.randrange(len(params))]
        with torch.no_grad():
            flat = p.view(-1)
            if case == 1:  # the last bit: the next float32 value up, one ulp away
                flat[:1] = torch.nextafter(flat[:1], torch.full_like(flat[:1], float("inf")))
            elif case == 2:
                flat[0], flat[-1] = flat[-1].item(), flat[0].item()  # same sum, other order
            else:
                flat[0] += 0.5                                 # a plain difference
                flat[-1] -= 0.5                                # ... that a sum barely sees
    return (model,)


def _sync_expected(rank: int, size: int, seed: int) -> bool:
    return seed % 4 == 0 or size == 1  # one rank alone is always in sync with itself


# which recorded tensor argument is what a rank passes in (calltrace records the tensor
# arguments in the order of the signature); a call not named here counts all of them
SENT_ARGUMENT = {"all_reduce": 0, "broadcast": 0, "reduce": 0, "gather": 0, "all_gather": 1,
                 "all_gather_into_tensor": 1, "reduce_scatter": 1, "reduce_scatter_tensor": 1,
                 "all_to_all": 1, "all_to_all_single": 1}
OBJECT_COLLECTIVES = ("all_gather_object", "broadcast_object_list", "gather_object",
                      "scatter_object_list")


def numbers_passed_in(call: dict[str, Any]) -> int:
    """How many numbers a rank passed in to one collective (not what it received)."""
    shapes = call["shapes"]
    if call["op"] == "scatter":  # the root passes in scatter_list; the others, nothing
        return numel(shapes[1]) if len(shapes) > 1 else 0
    if (index := SENT_ARGUMENT.get(call["op"])) is not None and index < len(shapes):
        return numel(shapes[index])
    return sum(numel(s) for s in shapes)


def _sync_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := collectives_only(calls, rank, size, observed):
        return problem
    if objects := sorted({c["op"] for c in calls if c["op"] in OBJECT_COLLECTIVES}):
        return (f"called {objects}: tensor collectives only (an object collective pickles "
                "whatever it is given, the whole model included)")
    sent = sum(numbers_passed_in(c) for c in calls)
    if sent > 64:
        return (f"its collectives carried {sent} numbers from this rank: compare a fingerprint "
                "of a fixed, small size (at most 64 numbers), not the parameters themselves")
    return None


IN_SYNC = Exercise("in_sync", _sync_args, _sync_expected, _sync_means,
                   "tensor collectives of a fixed, small size", cases=4)
