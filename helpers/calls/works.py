"""The works a learner's asynchronous calls return, watched while an exercise is checked.

Part of the call record (``trace``): during a check (``helpers.exercises.trial``), a call made
with ``async_op=True``, ``isend``, ``irecv`` or ``batch_isend_irecv`` by the learner's own code
hands back its work wrapped, and the call's entry says whether it was waited for. A result
read before its ``wait()`` is wrong on NCCL (nothing orders the collective before the code
that reads its tensor) even where gloo has already finished, so the checker judges the wait,
not the timing.
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable
from typing import Any

_watched: list[tuple[dict[str, Any], tuple[dict[str, Any], ...]]] = []  # while a check runs


def watch_works(namespace: dict[str, Any] | None, through: tuple[dict[str, Any], ...] = ()
                ) -> None:
    """From now on (None: no longer), the work of every asynchronous call made by code whose
    globals are `namespace` is handed back wrapped, and its entry says whether it was waited
    for ("waited"): a result used before its wait() is wrong on NCCL even where gloo's is
    already there. Only that code's own calls, directly or through code whose globals are in
    `through` (the trial's GroupDist): torch's internal calls get their works as ever."""
    _watched[:] = [(namespace, through)] if namespace is not None else []


def watching() -> bool:
    """Whether a check is running (its calls' payloads are copied: ``trace``)."""
    return bool(_watched)


def _called_from(namespace: dict[str, Any], through: tuple[dict[str, Any], ...]) -> bool:
    """Whether the recorded call was made by `namespace`'s code (or through `through`'s)."""
    frame = sys._getframe(3)  # above this function, handed_back() and the recorded call
    while frame is not None and any(frame.f_globals is g for g in through):
        frame = frame.f_back
    return frame is not None and frame.f_globals is namespace


class WatchedWork:
    """A work as the learner's code gets it during a check: the same, and `waited()` is called
    once it has been waited for (``wait()``, a completed ``is_completed()``, or the future
    taken over, whose taker takes on the wait). Its first ``is_completed()`` is False."""

    def __init__(self, work: Any, waited: Callable[[], None]) -> None:
        self._work, self._waited, self._polled = work, waited, False

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        result = self._work.wait(*args, **kwargs)
        self._waited()
        return result

    def is_completed(self) -> bool:
        # the first poll says "not yet", as it usually would on a GPU right after the call was
        # queued (under NCCL it queries, without blocking, the CUDA event recorded after the
        # kernel): an answer that polls once and reads the result whatever the poll said is
        # wrong there, even where gloo had finished
        if not self._polled:
            self._polled = True
            return False
        done = self._work.is_completed()
        if done:
            self._waited()
        return done

    def get_future(self) -> Any:
        self._waited()
        return self._work.get_future()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def handed_back(result: Any, entry: dict[str, Any]) -> Any:
    """What an asynchronous call returns to its caller: while code is watched and made the
    call, its work(s) wrapped (batch_isend_irecv gives a list, waited when all of it is), the
    entry not yet waited."""
    if result is None or not _watched or not _called_from(*_watched[0]):
        return result
    entry["waited"] = False
    if not isinstance(result, list):
        return WatchedWork(result, lambda: entry.__setitem__("waited", True))
    done = [False] * len(result)

    def part_waited(i: int) -> None:
        done[i] = True
        entry["waited"] = all(done)

    return [WatchedWork(work, functools.partial(part_waited, i)) for i, work in enumerate(result)]


# ---- tensors the learner's code makes without a device, during a check on CPU ranks ---------
# On CPU ranks `device` is the CPU, so torch.zeros(n) and torch.zeros(n, device=device) are the
# same tensor; on a GPU node (backend "cpu:gloo,cuda:nccl") the first goes through gloo, not
# NCCL, and a receive into it never meets a send of a GPU tensor. A check marks the tensors the
# learner's own code makes with a factory and no device=, and judges any that a call carries.
FACTORIES = ("zeros", "ones", "empty", "full", "tensor", "as_tensor", "arange", "rand", "randn",
             "randint", "randperm", "linspace", "eye")
_host_made: dict[int, weakref.ref] = {}  # by id: a tensor's == is elementwise, not identity
_patched: dict[str, Callable] = {}


def watch_factories(namespace: dict[str, Any] | None) -> None:
    """From now on (None: no longer), torch's tensor factories called by `namespace`'s code
    without a device mark what they make (``host_made``)."""
    import torch

    for name, original in _patched.items():
        setattr(torch, name, original)
    _patched.clear()
    _host_made.clear()
    if namespace is None:
        return
    for name in FACTORIES:
        original = getattr(torch, name)
        _patched[name] = original
        setattr(torch, name, _marking(original, namespace))


def _marking(original: Callable, namespace: dict[str, Any]) -> Callable:
    @functools.wraps(original)
    def factory(*args: Any, **kwargs: Any) -> Any:
        made = original(*args, **kwargs)
        if (kwargs.get("device") is None and sys._getframe(1).f_globals is namespace
                and not (args and hasattr(args[0], "device"))):  # torch.tensor(a tensor)
            try:
                _host_made[id(made)] = weakref.ref(made)
            except TypeError:
                pass
        return made

    return factory


def host_made(value: Any) -> bool:
    """Whether value (a tensor, or a list of them) was made by a watched factory call with no
    device, or is a view of such a tensor."""
    if isinstance(value, list | tuple):
        return any(host_made(v) for v in value)
    ref = _host_made.get(id(value))
    if ref is not None and ref() is value:
        return True
    base = getattr(value, "_base", None)  # a view of one (a slice, a reshape) is one too
    return base is not None and host_made(base)
