"""How an exercise is judged: the Exercise record, a value's problems, the verdict, ``check``.

Introduced in notebook 00 (the first exercise). The learner's function runs on the ranks
(``helpers.exercises.trial``); what it returned, and the calls it made, are judged here."""

from __future__ import annotations

import copy
import math
import os
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..text import first_line
from . import state, trial

Calls = list[dict[str, Any]]


def _returned(args: tuple, returned: Any) -> Any:
    return returned


def _nothing(args: tuple, returned: Any) -> None:
    return None


# gloo ends the receiving process when a message is longer than its buffer ("Received data
# size doesn't match expected size", an uncaught gloo::EnforceNotMet): the likeliest cause
ENGINE_DIED = ("an engine process ended: on gloo a receive into a buffer smaller than the "
               "message sent ends the process, so check that every receive buffer has the shape "
               "of what is sent to it; run cluster.restart() (fresh engines), then try again")


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
    alone: bool = False  # also run on rank 0 alone (where the text promises one rank)
    again: bool = True  # call it twice on the same inputs (False where inputs are files)
    on_device: bool = True  # tensors passed to calls made on `device` (False: CPU ones allowed)
    writes: tuple[int, ...] = ()  # positions of the arguments the text asks to write into
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
    return f"{value!r} ({_a(_type_name(value))})"


def _type_name(value: Any) -> str:
    """int, float, ... for the builtins; numpy.bool, numpy.ndarray, ... for the others."""
    kind = type(value)
    return (kind.__name__ if kind.__module__ == "builtins"
            else f"{kind.__module__.split('.')[0]}.{kind.__name__}")


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
            tol = atol + 1e-5 * (expected.abs().max().item() if expected.numel() else 0.0)
            ok = not math.isnan(gap) and gap <= tol
            if not ok and got.numel() > 12:
                return f"values off by up to {gap:.3g} (tolerance {tol:.2g})"
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
    for run, run_seed in (("full", seed), ("again", seed), ("smaller", seed + 1),
                          ("alone", seed + 1)):
        if problems:  # wrong at the cluster's own size: that is what to fix first
            break
        outs = [res[run] for res in results if res.get(run) is not None]
        if said := unwaited(outs, exercise.name):  # the cause a timeout elsewhere would hide
            problems.append(said)
            break
        if said := deadlock(outs):
            problems.append(said)
            break
        for res in results:
            out = res.get(run)
            if out is not None and (problem := judged(exercise, out, run_seed, run)):
                problems.append(problem)
        if not problems and run != "again" and (said := batch_first(outs, exercise.name)):
            problems.append(said)  # (a new group in every run but the second)
    return problems


def judged(exercise: Exercise, out: dict[str, Any], seed: int, run: str) -> str | None:
    """What is wrong with one rank's run (None if nothing), in a line naming its size and rank:
    an error, changed inputs, a returned buffer overwritten, side effects, the value, the means.
    The ranks judge their first run with it too (trial.run), and skip the rest if it is wrong."""
    where = f"at world size {out['size']}, rank {out['rank']}" + (
        ", called a second time on the same inputs" if run == "again" else "")
    if out["error"] is not None:
        return f"{where}: {exercise.name} raised {out['error']}"
    if out.get("inputs"):
        return f"{where}: {exercise.name}: {'; '.join(out['inputs'])}"
    if out.get("overwritten"):
        return (f"{where}: {exercise.name} returned a tensor that its next call returned again "
                "or wrote into (one buffer kept between calls): return a new tensor from every "
                "call, as the caller still holds the one you returned")
    if out.get("side_effects"):
        changed = out["side_effects"]
        it = "it" if len(changed) == 1 else "them"
        return (f"{where}: {exercise.name} changed {' and '.join(changed)}: leave {it} as "
                f"{exercise.name} found {it} ({state.advice(changed)})")
    expected = exercise.expected(out["rank"], out["size"], seed)
    if (problem := value_problem(out["value"], expected, exercise.atol)) is not None:
        return (f"{where}: {exercise.name} gave {problem}" + (HASHED if out.get("hashed") else "")
                + elsewhere(out))
    if exercise.means is not None and (problem := exercise.means(
            out["calls"], out["rank"], out["size"], out["observed"])) is not None:
        return f"{where}: {problem}{elsewhere(out)}"
    if exercise.on_device and (made := [c["op"] for c in out["calls"] if c.get("host_made")]):
        return (f"{where}: {exercise.name} passed {made[0]} a tensor made without a device "
                "(torch.zeros(...), torch.tensor(...), ... with no device=): here the CPU, but "
                "on a GPU node it would go through gloo rather than NCCL, and a receive into "
                "it never meets a send from a GPU. Make it on `device` (device=device, or "
                "another tensor's .device, or torch.zeros_like(...))")
    if exercise.on_device and out.get("host_returned"):
        return (f"{where}: {exercise.name} returned a tensor made without a device "
                "(torch.zeros(...), torch.tensor(...), ... with no device=): here the CPU, but "
                "on a GPU node it would be on the CPU while its inputs are on the GPU. Make it "
                "on `device` (device=device, or an input's .device, or torch.zeros_like(...))")
    return None


