"""The exercises of notebook 04 (DistributedDataParallel):
their inputs, right answers and rules."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..data import digits, mlp
from .core import Calls, Exercise
from .means import no_communication


# ---- exercise 3: evaluate on every rank, each rank its share ------------------------------
class Counting(nn.Module):
    """A model that counts the rows it is asked to classify (for the means rule)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model, self.rows = model, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += len(x)
        return self.model(x)


def _accuracy_data(seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    _, _, x, y = digits()
    n = (79, 83, 89, 97, 101)[seed % 5]  # a prime: never a multiple of the world size, so
    return x[:n], y[:n], seed % 1000     # DistributedSampler pads, and shares differ in size


def _accuracy_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    x, y, model_seed = _accuracy_data(seed)
    return Counting(mlp(seed=model_seed).to(device)), x.to(device), y.to(device)


def _rows_seen(args: tuple, returned: Any) -> dict[str, int]:
    return {"rows": args[0].rows, "samples": len(args[1])}


def _accuracy_expected(rank: int, size: int, seed: int) -> float:
    x, y, model_seed = _accuracy_data(seed)
    with torch.no_grad():
        return (mlp(seed=model_seed)(x).argmax(dim=1) == y).float().mean().item()


def _accuracy_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """Each rank classifies about its share of the samples (one more, for a padded share); how
    the counts are combined is the learner's choice."""
    share = math.ceil(observed["samples"] / size) + 1
    if observed["rows"] > share:
        return (f"evaluated {observed['rows']} samples: each rank evaluates only its share (about "
                f"1/{size} of the {observed['samples']})")
    return None


DISTRIBUTED_ACCURACY = Exercise(
    "distributed_accuracy", _accuracy_args, _accuracy_expected, _accuracy_means,
    "each rank evaluates only its share", observe=_rows_seen, atol=1e-6, cases=2)


# ---- exercise 2: accumulate micro-batches, one all-reduce per step ------------------------
def _accumulate_setup(seed: int) -> tuple[int, int, float]:
    return 3 + seed % 2, 4 + seed % 3, 0.3  # micro-batches, batch per micro-batch, lr


def _micro_batches(rank: int, size: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y, _, _ = digits()
    k, b, _ = _accumulate_setup(seed)
    start = (seed % 200) + rank * k * b
    return [(x[start + i * b:start + (i + 1) * b], y[start + i * b:start + (i + 1) * b])
            for i in range(k)]


def _accumulate_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    net = mlp(hidden=16, seed=seed % 1000).to(device)
    passes: list[tuple[str, int]] = []  # ("forward", rows) and ("backward", rows), in order

    def forwarded(module, inputs, output):  # a forward hook; and one on the output's gradient
        if output.requires_grad:
            passes.append(("forward", len(inputs[0])))
            output.register_hook(lambda grad: passes.append(("backward", len(grad))))

    net.register_forward_hook(forwarded)
    model = DDP(net, process_group=group, device_ids=[device] if device.type == "cuda" else None)
    reductions = []

    def counted(state, bucket):  # no annotations: DDP checks them, and strings fail its check
        if bucket.index() == 0:  # a backward's first bucket: one all-reduce round, any buckets
            reductions.append(1)
        return allreduce_hook(state, bucket)

    model.register_comm_hook(group, counted)
    model.reductions, model.passes = reductions, passes
    for p in model.parameters():  # gradients left over from an earlier step
        p.grad = torch.randn_like(p)
    opt = torch.optim.SGD(model.parameters(), lr=_accumulate_setup(seed)[2])
    batches = [(xb.to(device), yb.to(device)) for xb, yb in _micro_batches(rank, size, seed)]
    return model, opt, batches


def _ddp_parameters(args: tuple, returned: Any) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in args[0].module.parameters()]).cpu()


