"""What an answer must leave as it found it, read before and compared after every call that a
checker makes of the learner's code, in every exercise (from notebook 00's on): the global
random generators, the environment, autograd's mode, torch's default dtype and device and its
number of threads, and the inputs' lists, flags, gradients, memory and values (but for those
an exercise's text asks the answer to write into: ``Exercise.writes``).

Used by ``trial`` (answers run on the ranks) and by the checkers of functions a learner runs
in the notebook itself (``launching``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

# variables torch sets for itself the first time a part of it is used, not the learner: the
# compiler's cache folder (torch/_inductor/runtime/cache_dir_utils.py), which building a
# DistributedDataParallel sets
TORCH_SETS = ("TORCHINDUCTOR_CACHE_DIR",)


GRAD_MODE = "autograd's mode (torch.is_grad_enabled())"
DEFAULT_DTYPE = "torch's default dtype"
DEFAULT_DEVICE = "torch's default device"
THREADS = "torch's number of threads (torch.get_num_threads())"
DETERMINISTIC = "torch's deterministic algorithms (torch.use_deterministic_algorithms)"
# how to leave each alone, for the checker's message
ADVICE = {
    GRAD_MODE: "to work without gradients, use `with torch.no_grad():` around that part, not "
               "torch.set_grad_enabled(False)",
    DEFAULT_DTYPE: "give the dtype where you make a tensor (dtype=...), not "
                   "torch.set_default_dtype",
    DEFAULT_DEVICE: "give the device where you make a tensor (device=...), not "
                    "torch.set_default_device",
    THREADS: "the cluster sets each rank's threads when it starts (threads per rank): leave "
             "torch.set_num_threads alone",
    DETERMINISTIC: "a setting for the whole process: set it back as you found it "
                   "(torch.are_deterministic_algorithms_enabled())",
}
RANDOM_ADVICE = ("random numbers: draw from a generator of your own (random.Random(), "
                 "torch.Generator()); variables: set them back")


def snapshot() -> dict[str, Any]:
    """What an answer must leave as it found it: the global random generators (torch's, on
    the CPU and the GPUs; Python's; numpy's), the environment, autograd's mode, torch's
    default dtype and device, its number of threads and deterministic algorithms."""
    import random

    import numpy as np
    import torch

    state = {"torch's random generator": torch.get_rng_state(),
             "_torch's seed": torch.initial_seed(),  # put back with it (not judged apart)
             "Python's random generator": random.getstate(),
             "numpy's random generator": np.random.get_state(legacy=False),
             "the environment (os.environ)": {k: v for k, v in os.environ.items()
                                              if k not in TORCH_SETS},
             GRAD_MODE: torch.is_grad_enabled(),
             DEFAULT_DTYPE: torch.get_default_dtype(),
             DEFAULT_DEVICE: str(torch.get_default_device()),
             THREADS: torch.get_num_threads(),
             DETERMINISTIC: (torch.are_deterministic_algorithms_enabled(),
                             torch.is_deterministic_algorithms_warn_only_enabled())}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["torch's CUDA random generators"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> None:
    """Put back what snapshot() read."""
    import random

    import numpy as np
    import torch

    if torch.initial_seed() != state["_torch's seed"]:  # a manual_seed() since
        torch.manual_seed(state["_torch's seed"])
    torch.set_rng_state(state["torch's random generator"])
    random.setstate(state["Python's random generator"])
    np.random.set_state(state["numpy's random generator"])
    if "torch's CUDA random generators" in state:
        torch.cuda.set_rng_state_all(state["torch's CUDA random generators"])
    torchs = {k: os.environ[k] for k in TORCH_SETS if k in os.environ}
    os.environ.clear()
    os.environ.update(state["the environment (os.environ)"], **torchs)
    torch.set_grad_enabled(state[GRAD_MODE])
    torch.set_default_dtype(state[DEFAULT_DTYPE])
    torch.set_default_device(None if state[DEFAULT_DEVICE] == "cpu" else state[DEFAULT_DEVICE])
    torch.set_num_threads(state[THREADS])
    torch.use_deterministic_algorithms(state[DETERMINISTIC][0], warn_only=state[DETERMINISTIC][1])


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The names of what differs between two snapshot()s."""
    import torch

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, torch.Tensor):
            return torch.equal(a, b)
        if isinstance(a, list | tuple):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if hasattr(a, "shape"):  # a numpy array
            return bool((a == b).all())
        return a == b

    return [name for name in before if name in after and not name.startswith("_")
            and not same(before[name], after[name])]


def advice(names: list[str]) -> str:
    """How to leave alone what an answer changed: one piece of advice per kind."""
    pieces = [ADVICE[n] for n in names if n in ADVICE]
    if any(n not in ADVICE for n in names):
        pieces.append(RANDOM_ADVICE)
    return "; ".join(pieces)


# ---- the inputs an answer is given: their flags, .grad and memory ----------------------------
def _tensors(args: tuple, names: Sequence[str]) -> list[tuple[str, Any]]:
    """The tensors among the arguments, each named as the learner's function names it:
    top-level ones, and those in a list or tuple argument (a model's parameters are the
    model's business: its exercise's)."""
    import torch

    found = []
    for i, arg in enumerate(args):
        name = names[i] if i < len(names) else f"argument {i + 1}"
        if isinstance(arg, torch.Tensor):
            found.append((name, arg))
        elif isinstance(arg, list | tuple):
            found += [(f"{name}[{j}]", t) for j, t in enumerate(arg)
                      if isinstance(t, torch.Tensor)]
    return found


