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


def _called_from(namespace: dict[str, Any], through: tuple[dict[str, Any], ...]) -> bool:
    """Whether the recorded call was made by `namespace`'s code (or through `through`'s)."""
    frame = sys._getframe(3)  # above this function, handed_back() and the recorded call
    while frame is not None and any(frame.f_globals is g for g in through):
        frame = frame.f_back
    return frame is not None and frame.f_globals is namespace


class WatchedWork:
    """A work as the learner's code gets it during a check: the same, and `waited()` is called
    once it has been waited for (``wait()``, a completed ``is_completed()``, or the future
    taken over, whose taker takes on the wait)."""

    def __init__(self, work: Any, waited: Callable[[], None]) -> None:
        self._work, self._waited = work, waited

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        result = self._work.wait(*args, **kwargs)
        self._waited()
        return result

    def is_completed(self) -> bool:
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