def _accumulate_observed(args: tuple, returned: Any) -> dict[str, Any]:
    model, _, batches = args
    return {"reductions": len(model.reductions), "passes": list(model.passes),
            "rows": max(len(xb) for xb, _ in batches)}


def _accumulate_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    _, _, lr = _accumulate_setup(seed)
    model = mlp(hidden=16, seed=seed % 1000)
    xs = torch.cat([xb for r in range(size) for xb, _ in _micro_batches(r, size, seed)])
    ys = torch.cat([yb for r in range(size) for _, yb in _micro_batches(r, size, seed)])
    F.cross_entropy(model(xs), ys).backward()
    with torch.no_grad():
        return torch.cat([(p - lr * p.grad).reshape(-1) for p in model.parameters()])


def _accumulate_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """One micro-batch at a time (its forward, then its backward), and one all-reduce round."""
    rows, passes = observed["rows"], observed["passes"]
    if big := [n for kind, n in passes if kind == "forward" and n > rows]:
        return (f"ran a forward pass of {max(big)} rows: one micro-batch ({rows} rows) at a "
                "time, please")
    kinds = [kind for kind, _ in passes]
    if kinds != ["forward", "backward"] * (len(kinds) // 2):
        return ("ran the forward passes of several micro-batches before their backward: one "
                "micro-batch at a time, please (its forward, then its backward), so that only "
                "one micro-batch's activations are held")
    if observed["reductions"] != 1:
        return (f"DDP averaged the gradients {observed['reductions']} times: once per optimizer "
                "step, please (no_sync for all micro-batches but the last)")
    return None


ACCUMULATE = Exercise(
    "accumulate", _accumulate_args, _accumulate_expected, _accumulate_means,
    "one micro-batch at a time, one all-reduce per optimizer step", collect=_ddp_parameters,
    observe=_accumulate_observed, atol=1e-5)


# ---- exercise 1: DistributedSampler by hand --------------------------------------------------
_samplers_made = [0]  # DistributedSampler objects made on this rank since the inputs were given


def _count_samplers() -> None:
    """Count every DistributedSampler made from now on (until _stop_counting): the exercise
    asks for the shard without one."""
    from torch.utils.data.distributed import DistributedSampler

    _samplers_made[0] = 0
    if getattr(DistributedSampler.__init__, "counted", None) is not None:
        return
    original = DistributedSampler.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        _samplers_made[0] += 1
        original(self, *args, **kwargs)

    counted.counted = original  # type: ignore[attr-defined]
    DistributedSampler.__init__ = counted  # type: ignore[method-assign]


def _stop_counting(rank: int, seed: int) -> None:
    from torch.utils.data.distributed import DistributedSampler

    original = getattr(DistributedSampler.__init__, "counted", None)
    if original is not None:
        DistributedSampler.__init__ = original  # type: ignore[method-assign]


def _shard_setup(size: int, seed: int) -> tuple[int, int]:
    """(samples, epoch). One case in two has fewer samples than ranks, so that the padding
    repeats the shuffled indices more than once where the world size allows it."""
    n = max(1, (size - 1) // 2) if seed % 4 in (1, 2) else 50 + seed % 41
    return n, seed % 7


def _shard_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    _count_samplers()
    return _shard_setup(size, seed)


def _shard_expected(rank: int, size: int, seed: int) -> list[int]:
    from torch.utils.data import DistributedSampler

    n, epoch = _shard_setup(size, seed)
    sampler = DistributedSampler(range(n), num_replicas=size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return list(sampler)


def _samplers_used(args: tuple, returned: Any) -> int:
    return _samplers_made[0]


def _shard_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if observed:
        return "built the shard with DistributedSampler: by hand, please (without it)"
    return no_communication(calls, rank, size, observed)


MY_SHARD = Exercise("my_shard", _shard_args, _shard_expected, _shard_means,
                    "no DistributedSampler, no communication", observe=_samplers_used, cases=2,
                    cleanup=_stop_counting)
