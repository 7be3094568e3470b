"""The ``%px`` / ``%%px`` magics the cluster activates: ipyparallel's, with a bounded wait,
failures reported by rank (``helpers.cluster.px``), and every output labelled with its rank.

Introduced in notebook 00. The stop button is handled in ``helpers.cluster.interrupts``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from ipyparallel import error as ipp_error
from ipyparallel.client.magics import ParallelMagics

from . import interrupts
from .px import (
    DROPPED,
    RankError,
    describe_failure,
    failures,
    stop,
    submit,
    wait_for_ranks,
)

# seconds a stopped cell waits for the output of the ranks it stopped (they have answered)
STOPPED_OUTPUT_WAIT = 0.5
OUTPUT_WAIT = 5.0  # seconds to wait for the output of ranks that have answered (rarely > 0.1)


@contextmanager
def streamed_by_rank(result: Any, rank_of: dict[int, Any]) -> Iterator[None]:
    """ipyparallel's live output, each piece labelled with its rank ([stdout:0]) instead of
    its engine id, which changes at every restart. Its labels are fixed when streaming starts.

    In a kernel, ipyparallel shows each rank's stream as one display that it updates. Two of
    its gaps are closed here, so that no rank's output goes missing from the live view:
    output that arrived before streaming began is shown under the rank's own display (not one
    display shared by every such rank, each replacing the last), and when streaming ends every
    rank's display is brought up to date with all the output received (a message that arrived
    while streaming was being set up could otherwise be lost)."""
    engine_ids = result._targets
    labels = [rank_of[e].rank for e in engine_ids]
    original = result._iopub_streaming_output_callback

    def show(label: Any, msg_future: Any, msg: dict[str, Any]) -> None:
        if not msg.get("parent_header"):  # output captured before streaming: name its request
            msg = {**msg, "parent_header": {"msg_id": msg_future.msg_id}}
        original(label, msg_future, msg)

    with ExitStack() as stack:
        result._iopub_streaming_output_callback = show
        result._targets = labels
        try:
            stack.enter_context(result.stream_output())
        finally:
            result._targets = engine_ids
            del result._iopub_streaming_output_callback
        try:
            yield
        finally:
            shell = _ipython()
            if shell is not None and getattr(shell, "kernel", None) is not None:
                for label, msg_future in zip(labels, result._children):
                    for name in ("stdout", "stderr"):
                        if msg_future.output.metadata[name]:  # the whole stream, shown again
                            show(label, msg_future, {"header": {"msg_type": "stream"},
                                                     "content": {"name": name, "text": ""}})


def _ipython() -> Any:
    from IPython import get_ipython

    return get_ipython()


@contextmanager
def labelled_by_rank(result: Any, rank_of: dict[int, Any]) -> Iterator[None]:
    """While a result's outputs are shown, label them with ranks, not engine ids."""
    engine_ids = [md.get("engine_id") for md in result._metadata]
    for md, eid in zip(result._metadata, engine_ids):
        if eid in rank_of:
            md["engine_id"] = rank_of[eid].rank
    try:
        yield
    finally:
        for md, eid in zip(result._metadata, engine_ids):
            md["engine_id"] = eid


def wait_for_output(result: Any, wait: float, pressed: Callable[[], bool]) -> None:
    """Wait up to `wait` seconds for the output of the ranks that have answered, or until
    pressed() (the stop button)."""
    deadline = time.monotonic() + wait
    while not pressed() and not result.wait_for_output(0.05) and time.monotonic() < deadline:
        pass


class CourseMagics(ParallelMagics):
    """ipyparallel's %px / %%px, with a bounded wait, failures reported by rank, and every
    output labelled with the rank that printed it."""

    def __init__(self, shell: Any, view: Any, cluster: Any):
        super().__init__(shell, view)
        self.cluster = cluster

    def _targeted_ranks(self) -> list[Any]:
        """The ranks (RankInfo) that the view's targets name; RankError for unknown engines."""
        rank_of = {r.engine_id: r for r in self.cluster.ranks}
        targets = self.view.targets
        targets = list(rank_of) if targets in (None, "all") else targets
        targets = [targets] if isinstance(targets, int) else list(targets)
        unknown = [t for t in targets if t not in rank_of]
        if unknown:
            raise RankError(f"engine id(s) {unknown} are not ranks of this cluster; engine ids of "
                            f"ranks 0..{len(rank_of) - 1} are {list(rank_of)} "
                            "(see cluster.ranks)", {}, [], [])
        return [rank_of[t] for t in targets]

    def parallel_execute(self, cell, block=None, groupby="type", save_name=None,
                         stream_output=None, progress_after=None, signal_on_interrupt=None):
        """Run a cell on the targeted ranks; like ipyparallel's, but never waits forever."""
        block = self.view.block if block is None else block
        if not block:
            return super().parallel_execute(cell, block, groupby, save_name, stream_output,
                                            progress_after, signal_on_interrupt)
        stream = self.stream_output if stream_output is None else stream_output
        signal = self.signal_on_interrupt if signal_on_interrupt is None else signal_on_interrupt
        ranks = self._targeted_ranks()
        with interrupts.PressTaken() as pressed:  # the stop button, see helpers/interrupts.py
            if pressed():
                raise interrupts.Interrupted("before the cell was sent: no rank got it.")
            # a dead controller is named by the wait below, once no answer came within its
            # first poll (50 ms): checking its processes before every cell would cost more
            result, rank_of = submit(self.view.client, ranks, cell, silent=False)
            self.last_result = result
            if save_name:
                self.shell.user_ns[save_name] = result
            try:
                with streamed_by_rank(result, rank_of) if stream else ExitStack():
                    wait_for_ranks(result, rank_of, self.cluster.cell_timeout,
                                   where=self.cluster.where, pressed=pressed,
                                   controller_gone=self.cluster.controller_gone)
                    # every rank has answered; its output may still be on the way (once a rank
                    # was interrupted, a second or more): streaming ends when this returns
                    wait_for_output(result, OUTPUT_WAIT, pressed)
                    if pressed():
                        said = stop(result, rank_of, signal and functools.partial(
                            self.cluster.signal, signal))
                        result.wait_for_output(STOPPED_OUTPUT_WAIT)
                        raise interrupts.Interrupted(said)
                    failed = failures(result, rank_of)
                    if DROPPED in failed.values():  # ipyparallel shows it as a success
                        raise RankError(describe_failure(failed, [], [], None), failed, [], [])
                    try:
                        result.get(0)
                    except ipp_error.CompositeError as e:
                        if stream and result._output_ready:
                            raise ipp_error.AlreadyDisplayedError(e) from None
                        raise
            finally:
                if not stream and result.ready():  # a rank still running has nothing to show
                    wait_for_output(result, OUTPUT_WAIT, pressed)
                    with labelled_by_rank(result, rank_of):
                        result.display_outputs(groupby)
