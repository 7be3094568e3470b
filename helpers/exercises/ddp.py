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

_given: dict[str, Any] = {}  # what the learner's function was handed last, on this rank


def _modes(model: nn.Module) -> list[bool]:
    return [m.training for m in model.modules()]


def _parameters(model: nn.Module) -> list[tuple[str, torch.Tensor, bool]]:
    return [(name, p.detach().clone(), p.requires_grad) for name, p in model.named_parameters()]


def _same_tensors(a: list, b: list) -> bool:
    """Two lists of tensors (or of tuples of tensors) equal in length, shape, dtype and values."""
    def same(x: Any, y: Any) -> bool:
        if isinstance(x, torch.Tensor):
            return (isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype
                    and torch.equal(x.detach().cpu(), y.detach().cpu()))
        if isinstance(x, tuple | list):
            return (isinstance(y, tuple | list) and len(x) == len(y)
                    and all(same(u, v) for u, v in zip(x, y)))
        return x == y
    return same(list(a), list(b))


def _mode_problem(before: list[bool], after: list[bool]) -> str | None:
    if before == after:
        return None
    mode = "train" if all(after) else "eval" if not any(after) else "a mixed"
    was = "train" if all(before) else "eval" if not any(before) else "a mixed"
    return (f"left the model in {mode} mode (it was in {was} mode): put it back as you found it "
            "(was_training = model.training ... model.train(was_training))")


def _parameters_problem(before: list, after: list) -> str | None:
    if len(before) != len(after):
        return "changed the model's parameters: leave the model as it was"
    for (name, old, grad_before), (_, new, grad_after) in zip(before, after):
        if grad_before != grad_after:
            return (f"changed the model's parameter {name}: requires_grad {grad_before} became "
                    f"{grad_after}; leave the model as it was (torch.no_grad() turns gradients "
                    "off for a block of code, without touching the model)")
        if old.dtype != new.dtype or old.shape != new.shape or not torch.equal(old, new.cpu()
                                                                               .to(old.device)):
            return (f"changed the model's parameter {name} (its values, dtype or shape): "
                    "leave the model as it was")
    return None


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
    """Test samples and labels, and the model's seed. The number of samples is a prime: never
    a multiple of the world size, so DistributedSampler pads, and shares differ in size. The
    labels are chosen so that the model is right on about half of the samples, drawn at random,
    and on the last one: with an accuracy strictly between 0 and 1 over a prime number of
    samples, a sample counted twice or left out always changes it."""
    _, _, x, y = digits()
    n = (67, 71, 79, 83, 89, 97, 101, 103, 107, 109, 113, 127)[seed % 12]
    x, model_seed = x[:n], seed % 1000
    with torch.random.fork_rng(devices=[]), torch.no_grad():  # mlp(seed=) reseeds torch
        top = mlp(seed=model_seed)(x).topk(2, dim=1)
    predicted, second = top.indices[:, 0], top.indices[:, 1]
    # a near tie may go the other way on a GPU: its label is neither of the two, so that the
    # sample is wrong on every device
    close = top.values[:, 0] - top.values[:, 1] < 1e-3
    gen = torch.Generator().manual_seed(seed)
    right = (torch.rand(n, generator=gen) < 0.5) & ~close
    right[-1] = not close[-1]
    wrong = (predicted + torch.randint(1, 10, (n,), generator=gen)) % 10
    for _ in range(2):
        wrong = torch.where((wrong == second) | (wrong == predicted), (wrong + 1) % 10, wrong)
    return x, torch.where(right, predicted, wrong), model_seed


def _accuracy_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    x, y, model_seed = _accuracy_data(seed)
    model = Counting(mlp(seed=model_seed).to(device))
    if seed % 2:  # every check meets both modes: an answer must put back the one it found
        model.eval()
    x, y = x.to(device), y.to(device)
    _given["accuracy"] = {"x": x.clone(), "y": y.clone(), "modes": _modes(model),
                          "parameters": _parameters(model)}
    return model, x, y


def _rows_seen(args: tuple, returned: Any) -> dict[str, Any]:
    model, x, y = args
    given = _given.pop("accuracy", None) or {}
    changed = [name for name, now in (("x", x), ("y", y))
               if name in given and not _same_tensors([given[name]], [now])]
    return {"rows": model.rows, "samples": len(x), "changed": changed,
            "mode": _mode_problem(given.get("modes", _modes(model)), _modes(model)),
            "parameters": _parameters_problem(given.get("parameters", []), _parameters(model))
            if "parameters" in given else None}


def _accuracy_expected(rank: int, size: int, seed: int) -> float:
    x, y, model_seed = _accuracy_data(seed)
    with torch.random.fork_rng(devices=[]), torch.no_grad():  # the notebook's generator too
        return (mlp(seed=model_seed)(x).argmax(dim=1) == y).double().mean().item()


