"""Every exercise checker of the course: it names each rank whose answer is wrong, and why.

Introduced in notebook 00; each section below names the notebook whose exercises it checks.
An exercise asks for a function, and its checker runs that function on the ranks
(``helpers.trial``) on inputs drawn afresh for every check, at the cluster's world size and
again on one rank fewer, with every call it makes recorded. It then judges, rank by rank:

- the value, against what that rank should hold at that world size (so an answer right only
  at one size, such as a hard-coded 4 or a sum that happens to match, fails);
- the type and shape (an int is asked for: a float or a tensor is wrong);
- the means, where the exercise restricts them (point-to-point only, one collective, no
  communication at all, only rank 0 reads the file), from the record of calls.

``check(cluster, EXERCISE)`` prints one line when every rank is right, and raises an
AssertionError listing every problem otherwise. The inputs are random, so that no answer can
be computed from a formula instead of from the other ranks' values.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import trial
from .data import digits, mlp
from .text import first_line

Calls = list[dict[str, Any]]


# ---- the framework -----------------------------------------------------------------------
def _returned(args: tuple, returned: Any) -> Any:
    return returned


def _nothing(args: tuple, returned: Any) -> None:
    return None


@dataclass(frozen=True)
class Exercise:
    """An exercise: the function the learner writes, and how to judge it.

    make_args(rank, size, device, group, seed) runs on the engines and gives the arguments;
    expected(rank, size, seed) runs in the notebook and gives the right value;
    collect(args, returned) picks the value to judge (default: what the function returned);
    observe(args, returned) notes anything else the means rule needs;
    means(calls, rank, size, observed) says what is wrong with how the value was produced.
    """

    name: str
    make_args: Callable[..., tuple]
    expected: Callable[[int, int, int], Any]
    means: Callable[[Calls, int, int, Any], str | None] | None = None
    rule: str = ""
    collect: Callable[[tuple, Any], Any] = _returned
    observe: Callable[[tuple, Any], Any] = _nothing
    cases: int = 1
    min_size: int = 1
    cleanup: Callable[[int, int], None] | None = None  # (global rank, seed), after both runs
    atol: float = 1e-5
    timeout: float = 5.0
    extra: dict[str, Any] = field(default_factory=dict)


def _a(word: str) -> str:
    """The word with its indefinite article: 'an int', 'a float'."""
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def describe(value: Any) -> str:
    """A value for a message: its type, and the value itself when it is short."""
    if isinstance(value, torch.Tensor):
        shown = value.tolist() if value.numel() <= 12 else f"shape {list(value.shape)}"
        return f"{_a(str(value.dtype).removeprefix('torch.'))} tensor {shown}"
    if isinstance(value, nn.Module):
        return f"{_a(type(value).__name__)} model"
    if isinstance(value, list | tuple) and len(value) > 12:
        return f"{_a(type(value).__name__)} of {len(value)} items"
    return f"{value!r} ({_a(type(value).__name__)})"


def value_problem(got: Any, expected: Any, atol: float = 1e-5) -> str | None:
    """What is wrong with got, where expected is right: type, shape, dtype, then value."""
    if isinstance(expected, bool):
        ok = type(got) is bool and got == expected
    elif isinstance(expected, int):
        ok = type(got) is int and got == expected
    elif isinstance(expected, float):
        ok = type(got) is float and math.isclose(got, expected, rel_tol=1e-6, abs_tol=atol)
    elif isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{describe(got)}, expected {describe(expected)}"
        if got.shape != expected.shape or got.dtype != expected.dtype:
            return (f"{_a(str(got.dtype).removeprefix('torch.'))} tensor of shape "
                    f"{list(got.shape)}, expected {str(expected.dtype).removeprefix('torch.')}"
                    f" of shape {list(expected.shape)}")
        if expected.is_floating_point():
            gap = (got.double() - expected.double()).abs().max().item() if got.numel() else 0.0
            ok = not math.isnan(gap) and gap <= atol + 1e-5 * expected.abs().max().item()
            if not ok and got.numel() > 12:
                return f"values off by up to {gap:.3g} (tolerance {atol:g})"
        else:
            ok = torch.equal(got, expected)
    elif isinstance(expected, dict):
        if not isinstance(got, dict) or sorted(got) != sorted(expected):
            return f"{describe(got)}, expected a dict with keys {sorted(expected)}"
        for key in expected:
            if (problem := value_problem(got[key], expected[key], atol)) is not None:
                return f"{key}: {problem}"
        return None
    elif isinstance(expected, list | tuple):
        if type(got) is not type(expected) or len(got) != len(expected):
            return f"{describe(got)}, expected {describe(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            if (problem := value_problem(g, e, atol)) is not None:
                return f"item {i}: {problem}"
        return None
    elif expected is None:
        ok = got is None
    else:
        ok = got == expected
    return None if ok else f"{describe(got)}, expected {describe(expected)}"


def verdict(exercise: Exercise, results: Sequence[dict[str, Any]], seed: int) -> list[str]:
    """Every problem of one check, as lines naming the world size and the rank."""
    missing = [f"rank {r}: {res['missing']}" for r, res in enumerate(results) if "missing" in res]
    if missing:
        return missing
    problems: list[str] = []
    for run, run_seed in (("full", seed), ("smaller", seed + 1)):
        if problems:  # wrong at the cluster's own size: that is what to fix first
            break
        for res in results:
            out = res.get(run)
            if out is None:
                continue
            where = f"at world size {out['size']}, rank {out['rank']}"
            if out["error"] is not None:
                problems.append(f"{where}: {exercise.name} raised {out['error']}")
                continue
            expected = exercise.expected(out["rank"], out["size"], run_seed)
            if (problem := value_problem(out["value"], expected, exercise.atol)) is not None:
                problems.append(f"{where}: {exercise.name} gave {problem}")
            elif exercise.means is not None and (problem := exercise.means(
                    out["calls"], out["rank"], out["size"], out["observed"])) is not None:
                problems.append(f"{where}: {problem}")
    return problems


def check(cluster: Any, exercise: Exercise, seed: int | None = None) -> None:
    """Run the learner's function on the ranks and judge it; AssertionError listing problems."""
    n = cluster.world_size
    seeds = [random.randrange(2, 2**30) * 2 * exercise.cases + c if seed is None else seed + 2 * c
             for c in range(exercise.cases)]
    problems: list[str] = []
    for s in seeds:
        pending = cluster.view.apply_async(trial.run, exercise, s, exercise.timeout)
        try:
            results = pending.get(4 * exercise.timeout + 30)
        except Exception as e:
            remote = getattr(e, "elist", None)  # CompositeError: (type, message, ...) per rank
            cause = (f"{remote[0][0]}: {first_line(str(remote[0][1]))}" if remote
                     else first_line(e))
            raise AssertionError(f"{exercise.name}: the check did not finish ({cause}); run "
                                 "cluster.form_group(), then try again") from e
        problems += [p for p in verdict(exercise, results, s) if p not in problems]
        if problems:
            break
    if problems:
        raise AssertionError(f"{exercise.name} is not right yet:\n  " + "\n  ".join(problems))
    smaller = (f", and again on {n - 1} rank{'s' * (n - 1 > 1)} alone" if n - 1 >= exercise.min_size
               else f" (with {n} ranks it cannot also be tried on fewer: run at "
                    f"{exercise.min_size + 1} ranks or more to check that it does not depend on "
                    "the world size)")
    print(f"{exercise.name}: right on all {n} ranks{smaller}"
          + (f"; {exercise.rule}" if exercise.rule else ""))