HASHED = ("; it called hash() on str or bytes, which Python salts per process "
          "(PYTHONHASHSEED): ranks started apart (mpiexec, Slurm, torchrun) hash equal data "
          "differently, so the check does too. Use hashlib (hashlib.sha256(data).digest())")
TIMED_OUT = ("timeout", "timed out", "Timed out")
# what gloo says on a rank whose peer gave up waiting first and closed their connection
PEER_GAVE_UP = ("Connection closed by peer", "Connection reset by peer")


def elsewhere(out: dict[str, Any]) -> str:
    """'; it called all_reduce on ranks [0, 1], ...' when the answer used a group of its own."""
    if not out.get("elsewhere"):
        return ""
    op, ranks = out["elsewhere"][0]
    return (f"; it called {op} on a group of its own, ranks {list(ranks)}: every call belongs "
            f"on the group the check runs it on, all {out['size']} ranks (dist's default group, "
            "which needs no group= at all)")


def unwaited(outs: Sequence[dict[str, Any]], name: str) -> str | None:
    """The first rank that returned with an asynchronous call of its own never waited for."""
    for out in outs:
        if calls := [c for c in out["calls"] if c.get("waited") is False]:
            return (f"at world size {out['size']}, rank {out['rank']}: {name} started "
                    f"{calls[0]['op']} (asynchronous) and never waited for it: call .wait() on "
                    "the work it returns (or poll is_completed() until it says True) before "
                    "the tensor is used or returned (on NCCL "
                    "nothing orders the operation before the code that reads its tensor until "
                    "then, even where gloo has already finished)")
    return None


def batch_first(outs: Sequence[dict[str, Any]], name: str) -> str | None:
    """Where batch_isend_irecv is some ranks' first call on the check's group (a new group
    every run but the second) and not every rank's: on NCCL that is undefined (its docstring,
    torch/distributed/distributed_c10d.py: as the first call on a group it needs every rank of
    the group), although gloo runs it."""
    first = {out["rank"]: (out["calls"][0]["op"] if out["calls"] else None) for out in outs
             if out["error"] is None}
    batched = sorted(r for r, op in first.items() if op == "batch_isend_irecv")
    others = sorted(r for r, op in first.items() if op != "batch_isend_irecv")
    if not batched or not others or len(first) < len(outs):
        return None
    other = others[0]
    what = f"{first[other]}" if first[other] else "no call at all"
    return (f"at world size {outs[0]['size']}: {name}'s first call on the group is "
            f"batch_isend_irecv on rank {batched[0]} but {what} on rank {other}: on NCCL, "
            "batch_isend_irecv as the first call on a group needs every rank of the group to "
            "make it too (otherwise the behaviour is undefined, says its documentation; gloo "
            "runs it all the same). Batch every rank's sends and receives, or none")


def deadlock(outs: Sequence[dict[str, Any]]) -> str | None:
    """'a deadlock at world size n: rank 0 waits in recv from rank 1, ...' when two or more
    ranks failed inside a call of their record, at least one timed out, and the others timed
    out too or saw the one that gave up first close its connection."""
    failed = [out for out in outs if out["error"] is not None]
    stuck = {out["rank"]: out["calls"][-1] for out in failed if out["calls"]}

    def says(out: dict[str, Any], words: tuple[str, ...]) -> bool:
        return any(w in out["error"] for w in words)

    if (len(stuck) < 2 or not any(says(out, TIMED_OUT) for out in failed)
            or not all(says(out, TIMED_OUT + PEER_GAVE_UP) for out in failed)):
        return None

    def waits(call: dict[str, Any]) -> str:
        peer = call.get("peer")
        side = "to" if call["op"] in ("send", "isend") else "from"
        return f"in {call['op']}" + (f" {side} rank {peer}" if peer is not None else "")

    who = ", ".join(f"rank {r} waits {waits(call)}" for r, call in sorted(stuck.items()))
    if said := unmatched_pair(stuck):
        return f"at world size {outs[0]['size']}: {who}, until the timeout. {said}"
    return (f"a deadlock at world size {outs[0]['size']}: {who}, until the timeout. Each waits "
            "for a rank that is itself waiting: order the calls so that one side of every "
            "pair sends while the other receives (notebook 06)")


