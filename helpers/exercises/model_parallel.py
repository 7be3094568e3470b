"""The exercises of notebook 09 (model parallelism): their inputs, right answers and rules."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import nn

from .core import Calls, Exercise
from .means import close, one_all_reduce, point_to_point_only, sent_flat
from .point_to_point import messages
from .state import keep_values, values_changed


def _observed(partial_of: Callable[[tuple], torch.Tensor], args: tuple, returned: Any
              ) -> dict[str, Any]:
    """The inputs' shapes, and this rank's partial result, which the all_reduce should carry
    (partial_of(inputs); the means are judged only where the inputs kept their values)."""
    with torch.no_grad():
        mine = partial_of(tuple(a.detach().cpu() for a in args))
    bias = args[2].detach().cpu() if partial_of is _row_partial else None
    return {"partial": mine, "bias": bias,
            "shapes": [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]}


def _row_partial(args: tuple) -> torch.Tensor:
    """h_part @ w_part.T: this rank's partial output, before the all_reduce and the bias."""
    return args[0] @ args[1].T


def _column_partial(args: tuple) -> torch.Tensor:
    """grad_out_part @ w_part: this rank's part of the input's gradient."""
    return args[2] @ args[1]


def _one_all_reduce_of(numbers: Callable[[list[tuple[int, ...]]], int], what: str,
                       calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """The rule (bound to numbers and what with functools.partial, which pickles: the
    exercise travels to the ranks): one all_reduce, and what it carries: `numbers(shapes of
    the inputs)` numbers, `what` (not a weight, not an activation whole)."""
    if problem := one_all_reduce(calls, rank, size, observed):
        return problem
    want, got = numbers(observed["shapes"]), math.prod(calls[0]["shapes"][0])
    if got != want:
        return (f"all-reduced {got} numbers: the one all_reduce carries {what}, {want} "
                "numbers here (the rest stays where it is, split)")
    sent, mine = sent_flat(calls[0].get("sent")), observed["partial"]
    if sent is not None and mine is not None and observed["bias"] is not None:
        # the bias, or a share of it (bias / world_size on every rank, or all on rank 0),
        # may travel with the partial output: the sum is the same
        extra = (sent.double().view_as(mine) - mine.double()).mean(dim=0)
        share = (extra @ observed["bias"].double()) / max(
            (observed["bias"].double() ** 2).sum().item(), 1e-30)
        mine = mine + share.item() * observed["bias"]
    if sent is not None and mine is not None and not close(sent, mine.reshape(-1), 1e-4):
        return (f"all-reduced {want} numbers that are not {what}: the all_reduce sums exactly "
                "that, each rank's product of its own slices (with, where there is one, a "
                "share of the bias), and nothing else")
    return None


def _one_all_reduce_exercise(name: str, make_args: Callable[..., tuple],
                             expected: Callable[[int, int, int], Any],
                             numbers: Callable[[list[tuple[int, ...]]], int], what: str,
                             carried: str, partial_of: Callable[[tuple], torch.Tensor]
                             ) -> Exercise:
    """Exercises 1 and 2: one all_reduce of `what` (partial_of(inputs)), inputs untouched,
    two cases a check."""
    return Exercise(name, make_args, expected, partial(_one_all_reduce_of, numbers, what),
                    f"one all_reduce {carried}, inputs left as they were",
                    observe=partial(_observed, partial_of), cases=2)


def _row_numbers(shapes: list[tuple[int, ...]]) -> int:
    """Batch x output features: the shapes of h_part and w_part."""
    return shapes[0][0] * shapes[1][0]


def _column_numbers(shapes: list[tuple[int, ...]]) -> int:
    """The input's own shape: x, the first argument."""
    return shapes[0][0] * shapes[0][1]


def _batch(seed: int) -> int:
    """1 to 5 rows; one row in one of every four consecutive seeds, so in every check (its
    runs take seeds s, s + 1, s + 2, s + 3)."""
    return 1 if seed % 4 == 1 else 2 + seed % 4


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---- exercise 1: the row-parallel forward ---------------------------------------------------
def _row_full(size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """The whole hidden activation, weight and bias; k hidden units per rank (varies)."""
    g = _generator(seed)
    batch, k, d_out = _batch(seed), 1 + seed % 3, 3 + seed % 5
    return (torch.randn(batch, k * size, generator=g), torch.randn(d_out, k * size, generator=g),
            torch.randn(d_out, generator=g), k)


def _row_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    h, w, bias, k = _row_full(size, seed)
    part = slice(rank * k, (rank + 1) * k)
    return (h[:, part].contiguous().to(device), w[:, part].contiguous().to(device),
            bias.to(device))


def _row_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    h, w, bias, _ = _row_full(size, seed)
    return h @ w.T + bias


ROW_PARALLEL_FORWARD = _one_all_reduce_exercise(
    "row_parallel_forward", _row_args, _row_expected, _row_numbers,
    "this rank's partial output (batch x output features)", "of the partial output",
    _row_partial)


# ---- exercise 2: the column-parallel backward -----------------------------------------------
def _column_full(size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """The input, the whole weight, the gradient of the whole output; k rows per rank."""
    g = _generator(seed)
    batch, k, d_in = _batch(seed), 1 + seed % 3, 3 + seed % 5
    return (torch.randn(batch, d_in, generator=g), torch.randn(k * size, d_in, generator=g),
            torch.randn(batch, k * size, generator=g), k)


def _column_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    x, w, grad_out, k = _column_full(size, seed)
    part = slice(rank * k, (rank + 1) * k)
    return (x.to(device), w[part].contiguous().to(device),
            grad_out[:, part].contiguous().to(device))


def _column_expected(rank: int, size: int, seed: int) -> list[torch.Tensor]:
    """[grad_x, grad_w_part] (a tuple the learner returns reaches the checker as a list)."""
    x, w, grad_out, k = _column_full(size, seed)
    part = slice(rank * k, (rank + 1) * k)
    return [grad_out @ w, grad_out[:, part].T @ x]


COLUMN_PARALLEL_BACKWARD = _one_all_reduce_exercise(
    "column_parallel_backward", _column_args, _column_expected, _column_numbers,
    "this rank's part of the input's gradient (the input's shape)", "(of the input's gradient)",
    _column_partial)


# ---- exercise 3: a pipeline's forward pass --------------------------------------------------
def _stage(seed: int, index: int, d: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 31 + index)
        return nn.Sequential(nn.Linear(d, d), nn.Tanh())


def _pipeline_setup(seed: int) -> tuple[int, int, int]:
    return 1 + seed % 4, 1 + seed % 5, 3 + seed % 4  # micro-batches (one, too), rows each, width


def _micro_batches(seed: int) -> list[torch.Tensor]:
    m, rows, d = _pipeline_setup(seed)
    g = _generator(seed)
    return [torch.randn(rows, d, generator=g) for _ in range(m)]


_holds_data = [False]  # whether this rank's last micro-batches held rank 0's data


def _pipeline_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    d = _pipeline_setup(seed)[2]
    batches = [mb.to(device) if rank == 0 else torch.zeros_like(mb, device=device)
               for mb in _micro_batches(seed)]
    stage = _stage(seed, rank, d).to(device)
    _holds_data[0] = rank == 0  # rank 0's micro-batches hold the data; the others' zeros may
    keep_values((batches if rank == 0 else [],))  # serve as receive buffers (the text says so)
    return stage, batches


def _pipeline_expected(rank: int, size: int, seed: int) -> list[torch.Tensor]:
    if rank != size - 1:
        return []
    d = _pipeline_setup(seed)[2]
    model = nn.Sequential(*[_stage(seed, r, d) for r in range(size)])
    with torch.no_grad():
        return [model(mb) for mb in _micro_batches(seed)]


def _pipeline_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    """The inputs and the stage left as they were, a list of outputs with no autograd graph;
    point-to-point only, from the rank before, to the rank after, one message a batch."""
    if observed["changed"]:
        return ("changed rank 0's micro-batches, the data: leave them as they were (the other "
                "ranks' zeros may serve as receive buffers)")
    if observed["frozen"]:
        return ("turned off requires_grad of the stage's parameters: leave the stage as it was "
                "(torch.no_grad() turns gradients off for a block of code, not for good)")
    if observed["type"] != "list":
        return f"returned a {observed['type']}: a list, please"
    if observed["graph"]:
        return ("returned outputs that carry an autograd graph (requires_grad): compute them "
                "under torch.no_grad(), as the text asks")
    if problem := point_to_point_only(calls, rank, size, observed):
        if size > 1 or "no point-to-point" not in problem:
            return problem
    sent, received = messages(calls)
    m = observed["count"]
    if wrong := sorted({str(p) for p in sent if p != rank + 1}):
        return (f"sent to rank(s) {', '.join(wrong)}: a stage sends only to the next one, "
                f"rank {rank + 1}")
    if wrong := sorted({"any source" if p is None else str(p) for p in received
                        if p != rank - 1}):
        return (f"received from {', '.join(wrong)}: a stage receives only from the one "
                f"before, rank {rank - 1}")
    want_sent, want_received = (m if rank < size - 1 else 0), (m if rank > 0 else 0)
    if (len(sent), len(received)) != (want_sent, want_received):
        return (f"sent {len(sent)} and received {len(received)} messages: one per micro-batch "
                f"({m}) to the next stage and from the one before, please")
    return None


def _pipeline_observed(args: tuple, returned: Any) -> dict[str, Any]:
    """What the rule needs beyond the calls: the micro-batches' count and values, the stage's
    flags, and what came back (its type, whether its tensors carry a graph)."""
    stage, batches = args
    items = returned if isinstance(returned, list | tuple) else []
    return {"count": len(batches),
            "changed": values_changed((batches if _holds_data[0] else [],)),
            "frozen": not all(p.requires_grad for p in stage.parameters()),
            "type": type(returned).__name__,
            "graph": any(isinstance(t, torch.Tensor) and t.requires_grad for t in items)}


PIPELINE_FORWARD = Exercise(
    "pipeline_forward", _pipeline_args, _pipeline_expected, _pipeline_means,
    "point-to-point only, from the stage before to the stage after, one message a micro-batch",
    observe=_pipeline_observed, cases=2, atol=1e-5, alone=True,
    writes=(1,))  # other ranks' zeros may be receive buffers; rank 0's: its own rule
