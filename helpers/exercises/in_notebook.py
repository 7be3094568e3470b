"""How an exercise that runs in the notebook itself is judged (notebooks 07 and 11).

The checker calls the learner's function on many made-up cases (``core.judge_cases``: the
value, the arguments left as they were, os.environ), and here also checks that the call left
the global random generators as it found them, and that each call gave a value of its own (not
one dict or list that the next call changes)."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from typing import Any

from . import state
from .core import Problem, judge_cases, value_problem

ENVIRON = "the environment (os.environ)"


class _SideEffect:
    """What the learner's function returned, and the global generators it changed."""

    def __init__(self, value: Any, changed: list[str]) -> None:
        self.value, self.changed = value, changed


def judge_in_notebook(name: str, fn: Callable[..., Any],
                      cases: Sequence[tuple[str, tuple, Any]], what: str,
                      problem: Problem = value_problem) -> None:
    """judge_cases (the value, the arguments, os.environ), and also: the global random
    generators (Python's, torch's, numpy's) left as they were, and a new value on every call,
    not one dict or list that a later call changes (a default argument or a global)."""
    at = {"case": -1}
    kept: dict[int, tuple[str, Any, Any]] = {}  # id -> (label, the object, its value then)

    def run(*args: Any) -> Any:
        at["case"] += 1  # judge_cases calls fn once per case, in order
        before = state.snapshot()
        try:
            got = fn(*args)
        finally:
            changed = [n for n in state.changed(before, state.snapshot()) if n != ENVIRON]
            if changed:  # put the generators back; judge_cases names and restores os.environ
                state.restore({**before, ENVIRON: dict(os.environ)})
        return _SideEffect(got, changed) if changed else got

    def judged(got: Any, right: Any) -> str | None:
        if isinstance(got, _SideEffect):
            them = "it" if len(got.changed) == 1 else "them"
            return (f"its answer, but changed {' and '.join(got.changed)}: leave {them} as "
                    f"{name} found {them} ({state.advice(got.changed)})")
        label = cases[at["case"]][0]
        if isinstance(got, dict | list):
            kind = type(got).__name__
            if (earlier := kept.get(id(got))) is not None and earlier[2] != got:
                return (f"the same {kind} it returned for {earlier[0]}, and so changed that "
                        f"call's answer: build a new {kind} on every call (a default argument "
                        "or a global outlives the call)")
            kept[id(got)] = (label, got, copy.deepcopy(got))  # kept alive: ids stay unique
        return problem(got, right)

    judge_cases(name, run, cases, what, judged)