# ---- rules about the means, from the record of calls ------------------------------------
def _ops(calls: Calls, kind: str) -> list[str]:
    return [c["op"] for c in calls if c["kind"] == kind]


def point_to_point_only(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if collectives := _ops(calls, "collective"):
        return f"called {sorted(set(collectives))}: point-to-point calls only, please"
    if not _ops(calls, "p2p"):
        return "made no point-to-point call: the values must come from the other ranks"
    return None


def blocking_only(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := point_to_point_only(calls, rank, size, observed):
        return problem
    if other := sorted({c["op"] for c in calls} - {"send", "recv"}):
        return f"called {other}: blocking dist.send and dist.recv only, please"
    return None


def one_collective(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if p2p := _ops(calls, "p2p"):
        return f"called {sorted(set(p2p))}: one collective, no point-to-point call, please"
    collectives = _ops(calls, "collective")
    if len(collectives) != 1:
        return f"made {len(collectives)} collective calls {collectives}: exactly one, please"
    return None


def one_all_reduce(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := one_collective(calls, rank, size, observed):
        return problem
    if (op := _ops(calls, "collective")[0]) != "all_reduce":
        return f"called {op}: one all_reduce is all it takes (and it moves the least data)"
    return None


def collectives_only(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if p2p := _ops(calls, "p2p"):
        return f"called {sorted(set(p2p))}: collectives only, please"
    if not _ops(calls, "collective"):
        return "made no collective call: the values must come from the other ranks"
    return None


def no_communication(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if calls:
        return f"called {sorted({c['op'] for c in calls})}: this needs no communication"
    return None


def _numel(shape: Any) -> int:
    if isinstance(shape, list):
        return sum(_numel(s) for s in shape)
    return math.prod(shape)


# ---- notebook 00 ---------------------------------------------------------------------------
def _no_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return ()


def _size(rank: int, size: int, seed: int) -> int:
    return size


COUNT_RANKS = Exercise(
    "count_ranks", _no_args, _size, one_collective,
    "one collective, and world_size not needed")


# ---- notebook 01 ---------------------------------------------------------------------------
def _pair_value(rank: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(0, 100, (2,), generator=gen).float()


def _swap_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (_pair_value(rank, seed).to(device),)


def _swap_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    partner = rank ^ 1
    return _pair_value(partner if partner < size else rank, seed)


def _swap_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if (rank ^ 1) >= size:
        return None if not calls else (f"rank {rank} has no partner at world size {size}, "
                                       f"but called {sorted({c['op'] for c in calls})}")
    return point_to_point_only(calls, rank, size, observed)


SWAP_WITH_PARTNER = Exercise(
    "swap_with_partner", _swap_args, _swap_expected, _swap_means,
    "point-to-point calls only, and no call on a rank without a partner", min_size=2)


def shift_input(rank: int, seed: int = 0) -> torch.Tensor:
    """The tensor rank `rank` starts with in notebook 01's shift exercise."""
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.arange(3.0) + 10 * rank + torch.randint(0, 5, (1,), generator=gen).float()


def _shift_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (shift_input(rank, seed).to(device),)


def _shift_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return shift_input((rank - 1) % size, seed)


SHIFT_RIGHT = Exercise("shift_right", _shift_args, _shift_expected, point_to_point_only,
                       "point-to-point calls only", min_size=2)


def _ring_value(rank: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(-50, 50, (3,), generator=gen).float()


def _ring_sum_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (_ring_value(rank, seed).to(device),)


def _ring_sum_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return sum(_ring_value(r, seed) for r in range(size))


def _ring_sum_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := point_to_point_only(calls, rank, size, observed):
        return problem
    sends = sum(1 for c in calls if c["op"] in ("send", "isend")) + sum(
        1 for c in calls for p in c.get("parts") or () if p[0] == "isend")
    if sends > size:
        return f"sent {sends} messages: a ring needs no more than {size - 1} per rank"
    return None


RING_SUM = Exercise("ring_sum", _ring_sum_args, _ring_sum_expected, _ring_sum_means,
                    "point-to-point only, around the ring", min_size=2)


# ---- notebook 02 ---------------------------------------------------------------------------
def _mean_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (_ring_value(rank, seed).to(device),)


def _mean_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return sum(_ring_value(r, seed) for r in range(size)) / size


MEAN_OF_ALL = Exercise("mean_of_all", _mean_args, _mean_expected, one_all_reduce,
                       "one all_reduce")


def gather_input(rank: int, seed: int = 0) -> torch.Tensor:
    """The chunk rank `rank` contributes in notebook 02's ring all-gather exercise."""
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.tensor([rank + 1.0, -(rank + 1.0)]) + torch.randint(0, 9, (1,), generator=gen)


def _gather_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return (gather_input(rank, seed).to(device),)


def _gather_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return torch.cat([gather_input(r, seed) for r in range(size)])


RING_ALL_GATHER = Exercise("ring_all_gather", _gather_args, _gather_expected,
                           point_to_point_only, "point-to-point calls only", min_size=2)


def _tree_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    value = _ring_value(0, seed) if rank == 0 else torch.zeros(3)
    return (value.to(device),)


def _tree_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    return _ring_value(0, seed)


def _tree_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if any(c["kind"] == "collective" for c in calls):
        return "used a collective: point-to-point calls only, please"
    parts = [(c["op"], c["peer"]) for c in calls if c["op"] != "batch_isend_irecv"]
    parts += [(p[0], p[1]) for c in calls for p in c.get("parts") or ()]
    sends = [p for op, p in parts if op in ("send", "isend")]
    receives = [p for op, p in parts if op in ("recv", "irecv")]
    rounds = math.ceil(math.log2(size)) if size > 1 else 0
    if rank != 0 and len(receives) != 1:
        return f"received {len(receives)} messages: every rank but 0 receives exactly once"
    if len(sends) > rounds:
        return (f"sent {len(sends)} messages: with {size} ranks a tree needs at most {rounds} "
                "rounds, so at most that many sends from any rank")
    return None


TREE_BROADCAST = Exercise("tree_broadcast", _tree_args, _tree_expected, _tree_means,
                          "point-to-point only, in ceil(log2 n) rounds", min_size=2)


# ---- notebook 03 ---------------------------------------------------------------------------
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
    return model, rows.stop - rows.start


def _flat_gradient(args: tuple, returned: Any) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in args[0].parameters()]).cpu()


def _weighted_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    x, y, _, _ = digits()
    end = _weighted_rows(size - 1, size, seed).stop
    model = mlp(hidden=16, seed=seed % 1000)
    F.cross_entropy(model(x[:end]), y[:end]).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


WEIGHTED_AVERAGE = Exercise(
    "weighted_average_gradients", _weighted_args, _weighted_expected, collectives_only,
    "collectives only", collect=_flat_gradient, atol=1e-6)


def _sync_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    model = mlp(hidden=8, depth=2, seed=seed % 1000).to(device)
    case = seed % 4  # 0: in sync; 1-3: one rank differs, in one of three ways
    if case and rank == (seed // 4) % size:
        params = list(model.parameters())
        p = params[(seed // 16) % len(params)]
        with torch.no_grad():
            flat = p.view(-1)
            if case == 1:
                flat[0] += 1e-6                                # a tiny drift
            elif case == 2:
                flat[0], flat[-1] = flat[-1].item(), flat[0].item()  # same sum, other order
            else:
                flat[0] += 0.5                                 # a plain difference
                flat[-1] -= 0.5                                # ... that keeps the sum
    return (model,)


def _sync_expected(rank: int, size: int, seed: int) -> bool:
    return seed % 4 == 0 or size == 1  # one rank alone is always in sync with itself


def _sync_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := collectives_only(calls, rank, size, observed):
        return problem
    sent = sum(_numel(s) for c in calls for s in c["shapes"])
    if sent > 64:
        return (f"its collectives carried {sent} numbers: compare a fingerprint of a fixed, "
                "small size, not the parameters themselves")
    return None


IN_SYNC = Exercise("in_sync", _sync_args, _sync_expected, _sync_means,
                   "collectives of a fixed, small size", cases=4)


# ---- notebook 04 ---------------------------------------------------------------------------
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


def _rows_seen(args: tuple, returned: Any) -> int:
    return args[0].rows


def _accuracy_expected(rank: int, size: int, seed: int) -> float:
    x, y, model_seed = _accuracy_data(seed)
    with torch.no_grad():
        return (mlp(seed=model_seed)(x).argmax(dim=1) == y).float().mean().item()


def _accuracy_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if problem := collectives_only(calls, rank, size, observed):
        return problem
    share = math.ceil(101 / size) + 1
    if observed > share:
        return (f"evaluated {observed} samples: each rank evaluates only its share (about "
                f"1/{size} of them)")
    return None


DISTRIBUTED_ACCURACY = Exercise(
    "distributed_accuracy", _accuracy_args, _accuracy_expected, _accuracy_means,
    "each rank evaluates only its share", observe=_rows_seen, atol=1e-6, cases=2)


def _accumulate_setup(seed: int) -> tuple[int, int, float]:
    return 3 + seed % 2, 4 + seed % 3, 0.3  # micro-batches, batch per micro-batch, lr


def _micro_batches(rank: int, size: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y, _, _ = digits()
    k, b, _ = _accumulate_setup(seed)
    start = (seed % 200) + rank * k * b
    return [(x[start + i * b:start + (i + 1) * b], y[start + i * b:start + (i + 1) * b])
            for i in range(k)]


def _accumulate_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(mlp(hidden=16, seed=seed % 1000).to(device), process_group=group,
                device_ids=[device] if device.type == "cuda" else None)
    reductions = []

    def counted(state, bucket):  # no annotations: DDP checks them, and strings fail its check
        reductions.append(1)
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        return allreduce_hook(state, bucket)

    model.register_comm_hook(group, counted)
    model.reductions = reductions
    opt = torch.optim.SGD(model.parameters(), lr=_accumulate_setup(seed)[2])
    batches = [(xb.to(device), yb.to(device)) for xb, yb in _micro_batches(rank, size, seed)]
    return model, opt, batches


def _ddp_parameters(args: tuple, returned: Any) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in args[0].module.parameters()]).cpu()


def _reductions(args: tuple, returned: Any) -> int:
    return len(args[0].reductions)


def _accumulate_expected(rank: int, size: int, seed: int) -> torch.Tensor:
    _, _, lr = _accumulate_setup(seed)
    model = mlp(hidden=16, seed=seed % 1000)
    xs = torch.cat([xb for r in range(size) for xb, _ in _micro_batches(r, size, seed)])
    ys = torch.cat([yb for r in range(size) for _, yb in _micro_batches(r, size, seed)])
    F.cross_entropy(model(xs), ys).backward()
    with torch.no_grad():
        return torch.cat([(p - lr * p.grad).reshape(-1) for p in model.parameters()])


def _accumulate_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if observed != 1:
        return (f"DDP averaged the gradients {observed} times: once per optimizer step, "
                "please (no_sync for all micro-batches but the last)")
    return None


ACCUMULATE = Exercise(
    "accumulate", _accumulate_args, _accumulate_expected, _accumulate_means,
    "one all-reduce per optimizer step", collect=_ddp_parameters, observe=_reductions,
    atol=1e-5)


def _shard_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    return 50 + seed % 41, seed % 7  # samples, epoch


def _shard_expected(rank: int, size: int, seed: int) -> list[int]:
    from torch.utils.data import DistributedSampler

    n, epoch = 50 + seed % 41, seed % 7
    sampler = DistributedSampler(range(n), num_replicas=size, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return list(sampler)


MY_SHARD = Exercise("my_shard", _shard_args, _shard_expected, no_communication,
                    "no communication", cases=2)


# ---- notebook 05 ---------------------------------------------------------------------------
def _checkpoint_dir(seed: int, rank: int) -> Any:
    import tempfile
    from pathlib import Path

    path = Path(tempfile.gettempdir()) / f"course-exercise-{seed}-{rank}"
    path.mkdir(exist_ok=True)
    return path


def _remove_checkpoints(rank: int, seed: int) -> None:
    """Remove the files this rank's checks wrote (both runs: seed and seed + 1)."""
    import shutil
    import tempfile
    from pathlib import Path

    for s in (seed, seed + 1):
        shutil.rmtree(Path(tempfile.gettempdir()) / f"course-exercise-{s}-{rank}",
                      ignore_errors=True)


def _wrong_way_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    path = _checkpoint_dir(seed, rank) / "wrong_way.pt"
    model = mlp(seed=seed % 1000)  # saved the wrong way: with DDP's "module." on every key
    torch.save({f"module.{k}": v for k, v in model.state_dict().items()}, path)
    return (str(path),)


def _state_of(args: tuple, returned: Any) -> Any:
    if not isinstance(returned, nn.Module):
        return returned
    return {k: v.detach().cpu() for k, v in returned.state_dict().items()}


def _wrong_way_expected(rank: int, size: int, seed: int) -> dict[str, torch.Tensor]:
    return dict(mlp(seed=seed % 1000).state_dict())


LOAD_WRONG_WAY = Exercise("load_wrong_way", _wrong_way_args, _wrong_way_expected,
                          no_communication, "the weights of the file", collect=_state_of,
                          cleanup=_remove_checkpoints)


def _newest_setup(seed: int) -> list[tuple[int, str]]:
    """(step, kind) of the files the directory holds; kind: good, torn, temporary, corrupt."""
    gen = random.Random(seed)
    steps = sorted(gen.sample(range(1, 90), 5))
    kinds = ["good", "good"] + gen.sample(["torn", "corrupt", "temporary"], 3)
    gen.shuffle(kinds)
    if "good" not in kinds[:3]:
        kinds[gen.randrange(3)] = "good"
    return list(zip(steps, kinds))


def _newest_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    from .checkpoint import atomic_save, checkpoint_path

    directory = _checkpoint_dir(seed, rank) / "run"
    directory.mkdir(exist_ok=True)
    for step, kind in _newest_setup(seed):
        path = checkpoint_path(directory, step)
        atomic_save({"step": step, "w": torch.full((4000,), float(step))}, path)
        data = path.read_bytes()
        if kind == "torn":
            path.write_bytes(data[: len(data) // 2])
        elif kind == "corrupt":
            flipped = bytearray(data)
            flipped[len(flipped) // 2] ^= 0xFF
            path.write_bytes(bytes(flipped))
        elif kind == "temporary":
            path.rename(directory / f".{path.name}.x1y2z3.partial")
    return (str(directory),)


def _newest_expected(rank: int, size: int, seed: int) -> str:
    import tempfile
    from pathlib import Path

    step = max(s for s, kind in _newest_setup(seed) if kind == "good")
    return str(Path(tempfile.gettempdir()) / f"course-exercise-{seed}-{rank}" / "run"
               / f"step-{step:06d}.pt")


def _as_str(args: tuple, returned: Any) -> Any:
    from pathlib import Path

    return str(returned) if isinstance(returned, Path) else returned


NEWEST_LOADABLE = Exercise("newest_loadable", _newest_args, _newest_expected, no_communication,
                           "", collect=_as_str, cases=3, cleanup=_remove_checkpoints)


def _share_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    import torch.distributed as dist

    path = _checkpoint_dir(seed, 0) / "shared.pt"
    if rank == 0:
        torch.save({k: v for k, v in mlp(seed=seed % 1000).state_dict().items()}, path)
    dist.barrier(group=group)
    trial.watch(path)
    return str(path), mlp(seed=(seed + 1 + rank) % 1000).to(device)


def _share_state(args: tuple, returned: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in args[1].state_dict().items()}


def _share_opened(args: tuple, returned: Any) -> int:
    return trial.opened(args[0])


def _share_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if rank != 0 and observed:
        return f"rank {rank} opened the file itself: only rank 0 may read it"
    if rank == 0 and not observed:
        return "rank 0 never opened the file"
    if not _ops(calls, "collective"):
        return "made no collective call: the weights must reach the other ranks from rank 0"
    return None


LOAD_AND_SHARE = Exercise(
    "load_and_share", _share_args, _wrong_way_expected, _share_means,
    "only rank 0 reads the file", collect=_share_state, observe=_share_opened,
    cleanup=_remove_checkpoints)


# ---- notebook 06 ---------------------------------------------------------------------------
def _left_expected(rank: int, size: int, seed: int) -> float:
    return float((rank - 1) % size)


RING_EXCHANGE = Exercise("ring_exchange", _no_args, _left_expected, blocking_only,
                         "blocking send and recv only, no deadlock", min_size=2, timeout=4.0)


def _skip_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    bad = (seed // 2) % size if seed % 2 else None  # odd seeds: one rank has a bad batch
    return (rank != bad,)


def _skip_expected(rank: int, size: int, seed: int) -> float | None:
    return None if seed % 2 else float(size)


def _skip_means(calls: Calls, rank: int, size: int, observed: Any) -> str | None:
    if p2p := _ops(calls, "p2p"):
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


def judge_cases(name: str, fn: Callable[..., Any], cases: Sequence[tuple[str, tuple, Any]],
                what: str) -> None:
    """Run a function the learner wrote in the notebook on every case (label, args, right
    answer); raise an AssertionError naming the first five cases it gets wrong."""
    problems = []
    for label, args, right in cases:
        try:
            got = fn(*args)
        except Exception as e:  # noqa: BLE001 - the learner's error is the checker's verdict
            problems.append(f"{label}: raised {first_line(e)}")
            continue
        if (problem := value_problem(got, right)) is not None:
            problems.append(f"{label}: returned {problem}")
    if problems:
        raise AssertionError(f"{name} is not right yet:\n  " + "\n  ".join(problems[:5])
                             + (f"\n  ... and {len(problems) - 5} more" if len(problems) > 5
                                else ""))
    print(f"{name}: right on {len(cases)} {what}")


# ---- notebook 07 ---------------------------------------------------------------------------
def _launch_env(hosts: Sequence[str], per_host: int, host: int, local_rank: int,
                port: int) -> dict[str, str]:
    return {"MASTER_ADDR": hosts[0], "MASTER_PORT": str(port),
            "WORLD_SIZE": str(len(hosts) * per_host), "RANK": str(host * per_host + local_rank),
            "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_host),
            "GROUP_RANK": str(host)}


def env_cases(trials: int = 12) -> list[tuple[str, tuple, dict[str, str]]]:
    """Every process of jobs of 1 to 5 hosts and 1 to 8 processes per host (the first job has
    2 hosts of 4, a size where a few wrong formulas happen to agree with the right one)."""
    gen, cases = random.Random(7), []
    for job in range(trials):
        n_hosts, per_host = (2, 4) if job == 0 else (gen.randint(1, 5), gen.randint(1, 8))
        hosts = [f"10.1.{job}.{10 + 3 * h}" for h in range(n_hosts)]
        port = gen.randint(20000, 60000)
        for host in range(n_hosts):
            for local in range(per_host):
                args = (hosts, per_host, host, local, port)
                cases.append((f"{n_hosts} hosts x {per_host}, host {host}, local rank {local}",
                              args, _launch_env(*args)))
    return cases


def check_env_for(env_for: Callable[..., Any]) -> None:
    """Notebook 07, exercise 1: the environment a launcher gives one process of a job."""
    judge_cases("env_for", env_for, env_cases(), "processes of 12 jobs of 1 to 5 hosts")


def tasks_per_node_text(counts: Sequence[int]) -> str:
    """SLURM_TASKS_PER_NODE for these counts, node by node: [2, 2, 2, 1] -> '2(x3),1'."""
    parts: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        parts.append(f"{counts[i]}(x{j - i})" if j - i > 1 else str(counts[i]))
        i = j
    return ",".join(parts)


def node_rank_cases(trials: int = 15) -> list[tuple[str, tuple, list[int]]]:
    """Every node of allocations of 1 to 6 nodes, with runs of equal counts (the 'x' form)."""
    gen, cases = random.Random(11), []
    for _ in range(trials):
        counts: list[int] = []
        while len(counts) < gen.randint(1, 6):
            counts += [gen.randint(1, 8)] * gen.randint(1, 3)
        text = tasks_per_node_text(counts)
        for node, count in enumerate(counts):
            first = sum(counts[:node])
            right = list(range(first, first + count))
            cases.append((f"{text!r}, node {node}", (text, node), right))
    return cases


def check_node_ranks(node_ranks: Callable[[str, int], Any]) -> None:
    """Notebook 07, exercise 2: the global ranks Slurm places on one node."""
    judge_cases("node_ranks", node_ranks, node_rank_cases(), "nodes of 15 allocations")


def planted_envs(seed: int) -> tuple[list[dict[str, str]], list[int]]:
    """The environments of the processes of one job, with zero, one or two planted mistakes,
    and the right answer: the sorted indices of the processes to blame."""
    gen = random.Random(seed)
    size = gen.randint(2, 8)
    addr, port = f"10.2.0.{gen.randint(2, 250)}", gen.randint(20000, 60000)
    envs = [{"MASTER_ADDR": addr, "MASTER_PORT": str(port), "WORLD_SIZE": str(size),
             "RANK": str(r)} for r in range(size)]
    gen.shuffle(envs)  # processes start in any order
    kinds = ["duplicate", "out of range", "not a number"]
    if size >= 3:  # with two processes a changed setting leaves no majority to judge by
        kinds += ["port", "addr", "world size"]
    for _ in range(0 if seed % 5 == 4 else gen.randint(1, 2 if size >= 5 else 1)):
        i = gen.randrange(size)
        kind = gen.choice(kinds)
        if kind == "port":
            envs[i]["MASTER_PORT"] = str(port + gen.randint(1, 9))
        elif kind == "addr":
            envs[i]["MASTER_ADDR"] = f"10.2.1.{gen.randint(2, 250)}"
        elif kind == "world size":
            envs[i]["WORLD_SIZE"] = str(size + gen.choice([-1, 1]))
        elif kind == "duplicate":
            other = (i + gen.randint(1, size - 1)) % size
            envs[i]["RANK"] = envs[other]["RANK"]
        elif kind == "out of range":
            envs[i]["RANK"] = str(size + gen.randint(0, 2))
        else:
            envs[i]["RANK"] = gen.choice(["", "rank0", "1.0", "-1"])
    return envs, _blame(envs)  # computed from the result: a second mistake may undo a first


def _blame(envs: Sequence[dict[str, str]]) -> list[int]:
    from collections import Counter

    usual = {k: Counter(e[k] for e in envs).most_common(1)[0][0]
             for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")}
    size = int(usual["WORLD_SIZE"])
    ranks = Counter(e["RANK"] for e in envs)
    return [i for i, e in enumerate(envs)
            if any(e[k] != v for k, v in usual.items())
            or not (e["RANK"].isdigit() and int(e["RANK"]) < size) or ranks[e["RANK"]] > 1]


def check_rendezvous_problems(rendezvous_problems: Callable[[list], Any], trials: int = 40) -> None:
    """Notebook 07, exercise 3: which processes of a job stop its rendezvous."""
    cases = []
    for seed in range(trials):
        envs, right = planted_envs(seed)
        cases.append((f"{len(envs)} processes, job #{seed}", (copy.deepcopy(envs),), right))
    judge_cases("rendezvous_problems", rendezvous_problems, cases,
                "planted jobs of 2 to 8 processes")