def inputs(args: tuple, names: Sequence[str], writes: Sequence[int] = ()) -> dict[str, Any]:
    """What every exercise's inputs must keep: the items of every list argument, and of every
    tensor whether it requires grad, its .grad (a copy), where its memory is (its identity
    for every view of it) and, but for the arguments at the positions `writes` (those the
    exercise's text asks the answer to write into), its values (a copy)."""
    kept = _tensors(tuple(a for i, a in enumerate(args) if i not in writes),
                    [n for i, n in enumerate(_named(args, names)) if i not in writes])
    return {"names": list(names),
            "lists": [(names[i] if i < len(names) else f"argument {i + 1}", tuple(arg))
                      for i, arg in enumerate(args) if isinstance(arg, list)],
            "tensors": [(label, t.requires_grad,
                         None if t.grad is None else t.grad.detach().clone(), t.data_ptr())
                        for label, t in _tensors(args, names)],
            "values": [(label, t, t.detach().clone()) for label, t in kept]}


def _named(args: tuple, names: Sequence[str]) -> list[str]:
    return [names[i] if i < len(names) else f"argument {i + 1}" for i in range(len(args))]


def inputs_changed(before: dict[str, Any], args: tuple) -> list[str]:
    """How the answer changed its inputs: lists, flags, .grad and memory, then values."""
    import torch

    problems = []
    lists = [arg for arg in args if isinstance(arg, list)]
    for (label, items), now in zip(before["lists"], lists):
        if len(now) != len(items) or any(a is not b for a, b in zip(now, items)):
            how = (f"it held {len(items)} items, now {len(now)}" if len(now) != len(items)
                   else "items replaced")
            problems.append(f"changed the caller's list {label} ({how}): leave it as it was "
                            "(loop over it, or over a slice or a copy, without pop, del or "
                            "assignment)")
    now = _tensors(args, before["names"])
    for (label, needed, grad, pointer), (_, t) in zip(before["tensors"], now):
        if t.requires_grad != needed:
            problems.append(f"{label} {'now requires' if t.requires_grad else 'no longer requires'}"
                            " grad (leave requires_grad as it was: work on a detached copy)")
        if (grad is None) != (t.grad is None) or (
                grad is not None and not torch.equal(grad, t.grad)):
            problems.append(f"{label} {'got a .grad' if grad is None else 'had its .grad changed'}"
                            " (compute with a copy, or take gradients with torch.autograd.grad)")
        if t.data_ptr() != pointer and t.numel():
            problems.append(f"{label} was given new memory (resize_, set_ or .data =): leave it "
                            "as it was and work on a copy, or, where the exercise asks for an "
                            "update in place, write into it (x.copy_(...)) so that every view of "
                            "it sees the new values")
    if problems:
        return problems
    for label, t, values in before.get("values", ()):
        if t.shape == values.shape and not torch.equal(t.detach(), values):
            problems.append(f"changed the caller's {label} in place (its values): leave it as "
                            f"it was and work on a copy ({label.split('[')[0]}.clone(), or a new "
                            "tensor to receive into), as every exercise asks unless its text "
                            "says to write into it")
            break
    return problems


# ---- the inputs' values, for the exercises that judge them in their means rule -----------
_values: list[Any] = []  # copies of the tensor inputs of the call being judged, on this rank


def keep_values(args: tuple) -> tuple:
    """Remember copies of the tensor arguments, those in list arguments too (make_args returns
    through this), so that values_changed can tell if the answer wrote into them."""
    _values[:] = [a.detach().clone() for a in _tensors_of(args)]
    return args


def values_changed(args: tuple) -> bool:
    """Whether any tensor argument's values differ from the copy keep_values took."""
    import torch

    now = [a.detach() for a in _tensors_of(args)]
    return len(now) != len(_values) or not all(torch.equal(a, b) for a, b in zip(now, _values))


def _tensors_of(args: tuple) -> list[Any]:
    """The tensor arguments, and the tensors in list or tuple arguments, in order."""
    import torch

    found = []
    for a in args:
        items = a if isinstance(a, list | tuple) else [a]
        found += [t for t in items if isinstance(t, torch.Tensor)]
    return found


# ---- what an answer returned: still its own after the next call? ---------------------------
def returned_copies(value: Any) -> list[tuple[Any, Any]]:
    """Each tensor in what an answer returned (in lists, tuples and dicts too), with a copy:
    returned_overwritten tells later whether a next call wrote into one of them."""
    import torch

    if isinstance(value, torch.Tensor):
        return [(value, value.detach().clone())]
    items = value.values() if isinstance(value, dict) else (
        value if isinstance(value, list | tuple) else ())
    return [pair for item in items for pair in returned_copies(item)]


def returned_overwritten(kept: list[tuple[Any, Any]]) -> bool:
    """Whether a tensor an earlier call returned has changed since (a buffer the answer keeps
    between calls, and writes into again, changes under the caller who still holds it)."""

    def same(now: Any, then: Any) -> bool:  # nan where it was nan counts as unchanged
        return now.shape == then.shape and bool(
            ((now == then) | (now.isnan() & then.isnan()) if now.is_floating_point()
             else now == then).all())

    return not all(same(t.detach(), copy) for t, copy in kept)


def same_memory(first: list[tuple[Any, Any]], second: list[tuple[Any, Any]]) -> bool:
    """Whether two calls returned tensors in the same memory (the first is still held, so a
    new tensor cannot be given its memory): one buffer kept between calls and returned again."""
    def places(kept: list[tuple[Any, Any]]) -> set[int]:
        return {t.untyped_storage().data_ptr() for t, _ in kept if t.numel()}

    return bool(places(first) & places(second))