SEND_OPS = ("send", "isend")
RECV_OPS = ("recv", "irecv")


def unmatched_pair(stuck: dict[int, dict[str, Any]]) -> str | None:
    """What keeps a send and the receive that waits for it apart, when two stuck ranks are
    already paired (one sends to the other, which receives from the first): not a deadlock of
    order, a message that does not match (its tag)."""
    for rank, call in sorted(stuck.items()):
        other = stuck.get(call.get("peer"))
        if (call["op"] not in SEND_OPS or other is None or other["op"] not in RECV_OPS
                or other.get("peer") not in (rank, None)):
            continue
        peer = call["peer"]
        sent, awaited = call.get("tag") or 0, other.get("tag") or 0
        differ = (f": rank {rank} sends with tag {sent}, rank {peer} waits for tag {awaited}"
                  if sent != awaited else "")
        return (f"Rank {rank}'s {call['op']} and rank {peer}'s {other['op']} are already paired, "
                f"yet the message never matched{differ}. A receive takes only a message with "
                "its own tag from its source: give both sides the same tag (notebook 01)")
    return None


def check(cluster: Any, exercise: Exercise, seed: int | None = None) -> None:
    """Run the learner's function on the ranks and judge it; AssertionError listing problems."""
    n = cluster.world_size
    seeds = [random.randrange(2, 2**30) * 2 * exercise.cases + c if seed is None else seed + 2 * c
             for c in range(exercise.cases)]
    problems: list[str] = []
    for s in seeds:
        token = uuid.uuid4().hex  # this trial's, on every rank
        pending = cluster.view.apply_async(trial.run, exercise, s, exercise.timeout, token,
                                           judged)
        try:
            results = pending.get(4 * exercise.timeout + 30)
        except Exception as e:
            remote = getattr(e, "elist", None)  # CompositeError: (type, message, ...) per rank
            cause = (f"{remote[0][0]}: {first_line(str(remote[0][1]))}" if remote
                     else first_line(e))
            raise AssertionError(f"{exercise.name}: the check did not finish ({cause}); "
                                 + (ENGINE_DIED if "died" in cause else
                                    "run cluster.form_group(), then try again")) from e
        problems += [p for p in verdict(exercise, results, s) if p not in problems]
        if problems:
            break
    if problems:
        raise AssertionError(f"{exercise.name} is not right yet:\n  " + "\n  ".join(problems))
    smaller = (f", and again on {n - 1} rank{'s' * (n - 1 > 1)} alone" if n - 1 >= exercise.min_size
               else f" (with {n} ranks it cannot also be tried on fewer: run at "
                    f"{exercise.min_size + 1} ranks or more to check that it does not depend on "
                    "the world size)")
    if exercise.alone and n - 1 > 1:
        smaller += ", and on rank 0 alone"
    print(f"{exercise.name}: right on all {n} ranks{smaller}"
          + (f"; {exercise.rule}" if exercise.rule else ""))


def no_args(rank: int, size: int, device: Any, group: Any, seed: int) -> tuple:
    """No arguments: for exercises whose function takes none."""
    return ()


Problem = Callable[[Any, Any], "str | None"]


def judge_cases(name: str, fn: Callable[..., Any], cases: Sequence[tuple[str, tuple, Any]],
                what: str, problem: Problem = value_problem) -> None:
    """Run a function the learner wrote in the notebook on every case (label, args, right
    answer); raise an AssertionError naming the first five cases it gets wrong, a change to
    its arguments or to this process's environment (os.environ) included."""
    problems = []
    for label, args, right in cases:
        before, environ = copy.deepcopy(args), dict(os.environ)
        try:
            got = fn(*args)
        except Exception as e:  # noqa: BLE001 - the learner's error is the checker's verdict
            problems.append(f"{label}: raised {first_line(e)}")
            continue
        finally:
            if changed := sorted(k for k in environ.keys() | os.environ.keys()
                                 if environ.get(k) != os.environ.get(k)):
                os.environ.clear()  # the notebook keeps the environment it had
                os.environ.update(environ)
        if changed:
            problems.append(f"{label}: changed os.environ ({', '.join(changed)}): leave this "
                            "process's environment as it was (return values, do not set them)")
        elif args != before:
            problems.append(f"{label}: changed its arguments: leave them as they were")
        elif (wrong := problem(got, right)) is not None:
            problems.append(f"{label}: returned {wrong}")
    if problems:
        raise AssertionError(f"{name} is not right yet:\n  " + "\n  ".join(problems[:5])
                             + (f"\n  ... and {len(problems) - 5} more" if len(problems) > 5
                                else ""))
    print(f"{name}: right on {len(cases)} {what}")