def _accuracy_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """Each rank classifies about its share of the samples (one more, for a padded share); how
    the counts are combined is the learner's choice."""
    share = math.ceil(observed["samples"] / size) + 1
    if observed["rows"] > share:
        return (f"evaluated {observed['rows']} samples: each rank evaluates only its share (about "
                f"1/{size} of the {observed['samples']})")
    if observed.get("changed"):
        return (f"changed the caller's {' and '.join(observed['changed'])} in place: leave the "
                "inputs as they were (work on a copy, or on a slice you do not write to)")
    return observed.get("parameters") or observed.get("mode")


DISTRIBUTED_ACCURACY = Exercise(
    "distributed_accuracy", _accuracy_args, _accuracy_expected, _accuracy_means,
    "each rank evaluates only its share; the model and the inputs left as they were",
    observe=_rows_seen, atol=1e-6, cases=2)


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
    _given["accumulate"] = {
        "batches": [(xb.clone(), yb.clone()) for xb, yb in batches], "items": list(batches),
        "modes": _modes(model), "settings": _settings(opt)}
    return model, opt, batches


def _settings(opt: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """The optimizer's settings (lr, momentum, ...), group by group."""
    return [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]


def _ddp_parameters(args: tuple, returned: Any) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in args[0].module.parameters()]).cpu()


def _accumulate_observed(args: tuple, returned: Any) -> dict[str, Any]:
    model, opt, batches = args
    given = _given.pop("accumulate", None) or {}
    changed = []
    # (the list itself, its items removed or replaced, is every exercise's rule: trial, state)
    if "batches" in given and not _same_tensors(given["batches"], list(batches)):
        changed.append("the tensors of micro_batches in place: leave them as they were")
    if "settings" in given and _settings(opt) != given["settings"]:
        keys = sorted({k for was, now in zip(given["settings"], _settings(opt))
                       for k in was.keys() | now.keys() if was.get(k) != now.get(k)})
        changed.append(f"the optimizer's settings ({', '.join(keys)}): leave them as they were "
                       "(divide the loss, not the learning rate)")
    return {"reductions": len(model.reductions), "passes": list(model.passes),
            "rows": max((len(xb) for xb, _ in given.get("items", batches)), default=0),
            "changed": changed, "mode": _mode_problem(given.get("modes", _modes(model)),
                                                      _modes(model))}


def _accumulate_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    _, _, lr = _accumulate_setup(seed)
    with torch.random.fork_rng(devices=[]):  # mlp(seed=) reseeds the notebook's generator
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
    if observed["reductions"] == 0 and (own := sorted({c["op"] for c in calls})):
        return (f"averaged the gradients yourself ({', '.join(own)}), and DDP never did: let DDP "
                "all-reduce them, once, in the last micro-batch's backward (no_sync for all "
                "the others)")
    if observed["reductions"] != 1:
        return (f"DDP averaged the gradients {observed['reductions']} times: once per optimizer "
                "step, please (no_sync for all micro-batches but the last, forward and "
                "backward both inside it)")
    if changed := observed.get("changed"):
        return f"changed {changed[0]}"
    return observed.get("mode")


ACCUMULATE = Exercise(
    "accumulate", _accumulate_args, _accumulate_expected, _accumulate_means,
    "one micro-batch at a time, one all-reduce per optimizer step, the inputs left as they "
    "were", collect=_ddp_parameters,
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
    """(samples, epoch). One case in two has fewer samples than ranks: half of them few
    enough that the padding repeats the shuffled indices more than once, the other half two
    short of the world size. The other has 50 to 91 samples or a few more, never a multiple
    of the world size. From 3 ranks on, every case but the first kind pads with two indices
    or more (at least two samples, where 4 ranks or more allow it), so that padding by
    repeating the first index alone, instead of the indices from the first, is wrong too."""
    if seed % 4 == 1:
        return max(1, (size - 1) // 2), seed % 7
    if seed % 4 == 2:
        return max(1, size - 2), seed % 7
    n = 50 + seed % 41
    while size > 1 and not (1 <= n % size <= max(1, size - 2)):  # not a multiple; from 3
        n += 1  # ranks on, two or more short of one
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


def _samplers_used(args: tuple, returned: Any) -> dict[str, Any]:
    # the returned value's own type: the value judged is a CPU copy, in which a tuple is a list
    return {"samplers": _samplers_made[0], "type": type(returned).__name__}


def _shard_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if observed["samplers"]:
        return "built the shard with DistributedSampler: by hand, please (without it)"
    if problem := no_communication(calls, rank, size, observed):
        return problem
    if observed["type"] != "list":
        return (f"my_shard returned a {observed['type']} of the right indices: a list, please "
                "(as list(sampler) gives it)")
    return None


MY_SHARD = Exercise("my_shard", _shard_args, _shard_expected, _shard_means,
                    "no DistributedSampler, no communication", observe=_samplers_used, cases=2,
                    cleanup=_stop_counting)
